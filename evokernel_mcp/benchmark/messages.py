"""The messages of runner ops "benchmark" and "measure_ceilings" (built by benchmark/api.py and batch/cascade.py
in the server, validated by the runner on receipt; the reply validated by the server)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from evokernel_mcp.benchmark.models import Ceilings
from evokernel_mcp.models import Model
from evokernel_mcp.runtime.messages import Isolation, OpError
from evokernel_mcp.tasks import Task


class BenchmarkRequest(Model):
    task: Task
    candidate: str
    baseline: str = Field(default="pytorch", description="'pytorch' (the reference) or a second candidate's source.")
    shapes: list[str] = Field(min_length=1)
    options: dict[str, Any] = Field(description="benchmark/timing.py TimingOptions fields.")
    seed: int = 0
    ceilings: bool = True
    choice: dict[str, Any] | None = Field(default=None, description="How the shape sets were chosen (server's record).")
    control: bool = False
    confirm: bool = False
    budget_s: float = 280.0


class BenchmarkReply(Model):
    """Raw times per shape set and the checks; the statistics and the verdict are the server's (api.py)."""

    device_info: dict[str, Any] = Field(default_factory=dict)
    shapes: list[dict[str, Any]] = Field(default_factory=list, description="Per shape set: rounds, arms, checks.")
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None
    ceilings: dict[str, Any] | None = None
    error: OpError | None = None
    isolation: Isolation | None = None
    stdout: str = ""
    stderr: str = ""


class CeilingsRequest(Model):
    refresh: bool = False
    copy_bytes: int | None = None
    matmul_n: int | None = None


CeilingsReply = Ceilings
