"""What the job manager (runtime/jobs.py) says about its jobs: their states, status, outcome and one-line summary,
and the scope the MCP surface sets around one tool call."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from evokernel_mcp.models import ErrorInfo, Model, Provenance

JobState = Literal["queued", "running", "done", "failed", "cancelled"]
FINAL: tuple[str, ...] = ("done", "failed", "cancelled")


@dataclass
class CallScope:
    """Set by the MCP surface around one tool call: who is calling (owner: the MCP connection), which
    tool, whether its jobs are detached, and the ids of the jobs the call submitted."""

    tool: str = ""
    owner: str | None = None
    detached: bool = False
    summary: str = ""
    job_ids: list[str] = field(default_factory=list)


CALL_SCOPE: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar("evokernel_call_scope", default=None)


class JobProgress(Model):
    done: float
    total: float
    message: str = ""


class JobStatus(Model):
    """Where a job stands. Times are seconds (epoch for *_at)."""

    job_id: str
    kind: str
    tool: str | None = Field(default=None, description="The tool call that started it.")
    device: str
    state: JobState
    detached: bool = Field(default=False, description="Keeps running when its caller goes away.")
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    elapsed_s: float = Field(description="Seconds since it started running (0 while queued).")
    timeout_s: float
    queue_position: int | None = Field(default=None, description="Jobs ahead of it on its device, while queued.")
    progress: JobProgress | None = None
    error: ErrorInfo | None = None
    provenance: list[Provenance] = Field(default_factory=lambda: [Provenance(
        field="state", source="evokernel job manager", detail="this server process; times from its clock")])


@dataclass
class JobOutcome:
    """What `wait` saw: the state, and the result model (done) or the error (failed/cancelled)."""

    job_id: str
    kind: str
    device: str
    state: JobState
    result: BaseModel | None = None
    error: ErrorInfo | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINAL


class JobSummary(Model):
    """One line of list_jobs."""

    job_id: str
    tool: str
    state: JobState
    age_s: float = Field(description="Seconds since it was submitted.")
    summary: str = Field(description="What it is and where it stands (latest progress message).")
    detached: bool = False
