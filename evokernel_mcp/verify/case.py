"""One verify case inside the worker: inputs for (shape set, seed), reference in float64 and native,
candidate runs A and B with poisoned allocations, comparison (verify_compare.py)."""

from __future__ import annotations

import copy
from typing import Any

from evokernel_mcp import candidate as cand
from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.compare import (
    DEFAULT_TOLERANCES, PRESET_OF_DTYPE, SENTINEL, as_tensors, bitwise_equal, compare, merge, poisoned_allocations,
)


def _clone(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _upcast(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def tolerance_for(task: Task, dtype_name: str, override: dict | None) -> tuple[float, float]:
    if override:
        return float(override["atol"]), float(override["rtol"])
    if dtype_name in task.tolerance:
        t = task.tolerance[dtype_name]
        return t.atol, t.rtol
    return DEFAULT_TOLERANCES.get(PRESET_OF_DTYPE.get(dtype_name, "fp32"), DEFAULT_TOLERANCES["fp32"])


def _run_candidate(fn, inputs: list[Any], poison: float, device: str) -> list:
    import torch

    with torch.no_grad(), poisoned_allocations(poison):
        out = fn(*inputs)
        _sync(device)
    try:
        return as_tensors(out)
    except TypeError as e:
        raise cand.CandidateError(f"candidate returned {type(out).__name__}; return the output tensor(s) like the "
                                  f"reference's forward") from e


def run_case(task: Task, ref_mod, cand_mod, shape: str, seed: int, device: str, override: dict | None) -> dict:
    import torch

    inputs = cand.make_inputs(task, shape, seed, device, ref_mod)
    ref_model = cand.build_reference(task, ref_mod, seed, device)
    with torch.no_grad():
        native = as_tensors(ref_model(*_clone(inputs)))
        ref64 = as_tensors(copy.deepcopy(ref_model).double()(*_upcast(inputs)))
    fn = cand.build_candidate(cand_mod, task, ref_mod, ref_model, seed, device)
    in_a, in_b = _clone(inputs), _clone(inputs)
    out_a = _run_candidate(fn, in_a, float("nan"), device)
    out_a = [t.clone() for t in out_a]  # run B may reuse the same buffers
    out_b = _run_candidate(fn, in_b, SENTINEL, device)
    mutated = not all(bitwise_equal(x, y) for x, y in zip(in_a, inputs) if isinstance(x, torch.Tensor))
    case: dict[str, Any] = {"shape": shape, "seed": seed}
    if len(out_a) != len(native):
        return {**case, "passed": False, "inputs_mutated": mutated,
                "note": f"candidate returned {len(out_a)} tensors, the reference {len(native)}"}
    dname = str(native[0].dtype).removeprefix("torch.")
    atol, rtol = tolerance_for(task, dname, override)
    parts, notes, det = [], [], True
    for a, b, n, r in zip(out_a, out_b, native, ref64):
        part = compare(a, r, b, atol, rtol)
        if a.dtype != n.dtype:
            part["passed"] = False
            notes.append(f"output dtype {a.dtype} != reference {n.dtype}")
        if a.shape == b.shape:
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
