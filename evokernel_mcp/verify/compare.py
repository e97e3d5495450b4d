"""The numerics of verify, run inside the worker: poisoned allocations, comparison to a float64
reference, bitwise determinism, input mutation. Pure torch; no I/O.

Unwritten detection: while the candidate runs, torch.empty / empty_like / empty_strided /
Tensor.new_empty return floating tensors filled with a poison (run A: NaN, run B: -320.0, exactly
representable in bf16/fp16/fp8). An output element that is NaN in run A and -320 in run B was never
written. This covers Triton launchers that allocate their output with torch.empty*, and ModelNew
buffers made the same way; an output made with torch.zeros cannot be checked (documented).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

SENTINEL = -320.0
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {  # dtype preset -> (atol, rtol)
    "float64": (1e-9, 1e-9), "fp32": (1e-4, 1e-4), "tf32": (1e-2, 5e-3), "bf16": (2e-2, 1.6e-2),
    "fp16": (2e-3, 2e-3), "fp8": (1.25e-1, 1.25e-1),
}
PRESET_OF_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8",
                   "float8_e5m2": "fp8", "float64": "float64"}
MAX_INDICES = 10


@contextlib.contextmanager
def poisoned_allocations(value: float):
    """Make torch's uninitialised allocators return floating tensors filled with `value`."""
    import torch

    originals = (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty)

    def fill(t):
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
            with torch.no_grad():
                t.fill_(value)
        return t

    torch.empty = lambda *a, **k: fill(originals[0](*a, **k))
    torch.empty_like = lambda *a, **k: fill(originals[1](*a, **k))
    torch.empty_strided = lambda *a, **k: fill(originals[2](*a, **k))
    torch.Tensor.new_empty = lambda self, *a, **k: fill(originals[3](self, *a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty = originals


def as_tensors(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in out):
        return list(out)
    raise TypeError(f"expected a tensor or a tuple of tensors, got {type(out).__name__}")


def _bits(t):
    import torch

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()]) if t.is_floating_point() else t


def bitwise_equal(a, b, mask=None) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = _bits(a), _bits(b)
    if mask is not None:
        x, y = x[mask], y[mask]
    return bool(torch.equal(x, y))


def _unravel(flat_idx: list[int], shape) -> list[list[int]]:
    out = []
    for f in flat_idx:
        idx = []
        for d in reversed(list(shape)):
            idx.append(f % d if d else 0)
            f = f // d if d else 0
        out.append(list(reversed(idx)))
    return out


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def compare(out, ref64, run_b, atol: float, rtol: float) -> dict[str, Any]:
    """Stats of one output tensor (run A) vs the float64 reference; run_b gives unwritten/determinism."""
    import torch

    if tuple(out.shape) != tuple(ref64.shape):
        return {"passed": False, "note": f"output shape {list(out.shape)} != reference {list(ref64.shape)}"}
    o = out.detach().cpu()
    o = o.double() if o.dtype == torch.float64 else o.float().double()
    r = ref64.detach().cpu()
    b = run_b.detach().float().double().cpu()
    unwritten = torch.isnan(o) & (b == SENTINEL)
    nan = torch.isnan(o) & ~unwritten
    inf = torch.isinf(o)
    err = (o - r).abs()
    bad = ~(err <= atol + rtol * r.abs()) | unwritten
    fin = torch.isfinite(o)
    n_bad = int(bad.sum())
    first = _unravel(torch.nonzero(bad.flatten())[:MAX_INDICES, 0].tolist(), o.shape) if n_bad else []
    ef, rf, of = err[fin], r[fin], o[fin]
    rel = ef / (rf.abs() + atol) if ef.numel() else ef
    denom = float((of * of + rf * rf).sum())
    return {
        "passed": n_bad == 0,
        "max_abs_err": _finite_or_none(float(ef.max())) if ef.numel() else None,
        "max_rel_err": _finite_or_none(float(rel.max())) if ef.numel() else None,
        "rel_l2_err": _finite_or_none(float(ef.norm() / max(float(rf.norm()), 1e-300))) if ef.numel() else None,
        "calc_diff": _finite_or_none(1.0 - 2.0 * float((of * rf).sum()) / denom) if denom > 0 else 0.0,
        "mismatches": n_bad,
        "first_mismatch_index": first[0] if first else None,
        "mismatch_indices": first,
        "mismatch_examples": [{"index": i, "got": _num(o[tuple(i)]), "expected": _num(r[tuple(i)])}
                              for i in first[:3]],
        "nan_count": int(nan.sum()), "inf_count": int(inf.sum()), "unwritten_count": int(unwritten.sum()),
        "numel": o.numel(),
    }


def _num(t) -> float | str:
    v = float(t)
    return v if math.isfinite(v) else str(v)


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine per-output stats of a tuple output into one case record."""
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {"passed": all(p["passed"] for p in parts)}
    for key in ("mismatches", "nan_count", "inf_count", "unwritten_count", "numel"):
        out[key] = sum(p.get(key) or 0 for p in parts)
    for key in ("max_abs_err", "max_rel_err", "rel_l2_err", "calc_diff"):
        vals = [p[key] for p in parts if p.get(key) is not None]
        out[key] = max(vals) if vals else None
    for i, p in enumerate(parts):
        if p.get("mismatches") or p.get("note"):
            out["first_mismatch_index"] = p.get("first_mismatch_index")
            out["note"] = p.get("note") or f"first mismatch in output {i}"
            break
    return out
