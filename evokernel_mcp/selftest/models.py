"""Models of the self-test: one row per step, the whole report, and the capture manifest."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evokernel_mcp.models import Model

Status = Literal["pass", "fail", "skip", "degraded"]


class StepResult(Model):
    name: str
    tool: str = Field(description="The MCP tool the step calls.")
    status: Status
    duration_s: float | None = None
    detail: str = Field(default="", description="What it showed (pass), what went wrong (fail/degraded) or why it "
                        "did not run on this host (skip).")
    data: dict[str, Any] = Field(default_factory=dict, description="A few numbers of the result, with their source.")


class SelftestReport(Model):
    host: str
    started_utc: str
    backend: str | None = None
    devices: list[str] = Field(default_factory=list)
    versions: dict[str, str | None] = Field(default_factory=dict)
    steps: list[StepResult] = Field(default_factory=list)
    capture_dir: str | None = None
    exit_code: int = 0

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "skip": 0, "degraded": 0}
        for s in self.steps:
            out[s.status] += 1
        return out


class CaptureFile(Model):
    path: str = Field(description="Relative to the bundle root, in the fixtures layout (<tool>/<file>).")
    command: str = Field(description="The command line that produced it (or where it was copied from).")
    parser: str | None = Field(default=None, description="Name of the parser that reads it (bundle.PARSERS).")
    returncode: int | None = None
    bytes: int = 0
    note: str = ""


class Manifest(Model):
    created_utc: str
    host: str
    backend: str | None = None
    gpus: list[dict[str, Any]] = Field(default_factory=list)
    rocm_version: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None
    versions: dict[str, str | None] = Field(default_factory=dict)
    files: list[CaptureFile] = Field(default_factory=list)
    skipped: list[dict[str, str]] = Field(default_factory=list, description="{what, why} not captured here.")
