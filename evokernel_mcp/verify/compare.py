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


BLOCK_ELEMS = 1 << 24  # elements compared at once: the temporaries are a few bytes per element of one block
_WEIGHT = 0x9E3779B97F4A7C15 - (1 << 64)  # an odd 64-bit multiplier (as int64): positions weighted apart


# a digest's blocks: its temporaries (the block as int64, the positions' weights, their product) are 16 MiB each.
# It runs just before a forward (the inputs' digest in the reference's and the candidate's processes), and the
# allocator keeps what it freed cached: blocks of BLOCK_ELEMS could leave up to 0.5 GiB of 128 MiB pieces there that
# a forward's outputs and working memory cannot use (the likely cause, inferred not measured, of the reference's
# process reading 0.5 GiB above PyTorch alone for 68, 69 and 74 of KernelBench level 1 on an H100)
DIGEST_BLOCK_ELEMS = 1 << 21


def digest(t, *, block_elems: int = DIGEST_BLOCK_ELEMS) -> tuple[int, int]:
    """Two 64-bit wrapping sums over t's bits, in flat blocks (temporaries of one block, never of t's size):
    the plain sum and one weighted by position. Equal for unchanged data; a changed element changes the plain
    sum, and changes that cancel in it (two elements swapped, +d here and -d there) change the weighted one.
    What verify uses instead of a second copy of the candidate's inputs when the job's memory plan asks
    (runtime/devplan.py: a digest is not proof against a candidate that forges it on purpose, nor is the copy it
    replaces, both being held in the candidate's own process; it finds a kernel that writes into its inputs).
    The sums wrap on t's device (int64: the same value mod 2**64 as summing the blocks' sums on the host) and are
    read once, so small blocks cost no synchronisation each."""
    import torch

    if t.is_complex():
        t = torch.view_as_real(t)
    x = _bits(t).reshape(-1)
    plain = torch.zeros((), dtype=torch.int64, device=x.device)
    weighted = torch.zeros((), dtype=torch.int64, device=x.device)
    for s in range(0, x.numel(), max(1, block_elems)):
        blk = x[s:s + block_elems].to(torch.int64)  # (x itself where t is 8-byte: never written to)
        pos = torch.arange(s, s + blk.numel(), device=blk.device, dtype=torch.int64).mul_(_WEIGHT).add_(1)
        plain += blk.sum()
        weighted += (blk * pos).sum()
    return int(plain) % (1 << 64), int(weighted) % (1 << 64)


def bitwise_equal(a, b, mask=None, *, block_elems: int = BLOCK_ELEMS) -> bool:
    """a and b hold the same bits (where `mask`, a bool tensor of their shape, is True), in flat blocks of
    block_elems: never a boolean index (x[mask] makes an int64 index of ndim x the selected elements first, 32
    bytes per element of a 4-d output) and never a temporary of the whole tensor's size."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = _bits(a).reshape(-1), _bits(b).reshape(-1)
    m = mask.reshape(-1) if mask is not None else None
    if m is not None and m.numel() != x.numel():
        return False
    for s in range(0, x.numel(), max(1, block_elems)):
        e = min(s + block_elems, x.numel())
        same = x[s:e] == y[s:e]
        if m is not None:
            same |= ~m[s:e].to(same.device)
        if not bool(same.all()):
            return False
    return True


def unwritten_mask(a, b, *, block_elems: int = BLOCK_ELEMS):
    """Elements still holding the poison after both runs (NaN in run A, SENTINEL in run B; the real part of
    complex outputs), as one bool tensor of a's shape, filled block by block (1 byte per element, no
    floating temporaries of the whole output)."""
    import torch

    out = torch.empty(a.shape, dtype=torch.bool, device=a.device)
    aa = (a.real if a.is_complex() else a).reshape(-1)
    bb = (b.real if b.is_complex() else b).reshape(-1)
    flat = out.view(-1)
    for s in range(0, aa.numel(), max(1, block_elems)):
        e = min(s + block_elems, aa.numel())
        flat[s:e] = torch.isnan(aa[s:e]) & (bb[s:e] == SENTINEL)
    return out
