"""FLOPs and bytes of a timed shape set where the task does not give them (a KernelBench problem), so that
benchmark reports a fraction of peak there too; each figure says where it came from.

Three sources, first found wins per figure: the caller (benchmark's `flops` / `bytes`), the task (task.yaml's
expressions), counted. Counted FLOPs: `count_flops` runs in the reference's sandboxed process (op "case" with
work=true: the reference is agent code and never runs in the server), one forward on meta tensors at the
case's real shapes (nothing allocated, nothing computed) under torch.utils.flop_counter.FlopCounterMode,
which has formulas for matmul, convolution and attention-class ops only: elementwise ops, reductions and
normalisations count 0. Counted bytes: the runner's own sum of what crossed from the reference's process
(inputs, the model's parameters and buffers, outputs): the minimum traffic, each read or written once.

Only the task's own figures set the physical floor that makes a time invalid (verdict.py): a counted or
given figure can count work a correct candidate may skip (dead code in a reference), so it gives fractions
and a flag, never an invalid verdict.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import Field

from evokernel_mcp.errors import BadInput
from evokernel_mcp.models import Model

FLOP_COUNTER = "torch.utils.flop_counter on the reference's forward on meta tensors (its sandboxed process)"


# ---------------------------------------------------------------- child side (reference process)
def count_flops(model: Any, inputs: list[Any]) -> dict[str, Any]:
    """{flops, by_op {aten op: flops}} of one forward of `model` on meta copies of `inputs` (its parameters
    and buffers swapped for meta copies: the model is not modified), or {flops: None, note} where the forward
    cannot run on meta tensors (data-dependent shapes, .item(), tensors made on an explicit device)."""
    import torch
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    from evokernel_mcp.verify.memory import _to_meta

    try:
        state = {k: _to_meta(v) for k, v in itertools.chain(model.named_parameters(), model.named_buffers())}
        args = tuple(_to_meta(x) for x in inputs)
        with torch.no_grad(), torch.device("meta"), FlopCounterMode(display=False) as fc:
            functional_call(model, state, args)
    except Exception as e:  # noqa: BLE001 - any failure means "meta cannot tell"
        return {"flops": None, "note": f"the reference's forward does not run on meta tensors "
                f"({type(e).__name__}: {str(e)[:200]}): FLOPs not counted"}
    by_op = {str(k): int(v) for k, v in (fc.get_flop_counts().get("Global") or {}).items() if v}
    return {"flops": int(fc.get_total_flops()), "by_op": by_op}


# ---------------------------------------------------------------- runner side
def runner_counts(case: dict) -> dict[str, Any]:
    """The reference child's FLOP count (a figure from the reference's process, like its outputs) and the
    runner's own byte count of what crossed from it: inputs, parameters and buffers, outputs, each once."""
    from evokernel_mcp.verify.runner_side import _nbytes

    got = case.get("work") if isinstance(case.get("work"), dict) else {}
    flops = got.get("flops")
    out: dict[str, Any] = {"flops": flops if isinstance(flops, (int, float)) and flops >= 0 else None,
                           "by_op": {str(k): float(v) for k, v in list((got.get("by_op") or {}).items())[:20]
                                     if isinstance(v, (int, float))},
                           "note": str(got["note"])[:300] if got.get("note") else None}
    parts = {"inputs": _nbytes(case["inputs"]), "parameters and buffers": _nbytes(case.get("state") or {}),
             "outputs": _nbytes(case["native"])}
    out["bytes"] = sum(parts.values())
    out["bytes_detail"] = " + ".join(f"{k} {v:,}" for k, v in parts.items() if v) + \
        " bytes, each read or written once (as they crossed from the reference's process, counted by the runner)"
    return out


# ---------------------------------------------------------------- server side
class Counts(Model):
    """The FLOPs and bytes one shape set's roofline uses, and where each came from."""

    flops: float | None = None
    bytes: float | None = None
    source: str = Field(description="Where the figures came from, in words.")
    note: str | None = Field(default=None, description="What the figures leave out (e.g. memory roofline only).")


def _fmt_ops(by_op: dict[str, Any]) -> str:
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:4]
    return ", ".join(f"{k.removeprefix('aten.')} {v:.4g}" for k, v in top)


def _pick(what: str, given: float | None, task: float | None, task_name: str, parts: list[str]) -> float | None:
    """The caller's figure, else the task's (its source appended to `parts`); None: count it."""
    if given is not None:
        parts.append(f"{what} given by the caller")
        return float(given)
    if task is not None:
        parts.append(f"{what} from task.yaml of {task_name}")
        return task
    return None


def choose(task_flops: float | None, task_bytes: float | None, task_name: str, counted: dict[str, Any] | None,
           given_flops: float | None = None, given_bytes: float | None = None) -> Counts:
    """The figures a shape set's roofline uses: per figure the caller's, else the task's, else the counted one
    (`counted`: the runner's raw['work']: flops, by_op, note from count_flops; bytes and bytes_detail)."""
    counted = counted or {}
    parts, notes = [], []
    flops = _pick("flops", given_flops, task_flops, task_name, parts)
    if flops is None and counted.get("flops") is not None:
        flops = float(counted["flops"])
        ops = _fmt_ops(counted.get("by_op") or {})
        parts.append(f"flops counted by {FLOP_COUNTER}" + (f": {ops}" if ops else ""))
        if flops > 0:
            notes.append("ops without a FLOP formula (elementwise, reductions, normalisation) count 0")
    elif flops is None and counted.get("note"):
        notes.append(counted["note"])
    if flops == 0:
        flops = None
        notes.append("no FLOPs counted (no matmul, convolution or attention-class op): memory roofline only")
    nbytes = _pick("bytes", given_bytes, task_bytes, task_name, parts)
    if nbytes is None and counted.get("bytes"):
        nbytes = float(counted["bytes"])
        parts.append("bytes = " + (counted.get("bytes_detail") or "inputs + parameters + outputs, each once"))
    return Counts(flops=flops, bytes=nbytes, source="; ".join(parts) or "no FLOP or byte counts",
                  note="; ".join(notes) or None)


def per_shape(value: float | dict[str, float] | None, shapes: list[str], what: str) -> dict[str, float]:
    """A caller's `flops` / `bytes` as {shape set: value}: a number for the one shape set timed, or a mapping
    over the shape sets timed."""
    if value is None:
        return {}
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(shapes))
        if unknown:
            raise BadInput(f"{what} names shape sets not timed here: {', '.join(unknown)}; timed: {', '.join(shapes)}")
        out = {k: float(v) for k, v in value.items()}
    else:
        if len(shapes) != 1:
            raise BadInput(f"{what} is one number but {len(shapes)} shape sets are timed ({', '.join(shapes)}): give "
                           "{shape set: value}, or time one shape set")
        out = {shapes[0]: float(value)}
    bad = {k: v for k, v in out.items() if not v >= 0}
    if bad:
        raise BadInput(f"{what} must be >= 0: {bad}")
    return out


def peak_note(roof: Any, bw: Any, tf: Any, host: bool, arch: str | None, dtype: str | None, unit: str) -> str:
    """Which datasheet peak fraction_of_peak is of, or why there is none."""
    if roof is None:
        return "no fraction of peak: no time to compare"
    if roof.bytes is None and roof.flops is None:
        return "no fraction of peak: no FLOP or byte counts for this shape set"
    if host or not arch:
        return ("no fraction of peak: the CPU path (host timing) has no datasheet peak in the arch table; the "
                "counts are kept for a GPU run")
    if roof.fraction_of_peak is None:
        have = "bandwidth" if bw is not None else f"{dtype} {unit} TFLOP/s" if tf is not None else "peak"
        return f"no fraction of peak: the arch table has no {have} figure that matches the counts for {arch}"
    fb, ft = roof.fraction_of_peak_bandwidth, roof.fraction_of_peak_tflops
    if ft is None or (fb is not None and fb >= ft):
        return (f"of the datasheet memory bandwidth ({bw.value:g} GB/s, {bw.provenance.source})" if bw else
                "of the datasheet memory bandwidth")
    key = (tf.provenance.detail or "").split(";")[0] if tf else ""
    return (f"of the datasheet {dtype} {unit} peak ({tf.value:g} TFLOP/s, {key}, {tf.provenance.source})" if tf
            else f"of the datasheet {dtype} {unit} peak")
