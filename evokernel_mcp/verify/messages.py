"""The messages of runner ops "verify" and "verify_steps" (built by verify/api.py and batch/cascade.py in the
server, validated by the runner on receipt; the reply validated by the server)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from evokernel_mcp.models import Model
from evokernel_mcp.runtime.messages import Isolation, OpError
from evokernel_mcp.tasks import Task


class VerifyStep(Model):
    """One verify of the candidate: the task, its shape sets and seeds, the bar."""

    task: Task
    shapes: list[str]
    seeds: list[int]
    tolerance: dict[str, Any] | None = None
    stop_on_first_failure: bool = False
    probe: bool = True
    overrides: dict[str, Any] = Field(default_factory=dict, description="KernelBench constants set (server's record).")
    choice: dict[str, Any] | None = Field(default=None, description="How the shape sets were chosen (server's record).")
    budget_s: float = 280.0


class VerifyRequest(VerifyStep):
    """Op "verify": one step against the candidate's source."""

    candidate: str


class VerifyStepsRequest(Model):
    """Op "verify_steps": several steps in turn against ONE candidate child."""

    candidate: str
    steps: list[VerifyStep] = Field(min_length=1)
    budget_s: float = 280.0


class VerifyReply(Model):
    """Op "verify"'s result (one per step for "verify_steps"): the judged cases, or why there are none."""

    cases: list[dict[str, Any]] = Field(default_factory=list, description="verify/case.py judge() per case.")
    platform: str | None = None
    overrides_applied: dict[str, Any] = Field(default_factory=dict)
    reference_precision: str | None = None
    error: OpError | None = None
    isolation: Isolation | None = None
    stdout: str = ""
    stderr: str = ""


class VerifyStepsReply(Model):
    steps: list[VerifyReply]
