"""How a sandboxed child failed, as the runner sees it (runtime/child_proc.py raises it), and whether a failed receive
was our own device running out of memory (out_of_device_memory)."""

from __future__ import annotations

from typing import Any

# What a child may say went wrong in its op (child.py _error; the kinds of ErrorInfo); "timeout", "crash",
# "internal" and "cancelled" are the runner's to say, and a kind outside the list is a protocol violation.
CHILD_KINDS = ("exception", "oom", "gpu_fault", "bad_candidate", "compile_error", "harness", "too_big",
               "missing_module")


class ChildFailed(Exception):
    """A child did not answer properly: it crashed, hung, faulted, lied about its frames, or its op raised."""

    def __init__(self, kind: str, message: str, detail: str | None = None):
        super().__init__(message)
        self.kind, self.message, self.detail = kind, message, detail
        self.role: str | None = None  # the process's role and the limit it hit (limits.attribute)
        self.limit: str | None = None

    def again(self, kind: str, message: str) -> "ChildFailed":
        """The same failure reworded (a caller naming where it happened), the process's role and limit kept."""
        out = ChildFailed(kind, message, self.detail)
        out.role, out.limit = self.role, self.limit
        return out

    def info(self) -> dict[str, Any]:
        out = {"kind": self.kind, "message": self.message, "detail": self.detail}
        return out | ({"role": self.role} if self.role else {}) | ({"limit": self.limit} if self.limit else {})


def out_of_device_memory(e: BaseException, itself: bool = False) -> bool:
    """A FrameError caused by our own device allocation failing (the courier's VMM import or copy, torch's
    allocator): judged by the exception types along the cause chain, never by text the peer could have put in
    a header (a dtype name, a shape)."""
    import sys

    from evokernel_mcp.runtime.cuda_vmm import VmmError
    from evokernel_mcp.runtime.protocol import classify_text

    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    seen = e if itself else e.__cause__
    while seen is not None:
        if (oom_type is not None and isinstance(seen, oom_type)) or \
                (isinstance(seen, VmmError) and classify_text(str(seen)) == "oom"):
            return True
        seen = seen.__cause__
    return False
