"""Domain errors. All derive from ToolError so the agent reads their message (what failed, what to do).

Every error an agent sees also carries a machine-readable body (`ErrorBody`: `kind` from the closed
set `ERROR_KINDS`, a short `message`, the `next_call` to make, an optional `detail` for a person). The
MCP surface (evokernel_mcp/surface/) builds it from the exception with `error_body(exc)`; raise sites
may pass `next_call=` (and `kind=`) to say what the agent should do next.
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorKind = Literal[
    "bad_argument",    # an argument is unknown, missing, of the wrong type or out of range
    "not_found",       # a named thing (job, artifact, doc, task, shape set) does not exist
    "tool_missing",    # an external tool (profiler, compiler) is not installed here
    "unsupported",     # this host cannot do it (no GPU of that kind, target not available)
    "timeout",         # an external tool or a job ran past its limit
    "tool_failed",     # an external tool exited non-zero
    "parse_error",     # an external tool's output could not be read
    "job_failed",      # a long job failed or was cancelled (its error says why)
    "failed",          # any other failure the agent can act on (the message says how)
    "internal",        # a bug in the server: report it
]
ERROR_KINDS: tuple[str, ...] = ErrorKind.__args__  # type: ignore[attr-defined]


class ErrorBody(BaseModel):
    """The structured body of a tool error (structuredContent.error of an isError result)."""

    model_config = ConfigDict(extra="forbid")

    kind: ErrorKind = Field(description="What went wrong, from a closed set.")
    message: str = Field(description="What failed, in one or two sentences.")
    next_call: str | None = Field(default=None, description="The call to make next, e.g. \"list_tasks()\".")
    detail: str | None = Field(default=None, description="Longer text for a person (install steps, stderr tail).")


# Processes whose errors become {kind, message} on the wire and never reach the SDK: the sandboxed child
# (`python -m evokernel_mcp.runtime.child`, or a fork of the zygote, runtime/zygote.py) and the runner.
# Importing the SDK cost every child's start about 0.5 s (0.6 of its 0.7 s before torch, on a quiet 2-core VM),
# and every runner's 1.4 s of CPU.
WIRE_ONLY = ("evokernel_mcp.runtime.child", "evokernel_mcp.runtime.zygote", "evokernel_mcp.runtime.runner")


def _tool_error() -> type[Exception]:
    """The MCP SDK's ToolError; plain Exception in the processes of WIRE_ONLY."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) in WIRE_ONLY:
        return Exception
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError


ToolError = _tool_error()


class EvoError(ToolError):
    """Base of our errors: the message is written for the agent and says what to do."""

    kind: str = "failed"

    def __init__(self, message: str = "", *, next_call: str | None = None, kind: str | None = None,
                 detail: str | None = None):
        super().__init__(message)
        self.next_call = next_call
        self.detail = detail
        if kind is not None:
            self.kind = kind


class BadInput(EvoError):
    """The arguments are wrong in a way the schema cannot express."""

    kind = "bad_argument"


class ToolNotFound(EvoError):
    kind = "tool_missing"

    def __init__(self, tool: str, searched: list[str] | None = None, env_var: str | None = None, hint: str = ""):
        self.tool, self.searched, self.env_var, self.hint = tool, searched or [], env_var, hint
        where = f" (searched: {', '.join(self.searched)})" if self.searched else ""
        env = f"; set {env_var} to its path" if env_var else ""
        super().__init__(f"{tool} not found{where}{env}. {hint}".strip(),
                         next_call="query_rocminfo() to see what this host has; `evokernel-mcp doctor` lists "
                         "the missing toolchains", detail=hint or None)

    def short(self) -> str:
        env = f"; set {self.env_var} to its path" if self.env_var else ""
        return f"{self.tool} is not installed on this host{env}."


class ToolTimeout(EvoError):
    kind = "timeout"

    def __init__(self, tool: str, timeout_s: float, stderr_tail: str = ""):
        self.tool, self.timeout_s, self.stderr_tail = tool, timeout_s, stderr_tail
        tail = f"\nstderr tail:\n{stderr_tail}" if stderr_tail else ""
        super().__init__(f"{tool} did not finish within {timeout_s:g} s and was killed.{tail}",
                         detail=stderr_tail or None)


class ToolFailed(EvoError):
    kind = "tool_failed"

    def __init__(self, tool: str, returncode: int, stderr_tail: str = ""):
        self.tool, self.returncode, self.stderr_tail = tool, returncode, stderr_tail
        tail = f"\nstderr tail:\n{stderr_tail}" if stderr_tail else ""
        super().__init__(f"{tool} failed with exit code {returncode}.{tail}", detail=stderr_tail or None)


class ParseError(EvoError):
    kind = "parse_error"

    def __init__(self, tool: str, where: str, version: str | None = None, message: str = ""):
        self.tool, self.where, self.version = tool, where, version
        ver = f" {version}" if version else ""
        super().__init__(f"could not parse {tool}{ver} output at {where}: {message}".rstrip(": "))


class NotFound(EvoError):
    """A named thing (job, artifact, doc, task) does not exist."""

    kind = "not_found"


_NEXT_BY_WORD = (("job", "list_jobs()"), ("artifact", "list_jobs() or the artifact_id of a recent result"),
                 ("doc", "list_docs() or search_docs(query)"), ("task", "list_tasks()"),
                 ("shape", "get_task(task) for its shape sets"))


def error_body(exc: BaseException, *, max_message_chars: int = 600) -> ErrorBody:
    """The structured body of any exception a tool raised (unexpected ones are 'internal')."""
    if isinstance(exc, ToolNotFound):
        return ErrorBody(kind="tool_missing", message=exc.short(), next_call=exc.next_call, detail=exc.detail)
    if isinstance(exc, EvoError):
        msg = str(exc)
        detail = exc.detail
        if len(msg) > max_message_chars:
            detail = detail or msg
            msg = msg[:max_message_chars].rstrip() + " ..."
        kind = exc.kind if exc.kind in ERROR_KINDS else "failed"
        nxt = exc.next_call
        if nxt is None and kind == "not_found":
            low = msg.lower()
            nxt = next((call for word, call in _NEXT_BY_WORD if word in low), None)
        return ErrorBody(kind=kind, message=msg, next_call=nxt, detail=detail)
    if isinstance(exc, ToolError):
        return ErrorBody(kind="failed", message=str(exc)[:max_message_chars])
    return ErrorBody(kind="internal", message=f"internal error ({type(exc).__name__}); the server log has the "
                     "traceback", next_call="report it; retrying the same call will fail the same way")
