"""Running error statistics over blocks of a big tensor, for the verify bar (verify/bar.py): index blocks that cover a
tensor in C order within a chunk of elements, and an accumulator of mismatches, NaN/Inf/unwritten counts, the
largest errors, the L2 sums and the first mismatch indices (all sums in float64, read at the end)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_INDICES = 10


def unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for d in reversed(shape):
        idx.append(flat % d if d else 0)
        flat = flat // d if d else 0
    return list(reversed(idx))


def blocks(shape: tuple[int, ...], chunk: int) -> Iterator[tuple]:
    """Index tuples covering a tensor of `shape` in C order, each a contiguous flat range <= chunk
    elements (a single index row may be bigger only when one innermost row exceeds chunk)."""
    n = math.prod(shape)
    if n <= chunk or len(shape) <= 1:
        if len(shape) == 1 and n > chunk:
            for s in range(0, n, chunk):
                yield (slice(s, min(s + chunk, n)),)
        else:
            yield ()
        return
    inner = math.prod(shape[1:])
    if inner <= chunk:
        rows = max(1, chunk // max(inner, 1))
        for s in range(0, shape[0], rows):
            yield (slice(s, min(s + rows, shape[0])),)
    else:
        for i in range(shape[0]):
            for rest in blocks(shape[1:], chunk):
                yield (i, *rest)


def finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def num(x: Any) -> float | str | list:
    if isinstance(x, complex):
        return [num(x.real), num(x.imag)]
    v = float(x)
    return v if math.isfinite(v) else str(v)


@dataclass
class Acc:
    """Running statistics over blocks (all sums in float64 on the output's device, read at the end)."""

    shape: tuple[int, ...]
    rms: float = 0.0
    mismatches: int = 0
    nan: int = 0
    inf: int = 0
    unwritten: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    err2: float = 0.0
    ref2: float = 0.0
    cross: float = 0.0
    both2: float = 0.0
    first: list[list[int]] = field(default_factory=list)

    def add(self, o, r, bad, unw, offset: int) -> None:
        import torch

        fin = torch.isfinite(o) & torch.isfinite(r)
        self.nan += int((torch.isnan(o) & ~unw).sum()) if unw is not None else int(torch.isnan(o).sum())
        self.inf += int(torch.isinf(o).sum())
        self.unwritten += int(unw.sum()) if unw is not None else 0
        self.mismatches += int(bad.sum())
        if len(self.first) < MAX_INDICES and self.mismatches:
            idx = torch.nonzero(bad)[: MAX_INDICES - len(self.first), 0].tolist()
            self.first += [unravel(offset + i, self.shape) for i in idx]
        o, r = o[fin], r[fin]
        if not o.numel():
            return
        err = (o - r).abs()
        self.max_abs = max(self.max_abs, float(err.max()))
        self.max_rel = max(self.max_rel, float((err / (r.abs() + self.rms).clamp_min(1e-300)).max()))
        self.err2 += float((err * err).sum())
        self.ref2 += float((r.abs() ** 2).sum())
        self.cross += float((o * r.conj()).real.sum()) if o.is_complex() else float((o * r).sum())
        self.both2 += float((o.abs() ** 2).sum() + (r.abs() ** 2).sum())

    def result(self, numel: int) -> dict[str, Any]:
        rel_l2 = math.sqrt(self.err2) / math.sqrt(self.ref2) if self.ref2 > 0 else (0.0 if self.err2 == 0 else None)
        return {
            "passed": self.mismatches == 0,
            "max_abs_err": finite_or_none(self.max_abs), "max_rel_err": finite_or_none(self.max_rel),
            "rel_l2_err": finite_or_none(rel_l2) if rel_l2 is not None else None,
            "calc_diff": finite_or_none(1.0 - 2.0 * self.cross / self.both2) if self.both2 > 0 else 0.0,
            "mismatches": self.mismatches,
            "first_mismatch_index": self.first[0] if self.first else None, "mismatch_indices": self.first,
            "nan_count": self.nan, "inf_count": self.inf, "unwritten_count": self.unwritten, "numel": numel,
        }


def examples(out, ref, indices: list[list[int]]) -> list[dict[str, Any]]:
    return [{"index": i, "got": num(out[tuple(i)].item()), "expected": num(ref[tuple(i)].item())}
            for i in indices[:3]]
