"""Tamper check inside a worker: did an op (i.e. candidate code) replace torch functions, the timer,
harness functions, or flip a global torch flag?

Candidate code runs in the worker process next to our verify/benchmark code. Replacing torch.softmax
makes the reference agree with the candidate; replacing torch.cuda.Event or a harness function fakes a
verdict or a time; turning on TF32 or changing the thread count changes the baseline of this job and,
since the worker is long-lived, of every later job. The worker (worker.py) snapshots what is watched
here before each op and compares after it: any change fails the op (kind "bad_candidate") and the
worker is replaced, so the next job starts clean. Pure Python; cheap (a few ms per op).

This is a tripwire, not a sandbox: code that runs in-process can always hide better. It catches the
plain monkey-patch, the usual shortcut of a reward-hacking agent.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

_MODULES = ("builtins", "time", "math", "copy", "torch", "torch.nn.functional", "torch.cuda", "torch.linalg",
            "torch.fft", "torch.special", "torch.testing", "torch.profiler", "torch.autograd.profiler")
_CLASSES = (("torch", "Tensor"), ("torch.nn", "Module"), ("torch.cuda", "Event"), ("torch.cuda", "Stream"),
            ("torch.profiler", "profile"),  # the profiler feeds the activity clock (benchmark/activity.py)
            ("torch.autograd.profiler", "profile"))
_HARNESS_PREFIX = "evokernel_mcp."
_SCALARS = (bool, int, float, str, bytes, type(None))


def _flags() -> dict[str, Any]:
    """Process-wide torch settings a candidate could change for the baseline and for later jobs."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    getters = {
        "default_dtype": lambda: torch.get_default_dtype(),
        "num_threads": lambda: torch.get_num_threads(),
        "grad_enabled": lambda: torch.is_grad_enabled(),
        "deterministic_algorithms": lambda: torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": lambda: torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
        "cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
    }
    out: dict[str, Any] = {}
    for name, get in getters.items():
        try:
            out[name] = get()
        except Exception:  # noqa: BLE001 - a setting this torch build lacks is simply not watched
            pass
    return out


def _namespaces() -> dict[str, dict[str, Any]]:
    """Functions and classes by name: torch's public API, a few classes, builtins, and every loaded harness
    module (callables only: module-level caches may legitimately be rebound)."""
    spaces: dict[str, dict[str, Any]] = {}
    for name in _MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            spaces[name] = {k: v for k, v in vars(mod).items() if not k.startswith("_") and callable(v)}
    for modname, cls in _CLASSES:
        obj = getattr(sys.modules.get(modname), cls, None)
        if isinstance(obj, type):
            spaces[f"{modname}.{cls}"] = dict(vars(obj))
    for name, mod in list(sys.modules.items()):
        if name.startswith(_HARNESS_PREFIX) and mod is not None:
            spaces[name] = {k: v for k, v in vars(mod).items() if callable(v) and not isinstance(v, type(sys))}
    return spaces


def snapshot() -> dict[str, Any]:
    """What is watched, by identity (taken before an op)."""
    return {"spaces": _namespaces(), "flags": _flags()}


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and isinstance(a, _SCALARS) and a == b)


def changes(before: dict[str, Any]) -> list[str]:
    """Names replaced or settings changed since `before` (names added since are not changes)."""
    now = snapshot()
    out = []
    for space, names in before["spaces"].items():
        cur = now["spaces"].get(space)
        if cur is None:
            continue
        out += [f"{space}.{k}" for k, v in names.items() if k in cur and not _same(v, cur[k])]
        out += [f"{space}.{k} (deleted)" for k in names if k not in cur]
    out += [f"torch setting {k}: {v!r} -> {now['flags'].get(k)!r}" for k, v in before["flags"].items()
            if now["flags"].get(k) != v]
    return out


_rebase: Callable[[], None] | None = None


def arm_rebase(fn: Callable[[], None] | None) -> None:
    """Worker: before each op, the one-shot that takes the op's snapshot again; None after the op."""
    global _rebase
    _rebase = fn


def rebase() -> bool:
    """Harness only, first thing in an op and before any candidate code is loaded: take the op's snapshot
    again, after the harness's own lazy imports (torch.profiler's first session imports torch._dynamo, which
    rebinds torch.manual_seed). One shot per op: the harness uses it before a candidate could, so a
    candidate calling it later changes nothing. Returns whether a snapshot was taken."""
    global _rebase
    fn, _rebase = _rebase, None
    if fn is None:
        return False
    fn()
    return True


def tamper_error(changed: list[str]) -> dict[str, Any]:
    """The ErrorInfo dict for an op that changed watched state."""
    shown = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8 else "")
    return {"kind": "bad_candidate", "detail": "\n".join(changed[:200]),
            "message": f"the candidate changed {shown} inside the worker. Results computed after such a change "
                       "cannot be trusted (the reference, the timer or the next job would use it), so this run "
                       "is failed and the worker replaced. Do not monkey-patch torch, the harness or torch's "
                       "global settings: define your own functions and pass options to your own kernels."}
