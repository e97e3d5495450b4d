"""Judge one verify case in the runner (harness code only): the reference's outputs (native and float64)
against the candidate's two runs (A: poison NaN, B: poison -320), all received as plain tensors.
The numerics are compare.py's; this file decides pass/fail and writes the case record."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.compare import (
    DEFAULT_TOLERANCES, PRESET_OF_DTYPE, SENTINEL, as_tensors, bitwise_equal, compare, merge,
)


def tolerance_for(task: Task, dtype_name: str, override: dict | None) -> tuple[float, float]:
    """The task's tolerance for this dtype (else the dtype default); an override may only tighten it."""
    if dtype_name in task.tolerance:
        t = task.tolerance[dtype_name]
        atol, rtol = t.atol, t.rtol
    else:
        atol, rtol = DEFAULT_TOLERANCES.get(PRESET_OF_DTYPE.get(dtype_name, "fp32"), DEFAULT_TOLERANCES["fp32"])
    if override:
        atol, rtol = min(atol, float(override["atol"])), min(rtol, float(override["rtol"]))
    return atol, rtol


def _plain_outputs(out: Any) -> tuple[list | None, str | None]:
    """The candidate's output as a list of tensors, or a note saying why it is not one."""
    if isinstance(out, dict) and "__subclass__" in out:
        return None, f"candidate returned a tensor subclass ({out['__subclass__']}), not a plain tensor"
    if isinstance(out, (list, tuple)) and any(isinstance(o, dict) and "__subclass__" in o for o in out):
        return None, "candidate returned a tensor subclass, not a plain tensor"
    try:
        return as_tensors(out), None
    except TypeError as e:
        return None, f"candidate output: {e}"


def judge(task: Task, shape: str, seed: int, native: Any, ref64: Any, run_a: dict, run_b: dict,
          override: dict | None, device: str = "cpu") -> dict[str, Any]:
    """The case record (VerifyCase fields) from what the two sides sent."""
    import torch

    case: dict[str, Any] = {"shape": shape, "seed": seed}
    mutated = bool(run_a.get("inputs_mutated") or run_b.get("inputs_mutated"))
    out_a, note_a = _plain_outputs(run_a.get("out"))
    out_b, note_b = _plain_outputs(run_b.get("out"))
    native_t, ref_t = as_tensors(native), as_tensors(ref64)
    if out_a is None or out_b is None:
        return {**case, "passed": False, "inputs_mutated": mutated, "note": note_a or note_b}
    if len(out_a) != len(native_t) or len(out_b) != len(out_a):
        return {**case, "passed": False, "inputs_mutated": mutated,
                "note": f"candidate returned {len(out_a)} tensors, the reference {len(native_t)}"}
    dname = str(native_t[0].dtype).removeprefix("torch.")
    atol, rtol = tolerance_for(task, dname, override)
    parts, notes, det = [], [], True
    for a, b, n, r in zip(out_a, out_b, native_t, ref_t):
        part = compare(a, r, b, atol, rtol)
        if a.dtype != n.dtype:
            part["passed"] = False
            notes.append(f"output dtype {a.dtype} != reference {n.dtype}")
        if a.shape == b.shape and a.dtype == b.dtype:
            written = ~(torch.isnan(a) & (b.float() == SENTINEL)) if a.is_floating_point() else None
            det = det and bitwise_equal(a, b, written)
        if n.shape == r.shape:
            part.setdefault("torch_max_abs_err", float((n.double() - r).abs().max()) if n.numel() else 0.0)
        parts.append(part)
    merged = merge(parts)
    if notes:
        merged["note"] = "; ".join(notes + ([merged["note"]] if merged.get("note") else []))
    if mutated:
        merged["note"] = "; ".join(filter(None, ["the candidate modified its inputs", merged.get("note")]))
    if not det:  # reported, not failed: atomics-based reductions are legitimately order-dependent
        merged["note"] = "; ".join(filter(None, [merged.get("note"), "two runs differ bitwise (race or atomics?)"]))
    return {**case, **merged, "deterministic": det, "inputs_mutated": mutated, "atol": atol, "rtol": rtol,
            "passed": bool(merged["passed"]) and not mutated}
