"""Every timed repetition's output checked, cheaply: per-repetition input contents and probes.

Input contents. An arm's timed input sets (blocks.BlockTimer.arg_sets, N of them at different addresses) are
refilled before EVERY repetition, outside its timed window, with one of C input contents (the timed case's
inputs and the refill pool: inputs the task's get_inputs made with other seeds). Repetition g uses input set
g % N holding content `content_of(g, N, C)`; two consecutive uses of one input set always hold different
contents, and each refill bumps the tensors' version counters. So an answer cached by address, by
(data_ptr, _version) or by "same call as last time" is the answer to other inputs: a wrong answer.

Probes. After each repetition (outside its timed window) the arm's harness code reads its output at a few
positions (row g % T of a position table the RUNNER drew and sent: `position_table`) into a float64 row;
every arm does the same work, so no arm pays for checks the others skip. The runner knows each repetition's
content, has the reference's outputs for every content (float64 where it fit), and judges every probed value
by verify's bar (bar.leaf_bar, the same function verify's judge builds its bar with: RMS-floored tol of the
output dtype, 2 x PyTorch's own error as the floor, or without a float64 reference 2 x tol with the native
run-to-run spread and sampled error as the floor; integer and bool outputs exact): `ProbeBar.check`. The
extra native check of an ill-conditioned output is left to the whole-output checks: the probes are never
stricter than verify. A repetition that skipped work, replayed a stale or cached answer,
or computed in a lower precision than the problem's dtype fails here, whichever repetition it was.

Chunk sums. The position table is in the arm's process, so a candidate could read it and compute only the
probed positions. So each repetition's probe row also holds, for every output tensor, the float64 signed sum
(each element times a fixed +1/-1 pattern) and the sum of absolute values of each contiguous chunk of its
elements (`chunk_sums`; the chunk length comes from the runner, `chunk_len`). Every element enters one chunk,
nothing about them is secret, and nothing needs choosing in advance. The runner's bar for a chunk is the sum
of verify's per-element bars over it (|sum(w o) - sum(w r)| <= sum(thr) for |w| = 1, and ||o| - |r|| <= |o - r|
per element), so an output verify passes always passes: the check is one-sided and cannot misfire. The signs
take the output's mean out of the sums, so an answer to OTHER inputs of the same kind (an output left in
freed memory, a cached one) moves a chunk's signed sum by a random walk of its differences, about
sqrt(chunk length) x their spread, while the bar grows with the length times verify's per-element bar: chunks
are at most CHUNK_LEN_MAX elements (CHUNKS_PER_LEAF of them per output tensor where that is more), so a
wrong answer stands out by several bars for outputs up to a few hundred million elements.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

PROBE_ROWS = 64      # rows of the position table (repetition g reads row g % PROBE_ROWS)
PROBE_PER_LEAF = 16  # positions probed per output tensor per repetition
CHUNK_MIN = 64       # elements per chunk sum, at least (a chunk sum costs a float64 pair per row)
CHUNK_LEN_MAX = 4096  # elements per chunk, at most, while CHUNKS_PER_LEAF chunks cover the output
CHUNKS_PER_LEAF = 256


def content_of(g: int, n_sets: int, n_contents: int) -> int:
    """The input content repetition g times with (its input set is g % n_sets): consecutive uses of one set
    hold consecutive contents, so with 2+ contents no set is timed twice in a row on the same data."""
    return (g // n_sets + g % n_sets) % n_contents


def gpu_content_of(g: int, block: int, n_sets: int, n_pool: int) -> int:
    """The input content of repetition g (in block `block`) on the GPU path: with two or more pool contents the
    arm refills the next repetition's input set after each repetition (blocks.py), content 1 + content_of over
    the pool; with fewer, the sets are refilled between blocks only (device_content_of)."""
    if n_pool >= 2:
        return 1 + content_of(g, n_sets, n_pool)
    return device_content_of(g, block, n_sets, n_pool)


def device_content_of(g: int, block: int, n_sets: int, n_pool: int) -> int:
    """The input content repetition g of the arm's block `block` times with on the GPU path, where the input
    sets are refilled between blocks (settle.refill_inputs): block 0 holds the timed case's inputs (content 0)
    in every set; from block 1 on, input set j = g % n_sets holds pool[(block + j) % n_pool] (content 1 + that)."""
    if block == 0 or n_pool <= 0:
        return 0
    return 1 + (block + g % n_sets) % n_pool


def position_table(seed: int, rows: int = PROBE_ROWS, per: int = PROBE_PER_LEAF) -> list[list[int]]:
    """rows x per random positions (taken modulo each output's element count), drawn by the runner."""
    rng = random.Random(seed * 1_000_003 + 17)
    return [[rng.randrange(1 << 62) for _ in range(per)] for _ in range(rows)]


def chunk_len(n: int) -> int:
    """Elements per chunk sum of an output of n elements (module docstring)."""
    return max(1, min(CHUNK_MIN, n), min(CHUNK_LEN_MAX, n), -(-n // CHUNKS_PER_LEAF))


_SIGNS: dict[tuple, Any] = {}


def _signs(length: int, like: Any) -> Any:
    """The fixed +1/-1 pattern of a chunk of `length` elements, in like's dtype and device (cached)."""
    import torch

    key = (length, str(like.device), like.dtype)
    if key not in _SIGNS:
        g = torch.Generator().manual_seed(0x5EED)
        w = torch.randint(0, 2, (length,), generator=g, dtype=torch.int8) * 2 - 1
        _SIGNS[key] = w.to(device=like.device, dtype=like.dtype)
    return _SIGNS[key]


def chunk_sums(flat: Any, length: int) -> tuple[Any, Any]:
    """(signed sums, sums of absolute values) of each `length`-element chunk of the 1-D tensor `flat`, as
    float64 (module docstring). Accumulated in float32 for floating outputs of 32 bits or less (cheap: a float64
    pass costs ten times more on a CPU), float64 otherwise; `sum_slack` bounds the rounding."""
    import torch

    acc = torch.float64 if flat.dtype == torch.float64 or not flat.is_floating_point() else torch.float32
    if not flat.is_floating_point():
        flat = flat.to(acc)
    n = flat.numel()
    full = n // length
    parts = [flat[: full * length].view(full, length)] if full else []
    if n > full * length:
        parts.append(flat[full * length:].view(1, -1))
    # no output-sized temporaries in the accumulating dtype where the output is already in it: the signed sums
    # are a matrix-vector product, |x| is fused into the norm
    wide = [p if p.dtype == acc else p.to(acc) for p in parts]
    sums = torch.cat([p.mv(_signs(length, p)[: p.shape[1]]) for p in wide]).to(torch.float64)
    abss = torch.cat([torch.linalg.vector_norm(p, 1, dim=1) for p in wide]).to(torch.float64)
    return sums, abss


def sum_slack(length: int, dtype: Any) -> float:
    """A bound on chunk_sums' rounding, relative to the chunk's sum of |values|: torch's reductions sum in a
    tree or cascade, so the error grows with log2 of the length (4x margin, and the float32 rounding of each
    value when a wider output is summed in float32 does not arise: those sum in float64)."""
    import math

    import torch

    eps = 2.0 ** -53 if dtype == torch.float64 or not dtype.is_floating_point else 2.0 ** -24
    return 4 * (math.log2(max(length, 1)) + 2) * eps


# ------------------------------------------------------------------------ inside the arm's process
class Prober:
    """Reads each repetition's output at its table row, and its chunk sums, into a float64 row (harness code
    beside the arm). chunks[i]: the chunk length of the i-th non-empty output tensor (None: no chunk sums).
    table None: chunk sums only (the GPU path: nothing chosen before the block). A row of a device output
    stays on the device (no synchronisation inside a timed batch) until `end`."""

    def __init__(self, table: Sequence[Sequence[int]] | None, chunks: Sequence[int] | None = None) -> None:
        import torch

        self.idx = torch.tensor(table, dtype=torch.int64) if table else None
        self.chunks = list(chunks) if chunks else None
        self.rows: list[Any] | None = []
        self.why_not: str | None = None

    def begin(self) -> None:
        self.rows = []

    def take(self, out: Any, g: int) -> None:
        import torch

        if self.rows is None:
            return
        pos = self.idx[g % len(self.idx)] if self.idx is not None else None
        vals, leaf = [], 0
        for t in (list(out) if isinstance(out, (list, tuple)) else [out]):
            if not isinstance(t, torch.Tensor) or t.is_complex():
                self.rows, self.why_not = None, "an output is not a real-valued tensor"
                return
            flat = t.detach().reshape(-1)
            if flat.numel() == 0:
                continue
            if pos is not None:
                vals.append(flat[(pos % flat.numel()).to(flat.device)].to(torch.float64))
            if self.chunks is not None and leaf < len(self.chunks):
                vals.extend(chunk_sums(flat, int(self.chunks[leaf])))
            leaf += 1
        row = torch.cat(vals) if vals else torch.zeros(0, dtype=torch.float64)
        self.rows.append(row)

    def end(self) -> Any:
        """The block's rows as one [k, width] tensor, or None (outputs probes cannot read)."""
        import torch

        rows, self.rows = self.rows, []
        if rows is None or not rows or len({r.numel() for r in rows}) != 1:
            return None
        return torch.stack(rows).cpu()


# ------------------------------------------------------------------------ in the runner
def _leaves(obj: Any) -> list[Any] | None:
    import torch

    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    return items if all(isinstance(t, torch.Tensor) for t in items) else None


class ProbeBar:
    """The expected probe values of every (content, table row) and their allowed error, by verify's bar."""

    def __init__(self, task: Any, expected: Iterable[dict[str, Any]], table: Sequence[Sequence[int]] | None) -> None:
        """expected[c]: the reference's reply for content c ("native", "hi" or None, "arg_reductions"); an
        iterable, read once (one content's outputs in memory at a time). table None: chunk sums only."""
        import torch

        self.idx = torch.tensor(table, dtype=torch.int64) if table else torch.zeros((1, 0), dtype=torch.int64)
        self.why_not: str | None = None
        self.chunks: list[int] | None = None  # chunk length per non-empty output tensor (sent to the arms)
        self.kinds: list[int] = []  # per column: 0 a probed position, 1 a chunk sum, 2 a chunk sum of |values|
        exp, thr, nat, exact = [], [], [], None
        for e in expected:
            part = self._content(task, e)
            if isinstance(part, str):
                self.why_not, self.chunks = part, None
                return
            exp.append(part[0])
            thr.append(part[1])
            nat.append(part[2])
            exact = part[3]
        self.exp, self.thr, self.nat, self.exact = torch.stack(exp), torch.stack(thr), torch.stack(nat), exact

    def _content(self, task: Any, e: dict[str, Any]):
        import torch

        from evokernel_mcp.verify import bar
        from evokernel_mcp.verify.case import _preset, tolerance_override

        native, hi = _leaves(e.get("native")), _leaves(e.get("hi")) if e.get("hi") is not None else None
        if native is None:
            return "the reference's output is not a tensor or a tuple of tensors"
        if e.get("arg_reductions"):
            return "an output is an arg-reduction (ties may legally pick other indices)"
        exp, thr, nat, exact, chunks, kinds = [], [], [], [], [], []
        for i, n in enumerate(native):
            if n.numel() == 0:
                continue
            if n.is_complex():
                return "a complex output"
            h = hi[i] if hi is not None and i < len(hi) and tuple(hi[i].shape) == tuple(n.shape) else None
            dev = n.device
            pos = (self.idx % n.numel()).to(dev)
            nf = n.detach().reshape(-1)[pos].to(torch.float64).cpu()
            kinds += [0] * nf.shape[1]
            if not n.is_floating_point():
                exp.append(nf)
                thr.append(torch.zeros_like(nf))
                nat.append(nf)
                exact.append(torch.ones(nf.shape[1], dtype=torch.bool))
                self._chunk_part(n.detach().reshape(-1), None, None, chunks, kinds, exp, thr, nat, exact)
                continue
            dname = str(n.dtype).removeprefix("torch.")
            path = "out" if not isinstance(e.get("native"), (list, tuple)) else f"out[{i}]"
            spread = (e.get("native_spread") or {}).get(path)
            sampled = (e.get("sampled_torch_err") or {}).get(path)
            lb = bar.leaf_bar(h, n, _preset(n, []), tolerance_override(task, dname, None), device=dev,
                              spread=float(spread) if spread is not None else None,
                              sampled=float(sampled) if sampled is not None else None)
            ref, rms, tol_eff, floor = lb.ref, lb.rms, lb.tol_eff, lb.floor
            r = ref.detach().reshape(-1)[pos.to(ref.device)].to(torch.float64).cpu()
            exp.append(r)
            thr.append((tol_eff * r.abs() + tol_eff * rms).clamp_min(floor))
            nat.append(nf)
            exact.append(torch.zeros(nf.shape[1], dtype=torch.bool))
            full = ref.detach().reshape(-1).to(torch.float64)
            bar_full = (tol_eff * full.abs() + tol_eff * rms).clamp_min(floor)
            self._chunk_part(n.detach().reshape(-1), full, bar_full, chunks, kinds, exp, thr, nat, exact)
        if not exp:
            return "no output elements"
        if self.chunks is None:
            self.chunks, self.kinds = chunks, kinds
        return torch.cat(exp, 1), torch.cat(thr, 1), torch.cat(nat, 1), torch.cat(exact)

    def _chunk_part(self, native: Any, ref: Any, bar_full: Any, chunks: list, kinds: list, exp: list, thr: list,
                    nat: list, exact: list) -> None:
        """Append one output's chunk sums (sums, then sums of absolute values) to the columns: expected from
        ref (float64; the native output for integer outputs, judged exactly), allowed error the chunk's sum of
        verify's per-element bars, plus float64 rounding of the sums."""
        import torch

        rows = self.idx.shape[0]
        length = chunk_len(native.numel())
        chunks.append(length)
        s_n, a_n = chunk_sums(native, length)
        s_r, a_r = chunk_sums(ref, length) if ref is not None else (s_n, a_n)
        slack = (sum_slack(length, native.dtype) + 1e-12) * a_r + 1e-300
        b = (chunk_sums(bar_full, length)[1] + slack) if bar_full is not None else slack  # sum(|w| thr)
        for e, nv in ((s_r, s_n), (a_r, a_n)):
            exp.append(e.cpu().expand(rows, -1))
            thr.append(b.cpu().expand(rows, -1))
            nat.append(nv.cpu().expand(rows, -1))
            exact.append(torch.zeros(e.numel(), dtype=torch.bool))
        kinds += [1] * s_r.numel() + [2] * s_r.numel()

    def check(self, rows: Any, first_rep: int, n_sets: int, contents: Sequence[int] | None = None) -> dict[str, Any]:
        """Judge one block's probe rows (repetitions first_rep, first_rep + 1, ...): {passed, checked, ...}.
        contents: each row's input content (the GPU path's, device_content_of); None: content_of's."""
        import torch

        rows = torch.as_tensor(rows, dtype=torch.float64)
        if rows.dim() != 2:
            return {"passed": False, "checked": 0, "note": "the probe rows are not a [repetitions, values] table"}
        k = rows.shape[0]
        if self.why_not is not None:
            return {"passed": True, "checked": 0, "note": f"probes not judged: {self.why_not}"}
        if rows.shape[1] != self.exp.shape[2]:
            return {"passed": False, "checked": k, "note": f"the output has {rows.shape[1]} probed values per "
                    f"repetition, the reference's {self.exp.shape[2]}: another number or size of outputs"}
        g = torch.arange(first_rep, first_rep + k)
        if contents is not None and len(contents) != k:
            return {"passed": False, "checked": k, "note": f"{k} probe rows for {len(contents)} repetitions"}
        c = torch.tensor([content_of(int(x), n_sets, self.exp.shape[0]) for x in g] if contents is None
                         else [int(x) for x in contents])
        if bool(((c < 0) | (c >= self.exp.shape[0])).any()):
            return {"passed": True, "checked": 0, "note": "probes not judged: an input content without the "
                    "reference's outputs"}
        t = g % self.idx.shape[0]
        e, th, n = self.exp[c, t], self.thr[c, t], self.nat[c, t]
        o = rows.to(torch.float64)
        ok = torch.where(self.exact, o == e, (o - e).abs() <= th)
        same = (o == e) | (torch.isnan(o) & torch.isnan(e))
        ok = torch.where(torch.isfinite(e), ok, same)
        ok |= ~torch.isfinite(n) & ((o == n) | (torch.isnan(o) & torch.isnan(n)))
        if bool(ok.all()):
            return {"passed": True, "checked": k}
        bad = torch.nonzero(~ok)
        i, j = int(bad[0, 0]), int(bad[0, 1])
        what = ("probed value", "chunk sum", "chunk sum of |values|")[self.kinds[j] if j < len(self.kinds) else 0]
        return {"passed": False, "checked": k, "mismatches": int((~ok).sum()),
                "rep": first_rep + i, "content": int(c[i]),
                "note": (f"timed repetition {first_rep + i} (input content {int(c[i])}): {what} {j} is "
                         f"{float(o[i, j]):.7g}, the reference's {float(e[i, j]):.7g} (allowed error "
                         f"{float(th[i, j]):.3g}, verify's bar); {int((~ok).sum())} of {ok.numel()} probed values "
                         f"of this block are wrong")}
