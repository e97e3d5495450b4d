"""Arguments and results of evaluate_batch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evokernel_mcp.models import ErrorInfo, Model, Provenance
from evokernel_mcp.shape_defaults import SkippedShape

StageName = Literal["compile", "verify_small", "verify", "benchmark"]
STAGE_ORDER: tuple[str, ...] = ("compile", "verify_small", "verify", "benchmark")


class BatchCandidate(Model):  # no docstring: it would be listed in tools/list on every turn
    name: str = Field(min_length=1, max_length=100)
    source: str = Field(min_length=1)


class CompileSpec(Model):
    """compile_kernel's arguments except the source (each candidate's source is compiled)."""

    language: Literal["triton", "hip", "cuda"]
    kernel: str = Field(min_length=1, max_length=256)
    target: str | None = None
    signature: dict[str, str] | None = None
    constexprs: dict[str, int | float | bool | str] | None = None
    options: dict[str, Any] | None = None


class BatchRow(Model):
    """One candidate's line of the ranked table."""

    name: str
    valid: bool = Field(description="Passed every stage it was given (and its benchmark is valid).")
    failed_stage: str | None = Field(default=None, description="compile, verify_small, verify or benchmark.")
    reason: str | None = Field(default=None, description="Why it failed: class and first evidence.")
    median_ms: float | None = Field(default=None, description="Candidate's median time on the benchmark shape set.")
    speedup: float | None = Field(default=None, description="Baseline median / candidate median (paired).")
    speedup_ci: tuple[float, float] | None = None
    result_id: str | None = Field(default=None, description="Journal result id (with experiment), else the "
                                  "artifact id of its full stage results (read_artifact).")
    device: str | None = Field(default=None, description="Where its last stage ran.")


class BatchResult(Model):
    """The ranked table: valid candidates first by speedup (then median time), then the failed ones by how
    far they got."""

    state: Literal["queued", "running", "done", "failed", "cancelled"] = "done"
    ranked: list[BatchRow] = Field(default_factory=list)
    task: str | None = None
    stages: list[str] = Field(default_factory=list, description="The cascade each candidate went through.")
    small_shapes: list[str] | None = Field(default=None, description="Shape sets of verify_small.")
    small_overrides: dict[str, Any] | None = Field(default=None, description="Scaled sizes of verify_small "
                                                   "(KernelBench reference with one shape set).")
    verify_shapes: list[str] = Field(default_factory=list)
    benchmark_shape: str | None = None
    shapes_skipped: list[SkippedShape] = Field(default_factory=list, description="Shape sets not run by default "
                                               "on the batch's devices, each with why.")
    shape_rule: str | None = Field(default=None, description="How the shape sets were chosen, per device.")
    overrides: dict[str, Any] | None = Field(default=None, description="Size overrides applied to the reference.")
    counts: dict[str, int] = Field(default_factory=dict, description="valid, and failed per stage.")
    executor: str | None = None
    slots: int | None = Field(default=None, description="Devices the batch ran on concurrently.")
    wall_s: float | None = None
    error: ErrorInfo | None = None
    job_id: str | None = Field(default=None, description="Set when not finished within wait_s: call "
                               "job_result(job_id).")
    message: str | None = None
    provenance: list[Provenance] = Field(default_factory=list)
