"""Result pieces shared by every tool: provenance, diagnostics, errors, job references."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    """Base for every result model: unknown fields are refused, so typos fail loudly."""

    model_config = ConfigDict(extra="forbid")


class Provenance(Model):
    """Where one number (or group of numbers) came from."""

    field: str = Field(description="Result field (dotted path, e.g. 'devices[0].lds_bytes_per_workgroup').")
    source: str = Field(
        description="What produced it: a tool ('rocminfo', 'nvidia-smi', 'torch', 'ncu', 'rocprofv3', "
        "'triton.compile', 'clang-19'), 'measured' with the device, or a doc file path."
    )
    detail: str | None = Field(default=None, description="Version, device, cited source, or formula.")


class Diagnostic(Model):
    """A compiler/runtime message mapped to the user's source."""

    line: int | None = Field(default=None, description="1-based line in the user's source, when known.")
    column: int | None = Field(default=None, description="1-based column, when known.")
    severity: Literal["error", "warning", "note", "remark"] = "error"
    message: str


class ErrorInfo(Model):
    """Why a job did not produce a result (the candidate crashed, hung, faulted ...)."""

    kind: Literal[
        "timeout", "crash", "exception", "gpu_fault", "oom", "compile_error", "bad_candidate",
        "cancelled", "internal",
    ]
    message: str
    detail: str | None = None


class ToolchainInfo(Model):
    name: str
    version: str | None = None
    path: str | None = None


class JobRef(Model):
    """Returned instead of a result when a job outlives the call's wait_s."""

    job_id: str
    kind: str
    state: Literal["queued", "running", "done", "failed", "cancelled"]
    message: str = Field(
        default="Not finished within wait_s. Call job_result(job_id, wait_s) to fetch the result, "
        "job_status(job_id) to look, cancel_job(job_id) to stop it."
    )
