"""The correctness bar for one output tensor: scales with the output, respects PyTorch's own rounding.

Pure torch, no I/O, device-agnostic: everything is computed on the candidate output's device, in
blocks of at most `chunk_elems` elements (each block is converted to float64 there; the reference
blocks are moved to that device one at a time), so no full float64 copy is ever made and the extra
memory is a few float64 blocks.

Floating (and complex) outputs. Let ref be the higher-precision reference (float64) when it exists,
else the reference computed in the input dtype ("native"). Element i passes when

    |out_i - ref_i| <= max(tol * RMS(ref) + tol * |ref_i|,  2 * E_torch)

with RMS over the elements finite in ref and in native (GEAK's RMS-floored bar: an output whose elements are all
tiny, like a softmax over 393216 columns, is judged against its own scale, not a fixed atol), and
E_torch = max_i |native_i - ref_i| over finite elements: PyTorch's own error in the output dtype.

Why a scalar floor (2 x the largest native error) and not a per-element one (2 x |native_i - ref_i|):
a correct candidate that sums in another order has errors of the same size as PyTorch's but at other
elements; a per-element floor would let only PyTorch's own rounding pattern through. The floor only
matters where PyTorch itself is less accurate than tol (cancellation in large sums); elsewhere the
RMS bar dominates. The native reference always passes itself: |native_i - ref_i| <= E_torch <= floor.

Non-finite elements: where ref_i is NaN/Inf the output must be the same (NaN, or the same infinity),
or equal native_i. Where only native_i is non-finite (fp32 overflow where float64 did not), an
output equal to native_i passes too, so PyTorch's own result always passes itself.

Without a float64 reference (it did not fit in memory, or the model's forward does not run in float64)
the bar is judged against native with 2 x tol: both sides then carry rounding, and
|out - native| <= |out - true| + |native - true|. The floor is then FLOOR_FACTOR x the native reference's
own run-to-run spread (`native_spread`: the largest difference between two native runs on the same
inputs; 0 for a deterministic reference).

Ill-conditioned outputs: where PyTorch's native result differs from float64 by far more than rounding
(E_torch > ILL_REL x RMS(ref), `ill_conditioned`), the floor 2 x E_torch could admit a wrong answer of a
percent of the output's own size. The caller then passes `native_spread` with the float64 reference, and
the output is held to BOTH bars: the float64 one, and the native one above (within 2 x tol of the native
reference, floor 2 x its run-to-run spread).

Margin: `margin` = max over finite elements of |out_i - ref_i| / allowed_i (the larger of the two bars'
ratios when both apply): < 1 on an output that passes, near 1 for one that passes by luck.
`error_vs_pytorch` = the candidate's largest error against float64 over PyTorch's own (E_torch): 1 for
PyTorch's own result, < 1 more accurate than PyTorch, > 1 less (None without a float64 reference, or when
PyTorch is exact and the candidate is not).

Integer and bool outputs: exact match. Arg-reductions (argmax/argmin, ties legal): the values the
indices select are compared (argjudge.py: `judge_arg_reduction`).

Unwritten detection: the caller passes `unwritten`, a bool mask (same shape) of elements that still
hold the poison after the candidate ran; each one is a mismatch and is counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from evokernel_mcp.verify.blockstats import Acc, blocks, examples, finite_or_none

# One tolerance per dtype preset (the rtol column of verify/compare.py's DEFAULT_TOLERANCES).
DEFAULT_TOL: dict[str, float] = {
    "float64": 1e-9, "fp32": 1e-4, "tf32": 5e-3, "bf16": 1.6e-2, "fp16": 2e-3, "fp8": 1.25e-1,
}
PRESET_OF_DTYPE: dict[str, str] = {
    "float64": "float64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "complex128": "float64", "complex64": "fp32",
}
FLOOR_FACTOR = 2.0        # floor = FLOOR_FACTOR x PyTorch's own largest error in the native dtype
NATIVE_ONLY_FACTOR = 2.0  # tol multiplier when the reference is the native-dtype result
ILL_REL = 0.01            # E_torch above this x RMS(ref): ill-conditioned (the native check applies); below it,
# the floor 2 x E_torch stays under 2 % of the RMS, below a 1 % perturbation's error at the output's largest
# elements (several RMS), so the perturbation still fails. A model that computes internally in a narrower dtype
# (a bf16 GEMM returned as fp32: ~0.8 %, fp16: ~0.1 %) is not ill-conditioned: a candidate more accurate than
# PyTorch must not be held to PyTorch's rounding.
DEFAULT_CHUNK = 2**24


def preset_of(dtype: Any) -> str:
    """The tolerance preset of a torch dtype (or its name); fp32 for unknown floating dtypes."""
    return PRESET_OF_DTYPE.get(str(dtype).removeprefix("torch."), "fp32")


def effective_tolerance(preset: str, override: float | dict | None) -> tuple[float, bool, str]:
    """(tol, custom, note): the dtype default, or an override that may only TIGHTEN it.

    `override` is a number, or a dict with "tol" (or the old "atol"/"rtol": the larger is used).
    A looser override is capped at the default and the note says so.
    """
    if preset not in DEFAULT_TOL:
        raise ValueError(f"unknown dtype preset {preset!r}; one of {sorted(DEFAULT_TOL)}")
    default = DEFAULT_TOL[preset]
    if override is None:
        return default, False, f"default tol for {preset}"
    if isinstance(override, dict):
        vals = [override[k] for k in ("tol",) if k in override] or \
               [override[k] for k in ("atol", "rtol") if k in override]
        if not vals:
            raise ValueError("tolerance override needs 'tol' (or 'atol'/'rtol')")
        value = max(float(v) for v in vals)
    else:
        value = float(override)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"tolerance override must be a finite number >= 0, got {value}")
    if value > default:
        return default, False, f"override {value:.1e} is looser than the {preset} default; capped at {default:.1e}"
    return value, True, f"custom tol {value:.1e} (tighter than the {preset} default {default:.1e})"


def _hi(t, device):
    import torch

    t = t.to(device)
    return t.to(torch.complex128) if t.is_complex() else t.to(torch.float64)


def _same(a, b):
    import torch

    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def _reference_scale(ref, native, chunk: int, device) -> tuple[float, float | None, int, float]:
    """(RMS of the reference over elements finite in ref and native, PyTorch's largest finite native
    error or None, native non-finite elements where ref is finite, RMS of native over the same elements)."""
    import torch

    sumsq, count, worst, overflow, nsq = 0.0, 0, 0.0, 0, 0.0
    for idx in blocks(tuple(ref.shape), chunk):
        r = _hi(ref[idx].reshape(-1), device)
        fin = torch.isfinite(r)
        if native is not None:
            n = _hi(native[idx].reshape(-1), device)
            d = (n - r).abs()
            ok = torch.isfinite(d)
            if ok.any():
                worst = max(worst, float(d[ok].max()))
            overflow += int((fin & ~torch.isfinite(n)).sum())
            fin &= torch.isfinite(n)  # the scale the output dtype can hold
            nsq += float((n[fin].abs() ** 2).sum())
        sumsq += float((r[fin].abs() ** 2).sum())
        count += int(fin.sum())
    rms = math.sqrt(sumsq / count) if count else 0.0
    return rms, (worst if native is not None else None), overflow, (math.sqrt(nsq / count) if count else 0.0)


def float64_disagreement(ref_hi, ref_native, *, chunk_elems: int = DEFAULT_CHUNK) -> tuple[float, float]:
    """(E_torch, RMS(ref_hi)): PyTorch's largest native error against float64, and the float64 reference's
    RMS over elements finite in both (blocks, on ref_native's device)."""
    rms, err, _, _ = _reference_scale(ref_hi, ref_native, chunk_elems, ref_native.device)
    return (err or 0.0), rms


def ill_conditioned(torch_err: float | None, rms: float, preset: str) -> bool:
    """PyTorch's native output differs from float64 by more than ILL_REL of the output's RMS: its floor could
    admit a wrong answer of a percent of the answer's size, so the candidate is also held to the native
    reference run twice. (`preset` is kept for callers; the rule is relative to the output's scale.)"""
    if torch_err is None or not math.isfinite(torch_err):
        return torch_err is not None
    return torch_err > ILL_REL * rms


def max_abs_diff(a, b, *, chunk_elems: int = DEFAULT_CHUNK) -> float:
    """Largest |a_i - b_i| over elements finite in both (two runs of the native reference; in blocks, on
    a's device). A non-finite element in one run only counts as an infinite difference (returned as inf)."""
    import torch

    if tuple(a.shape) != tuple(b.shape):
        return math.inf
    if not (a.is_floating_point() or a.is_complex()):
        return 0.0 if bool(torch.equal(a, b.to(a.device))) else math.inf
    worst = 0.0
    for idx in blocks(tuple(a.shape), chunk_elems):
        x, y = _hi(a[idx].reshape(-1), a.device), _hi(b[idx].reshape(-1), a.device)
        fin = torch.isfinite(x) & torch.isfinite(y)
        if bool((~fin & ~_same(x, y)).any()):
            return math.inf
        if fin.any():
            worst = max(worst, float((x[fin] - y[fin]).abs().max()))
    return worst


def _bar_text(preset: str, tol: float, custom: bool, native_only: bool, floor: float,
              spread: float | None = None, sampled: float | None = None) -> str:
    kind = "custom " if custom else ""
    native_bar = f"{NATIVE_ONLY_FACTOR:g}x{tol:.1e} ({preset}) vs the native-dtype reference"
    if sampled is not None and native_only:
        native_bar += (f", floor=max({FLOOR_FACTOR:g}x its run-to-run spread, {FLOOR_FACTOR + 1:g}x PyTorch's error "
                       f"on a float64 sample) ({floor:.2e})")
    elif spread:
        native_bar += f", floor={FLOOR_FACTOR:g}x its run-to-run spread ({FLOOR_FACTOR * spread:.2e})"
    if native_only:
        return f"rms-floored {kind}tol={native_bar} (no float64 reference: see reference_precision)"
    text = f"rms-floored {kind}tol={tol:.1e} ({preset}) floor={FLOOR_FACTOR:g}x torch native error ({floor:.2e})"
    if spread is not None:
        text += f"; and (ill-conditioned) tol={native_bar}"
    return text


def _ratio(err, thr):
    """err / thr elementwise; 0 where both are 0, inf where only thr is (NaN where err is not finite)."""
    import torch

    zero = torch.zeros((), dtype=err.dtype, device=err.device)
    return torch.where(thr > 0, err / thr.clamp_min(1e-300), torch.where(err > 0, zero + math.inf, zero))


def _worst(ratio) -> float:
    import torch

    fin = ~torch.isnan(ratio)
    return float(ratio[fin].max()) if fin.any() else 0.0


def _native_thr(n, tol: float, rms_n: float, spread: float):
    return (NATIVE_ONLY_FACTOR * tol * (n.abs() + rms_n)).clamp_min(FLOOR_FACTOR * spread)


@dataclass
class LeafBar:
    """The bar of one floating output leaf, before any candidate is seen: element i of an output passes when
    |out_i - ref_i| <= max(tol_eff * (|ref_i| + rms), floor) (and, with check_native, the native bar too).
    Shared by verify's judge and benchmark's per-repetition probes (benchmark/probes.py)."""

    ref: Any                  # the reference judged against (float64 where it exists, else native)
    native: Any               # the native reference beside a float64 one, else None
    tol: float
    custom: bool
    note: str
    tol_eff: float            # tol, or NATIVE_ONLY_FACTOR x tol against the native reference alone
    rms: float
    floor: float
    torch_err: float | None
    overflow: int
    rms_n: float
    spread: float | None      # the native run-to-run spread when it applies
    sampled: float | None     # PyTorch's error on a float64 sample, when it set the floor

    @property
    def check_native(self) -> bool:
        return self.native is not None and self.spread is not None


def leaf_bar(ref_hi, ref_native, preset: str, tol_arg=None, *, chunk: int = DEFAULT_CHUNK, device=None,
             spread: float | None = None, sampled: float | None = None) -> LeafBar:
    """The bar (module docstring) of one floating output from its references: float64 (or None) and native,
    the tolerance override, the native run-to-run spread and PyTorch's sampled error (verify/refout.py)."""
    tol, custom, note = effective_tolerance(preset, tol_arg)
    ref = ref_hi if ref_hi is not None else ref_native
    native = ref_native if ref_hi is not None else None
    dev = device if device is not None else ref_native.device
    rms, torch_err, overflow, rms_n = _reference_scale(ref, native, chunk, dev)
    if spread is not None and not math.isfinite(spread):
        spread = None  # runs that differ in non-finite places give no usable floor
    if native is None:  # the native reference alone: 2x tol, floor from its own run-to-run spread
        tol_eff, floor = NATIVE_ONLY_FACTOR * tol, FLOOR_FACTOR * (spread or 0.0)
        if sampled is not None and math.isfinite(sampled):  # |out-native| <= |out-true| + |native-true|
            floor, torch_err = max(floor, (FLOOR_FACTOR + 1) * sampled), sampled
        else:
            sampled = None
    else:
        sampled = None
        tol_eff, floor = tol, FLOOR_FACTOR * torch_err
    return LeafBar(ref, native, tol, custom, note, tol_eff, rms, floor, torch_err, overflow, rms_n, spread, sampled)


def _judge_float(out, ref_hi, ref_native, preset: str, tol_arg, chunk: int, unwritten,
                 spread: float | None, sampled: float | None = None) -> dict[str, Any]:
    import torch

    dev = out.device
    lb = leaf_bar(ref_hi, ref_native, preset, tol_arg, chunk=chunk, device=dev, spread=spread, sampled=sampled)
    tol, custom, note, ref, native = lb.tol, lb.custom, lb.note, lb.ref, lb.native
    rms, torch_err, overflow, rms_n = lb.rms, lb.torch_err, lb.overflow, lb.rms_n
    tol_eff, floor, spread, sampled = lb.tol_eff, lb.floor, lb.spread, lb.sampled
    check_native = lb.check_native
    acc = Acc(tuple(out.shape), rms=rms)
    offset, margin, cand_err = 0, 0.0, 0.0
    for idx in blocks(tuple(out.shape), chunk):
        o, r = _hi(out[idx].reshape(-1), dev), _hi(ref[idx].reshape(-1), dev)
        thr = (tol_eff * r.abs() + tol_eff * rms).clamp_min(floor)
        err = (o - r).abs()
        ok = err <= thr
        ok = torch.where(torch.isfinite(r), ok, _same(o, r))
        margin = max(margin, _worst(_ratio(err, thr)))
        fin = torch.isfinite(err)
        if fin.any():
            cand_err = max(cand_err, float(err[fin].max()))
        if native is not None:  # PyTorch's own non-finite result (or where ref is non-finite) passes
            n = _hi(native[idx].reshape(-1), dev)
            ok |= (~torch.isfinite(n) | ~torch.isfinite(r)) & _same(o, n)
            if check_native:  # ill-conditioned: also within the native bar of the native reference
                err_n, thr_n = (o - n).abs(), _native_thr(n, tol, rms_n, spread)
                ok &= torch.where(torch.isfinite(n), err_n <= thr_n, _same(o, n))
                margin = max(margin, _worst(_ratio(err_n, thr_n)))
        unw = unwritten[idx].reshape(-1).to(dev) if unwritten is not None else None
        bad = ~ok if unw is None else (~ok | unw)
        acc.add(o, r, bad, unw, offset)
        offset += o.numel()
    res = acc.result(out.numel())
    if torch_err is None or ref_hi is None:
        vs_torch = None
    elif torch_err > 0:
        vs_torch = cand_err / torch_err
    else:
        vs_torch = 1.0 if cand_err == 0 else None
    res.update({
        "bar": _bar_text(preset, tol, custom, ref_hi is None, floor, spread, sampled),
        "tol": tol, "tol_custom": custom,
        "tol_note": note, "reference": "float64" if ref_hi is not None else "native", "rms_ref": rms,
        "torch_max_abs_err": torch_err, "floor_abs_err": floor, "torch_overflow_count": overflow,
        "margin": finite_or_none(margin),
        "error_vs_pytorch": finite_or_none(vs_torch) if vs_torch is not None else None,
        "native_spread_abs_err": spread,
        "mismatch_examples": examples(out, ref, res["mismatch_indices"]),
    })
    return res


def _judge_exact(out, ref, chunk: int, unwritten) -> dict[str, Any]:
    dev = out.device
    acc = Acc(tuple(out.shape))
    offset = 0
    for idx in blocks(tuple(out.shape), chunk):
        o, r = out[idx].reshape(-1), ref[idx].reshape(-1).to(dev)
        bad = o != r
        unw = unwritten[idx].reshape(-1).to(dev) if unwritten is not None else None
        if unw is not None:
            bad |= unw
        acc.add(_hi(o, dev), _hi(r, dev), bad, unw, offset)
        offset += o.numel()
    res = acc.result(out.numel())
    res["margin"] = 0.0 if res["passed"] else None
    res.update({"bar": f"exact match ({str(out.dtype).removeprefix('torch.')})", "tol": 0.0, "tol_custom": False,
                "tol_note": "integer and bool outputs must match exactly", "reference": "native",
                "mismatch_examples": examples(out, ref, res["mismatch_indices"])})
    return res


def _shape_failure(out, other, what: str) -> dict[str, Any]:
    return {"passed": False, "numel": out.numel(), "mismatches": None, "bar": "not judged",
            "note": f"output shape {list(out.shape)} != {what} {list(other.shape)}"}


def judge(out, ref_hi, ref_native, *, dtype_preset: str, tol: float | dict | None = None,
          chunk_elems: int = DEFAULT_CHUNK, unwritten=None, native_spread: float | None = None,
          sampled_torch_err: float | None = None) -> dict[str, Any]:
    """Judge one output leaf against the reference (see the module docstring for the bar).

    out: the candidate's tensor. ref_hi: the reference computed in float64 (None when it did not fit).
    ref_native: the reference computed in the input dtype (same dtype as out). dtype_preset: the key
    of DEFAULT_TOL (e.g. preset_of(input dtype)). tol: an override, which may only tighten the
    default (effective_tolerance). unwritten: optional bool mask of poison survivors.
    Returns a dict: passed, mismatches, first_mismatch_index, mismatch_indices (<= 10, unravelled),
    mismatch_examples, max_abs_err, max_rel_err (relative to |ref| + RMS(ref)), rel_l2_err,
    calc_diff, nan_count, inf_count, unwritten_count, numel, bar, tol, tol_custom, tol_note,
    reference ("float64" | "native"), margin (max |err| / allowed; < 1 passes where finite), and for floating
    outputs rms_ref, torch_max_abs_err, floor_abs_err, torch_overflow_count, error_vs_pytorch,
    native_spread_abs_err (the native check's spread when it applied).
    """
    if chunk_elems < 1:
        raise ValueError(f"chunk_elems must be >= 1, got {chunk_elems}")
    for other, what in ((ref_native, "reference"), (ref_hi, "float64 reference"), (unwritten, "unwritten mask")):
        if other is not None and tuple(other.shape) != tuple(out.shape):
            return _shape_failure(out, other, what)
    if out.is_floating_point() or out.is_complex():
        return _judge_float(out, ref_hi, ref_native, dtype_preset, tol, chunk_elems, unwritten, native_spread,
                            sampled_torch_err)
    return _judge_exact(out, ref_native, chunk_elems, unwritten)
