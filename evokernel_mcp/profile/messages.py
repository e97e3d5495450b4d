"""The messages of runner op "profile_session" (built by profile/collect.py in the server, validated by the
runner on receipt; the reply validated by the server)."""

from __future__ import annotations

from pydantic import Field

from evokernel_mcp.models import Model
from evokernel_mcp.runtime.messages import Isolation, OpError
from evokernel_mcp.tasks import Task


class SessionRequest(Model):
    """The payload of op "profile_session" (built by profile/collect.py in the server)."""

    task: Task
    candidate: str
    shape: str | None = None
    seed: int = 0
    warmup: int = 1
    iters: int = 1
    profiler: list[str] = Field(description="The profiler's argv before '--' (paths relative to the scratch dir).")
    files_in: dict[str, str] = Field(default_factory=dict, description="Plain name -> text, written before the start.")
    collect: list[str] = Field(default_factory=list, description="Relative files/dirs to read back.")
    exports: list[list[str]] = Field(default_factory=list, description="Commands run after the session; stdout kept.")
    export_if: str | None = Field(default=None, description="Run the exports only when this file was written.")
    binds: list[str] = Field(default_factory=list, description="Directories of the profiler, bound read-only.")
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 600.0


class ExportOut(Model):
    returncode: int | None
    stdout: str = ""
    stderr: str = ""


class SessionReply(Model):
    returncode: int | None = Field(default=None, description="The profiler's exit status; None: killed at the limit.")
    timed_out: bool = False
    stderr: str = Field(default="", description="The profiler's own messages (its stderr), tail.")
    files: dict[str, str] = Field(default_factory=dict, description="Relative path -> text.")
    binary: dict[str, str] = Field(default_factory=dict, description="Relative path -> base64 (reports).")
    refused: list[str] = Field(default_factory=list, description="Named outputs not read: links, FIFOs, too big.")
    exports: list[ExportOut] = Field(default_factory=list)
    error: OpError | None = None
    isolation: Isolation | None = None
