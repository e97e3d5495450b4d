"""Registry of runner ops: name -> "module:function", resolved INSIDE the runner process.

Each op is `fn(payload: dict, progress: Callable[[float, float, str], None]) -> dict` and runs in
the job's scratch directory with fd 1/2 captured. It may raise: the runner turns the exception into
an `error` event (kind "exception", or "gpu_fault"/"oom" from the device's message).

A caller may also pass a "module:function" string as the op name (for ops living in other areas,
e.g. a profiler runner), so adding an op needs no edit here; the names below are the stable ones.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

OPS: dict[str, str] = {
    "ping": "evokernel_mcp.runtime.ops:op_ping",
    "verify": "evokernel_mcp.verify.runner_side:runner_verify",
    "verify_steps": "evokernel_mcp.verify.runner_side:runner_verify_steps",
    "benchmark": "evokernel_mcp.benchmark.runner_side:runner_benchmark",
    "profile_session": "evokernel_mcp.profile.runner_side:runner_profile_session",
}

Progress = Callable[[float, float, str], None]
OpFn = Callable[[dict[str, Any], Progress], dict[str, Any]]


def target_of(op: str) -> str:
    """The "module:function" an op name stands for (ValueError if it is neither a name nor a target)."""
    if op in OPS:
        return OPS[op]
    if ":" in op and all(part.replace(".", "").replace("_", "").isalnum() for part in op.split(":", 1)):
        return op
    raise ValueError(f"unknown runner op {op!r}; known: {', '.join(sorted(OPS))} (or pass 'module:function')")


def resolve(op: str) -> OpFn:
    module, _, func = target_of(op).partition(":")
    return getattr(importlib.import_module(module), func)


def op_ping(payload: dict[str, Any], progress: Progress) -> dict[str, Any]:  # noqa: ARG001
    """Round trip with no work: pid, cwd and the versions imported at runner start."""
    info: dict[str, Any] = {"pid": os.getpid(), "cwd": os.getcwd(), "python": sys.version.split()[0]}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
    return info
