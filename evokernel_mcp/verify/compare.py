"""Helpers of verify's numerics, run inside the sandboxed child: poisoned allocations and bitwise equality
(the comparison to the reference is bar.py's). Pure torch; no I/O.

Unwritten detection: while the candidate runs, torch.empty / empty_like / empty_strided /
Tensor.new_empty return floating tensors filled with a poison (run A: NaN, run B: -320.0, exactly
representable in bf16/fp16/fp8). An output element that is NaN in run A and -320 in run B was never
written. This covers Triton launchers that allocate their output with torch.empty*, and ModelNew
buffers made the same way; an output made with torch.zeros cannot be checked (documented).
"""

from __future__ import annotations

import contextlib

SENTINEL = -320.0
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {  # dtype preset -> (atol, rtol)
    "float64": (1e-9, 1e-9), "fp32": (1e-4, 1e-4), "tf32": (1e-2, 5e-3), "bf16": (2e-2, 1.6e-2),
    "fp16": (2e-3, 2e-3), "fp8": (1.25e-1, 1.25e-1),
}


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
