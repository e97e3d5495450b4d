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
        "cancelled", "internal", "harness", "too_big", "missing_module",
    ]
    message: str
    detail: str | None = None
    role: str | None = Field(default=None, description="The process that failed: candidate, reference, runner ... "
                             "(when known).")
    limit: str | None = Field(default=None, description="The limit it went over (oom / timeout from a limit), e.g. "
                              "'memory limit 2.00 GiB (RLIMIT_DATA per process + cgroup (the process tree))'.")


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


class JobHandle(Model):
    """The same handle from every long tool (verify_vs_pytorch, benchmark, profile_pmc, thread_trace,
    measure_ceilings, evaluate_batch) when its job is not finished within wait_s."""

    job_id: str = Field(description="Pass to job_result / job_status / cancel_job.")
    tool: str = Field(description="The tool whose job it is.")
    state: Literal["queued", "running", "done", "failed", "cancelled"]
    age_s: float = Field(description="Seconds since it was submitted.")
    progress: str | None = Field(default=None, description="Latest progress: 'done/total message'.")
    detached: bool = Field(default=False, description="Keeps running when the calling session ends.")
    next_call: str = Field(description="The call that fetches the result.")


class Truncation(Model):
    """Set when the default result was cut to fit the size budget; the full result is an artifact."""

    artifact_id: str = Field(description="read_artifact(artifact_id) pages the full result (result.json).")
    uri: str = Field(description="The same as an MCP resource.")
    full_chars: int = Field(description="Size of the full result as JSON.")
    omitted: list[str] = Field(default_factory=list, description="What was cut, e.g. 'dispatches: 3 of 8 kept'.")
