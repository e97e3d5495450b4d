"""Judge one verify case in the runner (harness code only): the reference's outputs (native, and float64
where it fit) against the candidate's two runs (A: poison NaN, B: poison -320), received as tensors on
the runner's device. The bar is verify/bar.py's (RMS-floored, PyTorch's own native error as the floor;
integer/bool exact; arg-reductions by the values their indices select), outputs of every kind are
paired by verify/outputs.py; this file decides pass/fail and writes the case record (VerifyCase fields).

Arg-reductions are found by behaviour in the reference child (verify/argred.arg_reductions): an integer
output whose indices select the max (min) of a floating input along a dim is judged with
argjudge.judge_arg_reduction on that input, so a tie broken differently passes.
"""

from __future__ import annotations

from typing import Any

from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.argjudge import judge_arg_reduction
from evokernel_mcp.verify.bar import DEFAULT_CHUNK, preset_of
from evokernel_mcp.verify.bar import judge as bar_judge

NUMBERS = ("max_abs_err", "max_rel_err", "rel_l2_err", "calc_diff", "torch_max_abs_err", "floor_abs_err", "rms_ref",
           "native_spread_abs_err")
COUNTS = ("mismatches", "nan_count", "inf_count", "unwritten_count", "numel")


def tolerance_override(task: Task, dtype_name: str, override: dict | None) -> dict | None:
    """The tolerance asked for this output dtype: the task's own (task.yaml, per dtype) and the caller's
    (atol/rtol or tol), the tighter of the two; bar.effective_tolerance then caps it at the dtype default."""
    vals = []
    if dtype_name in task.tolerance:
        t = task.tolerance[dtype_name]
        vals.append(max(t.atol, t.rtol))
    if override:
        keys = [k for k in ("tol", "atol", "rtol") if override.get(k) is not None]
        if keys:
            vals.append(max(float(override[k]) for k in keys) if "tol" not in keys else float(override["tol"]))
    return {"tol": min(vals)} if vals else None


def _subclass_note(obj: Any, path: str = "out") -> str | None:
    if isinstance(obj, dict):
        if "__subclass__" in obj:
            return f"candidate output {path} is a tensor subclass ({obj['__subclass__']}), not a plain tensor"
        for k, v in obj.items():
            n = _subclass_note(v, f"{path}[{k!r}]")
            if n:
                return n
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            n = _subclass_note(v, f"{path}[{i}]")
            if n:
                return n
    return None


def _scalar_paths(obj: Any, path: str = "out") -> set[str]:
    """Paths of the Python numbers in a (nested) output."""
    if type(obj) in (bool, int, float, complex):
        return {path}
    if isinstance(obj, (list, tuple)):
        return set().union(*[_scalar_paths(v, f"{path}[{i}]") for i, v in enumerate(obj)]) if obj else set()
    if isinstance(obj, dict):
        return set().union(*[_scalar_paths(v, f"{path}[{k!r}]") for k, v in obj.items()]) if obj else set()
    return set()


def _leaves(obj: Any, device: str | None, scalars: set[str] | None = None, like: dict | None = None):
    """{path: tensor on device (None: where it is)}; a Python-number leaf of the reference accepts the candidate's
    0-d (or 1-element) tensor in the reference's dtype, and vice versa."""
    from evokernel_mcp.verify.outputs import flatten_outputs

    out = {}
    for leaf in flatten_outputs(obj):
        t = leaf.tensor if device is None else leaf.tensor.to(device)
        if like is not None and scalars and leaf.path in scalars and leaf.path in like and t.numel() == 1:
            t = t.reshape(()).to(like[leaf.path].dtype)
        out[leaf.path] = t
    return out


def _preset(ref, input_dtypes: list) -> str:
    """The tolerance preset of an output: its own dtype's, except a float64/complex128 output of a
    lower-precision computation (a Python float, .double() at the end): the inputs' widest dtype's."""
    import torch

    if ref.dtype in (torch.float64, torch.complex128) and input_dtypes:
        widest = max(input_dtypes, key=lambda d: torch.finfo(d).bits if d.is_floating_point else 0)
        return preset_of(widest)
    return preset_of(ref.dtype)


def _judge_leaf(path: str, a, b, r, h, ctx: dict) -> tuple[dict[str, Any], bool]:
    """One output leaf: the bar's record and whether runs A and B agree bitwise where written."""
    from evokernel_mcp.verify.compare import bitwise_equal, unwritten_mask

    arg = ctx["arg"].get(path)
    if arg is not None and 0 <= int(arg["input"]) < len(ctx["inputs"]):
        values = ctx["inputs"][int(arg["input"])]
        if hasattr(values, "to"):  # moved here only when read: a big shape's inputs may wait on the host
            values = values.to(ctx["device"])
        part = judge_arg_reduction(a, r, values, arg["dim"])
        return part, b is None or bitwise_equal(a, b)
    floating = a.is_floating_point() or a.is_complex()
    unwritten = None
    if floating and b is not None and b.shape == a.shape and b.dtype == a.dtype:
        unwritten = unwritten_mask(a, b)
    dname = str(r.dtype).removeprefix("torch.")
    tol = tolerance_override(ctx["task"], dname, ctx["override"])
    spread = ctx["spread"].get(path) if floating else None
    sampled = ctx["sampled"].get(path) if floating else None
    part = bar_judge(a, h if floating else None, r, dtype_preset=_preset(r, ctx["input_dtypes"]), tol=tol,
                     chunk_elems=ctx["chunk"], unwritten=unwritten,
                     native_spread=float(spread) if spread is not None else None,
                     sampled_torch_err=float(sampled) if sampled is not None else None)
    if unwritten is not None:
        unwritten.logical_not_()  # now the written elements (the bar is done with the mask)
    det = b is None or bitwise_equal(a, b, unwritten)
    return part, det


def _merge(parts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One case record from the per-leaf records (worst numbers, summed counts, the bars used)."""
    out: dict[str, Any] = {"passed": all(p.get("passed") for _, p in parts)}
    for key in COUNTS:
        out[key] = sum(p.get(key) or 0 for _, p in parts)
    for key in NUMBERS:
        vals = [p[key] for _, p in parts if p.get(key) is not None]
        out[key] = max(vals) if vals else None
    margins = [p.get("margin") for _, p in parts]
    out["margin"] = max(margins) if margins and None not in margins else None  # None: an infinite ratio
    ratios = [p["error_vs_pytorch"] for _, p in parts if p.get("reference") == "float64" and "error_vs_pytorch" in p]
    out["error_vs_pytorch"] = None if not ratios or None in ratios else max(ratios)
    bars = list(dict.fromkeys(p["bar"] for _, p in parts if p.get("bar")))
    out["bar"] = "; ".join(bars) if len(parts) == 1 else "; ".join(f"{path}: {p.get('bar')}" for path, p in parts)
    refs = {p.get("reference") for _, p in parts if p.get("reference")}
    out["reference"] = "float64" if refs == {"float64"} else "native" if refs else None
    out["tolerance_custom"] = any(p.get("tol_custom") for _, p in parts)
    notes = list(dict.fromkeys(p["tol_note"] for _, p in parts if p.get("tol_note")))
    out["tolerance_note"] = "; ".join(notes) or None
    tols = [p["tol"] for _, p in parts if p.get("tol") is not None]
    out["tol"] = min(tols) if tols else None
    for path, p in parts:
        if not p.get("passed"):
            out["first_mismatch_index"] = p.get("first_mismatch_index")
            out["mismatch_indices"] = p.get("mismatch_indices") or []
            out["mismatch_examples"] = [{**e, "output": path} if len(parts) > 1 else e
                                        for e in p.get("mismatch_examples") or []]
            out["note"] = p.get("note") or (f"first mismatch in output {path}" if len(parts) > 1 else None)
            break
    float_parts = [p for _, p in parts if p.get("reference") in ("float64", "native") and p.get("rms_ref") is not None]
    if float_parts:
        tol = min(p["tol"] for p in float_parts)
        scale = 2.0 if out["reference"] == "native" else 1.0
        out["rtol"] = scale * tol
        out["atol"] = scale * tol * max(p["rms_ref"] for p in float_parts)
    else:
        out["atol"] = out["rtol"] = out["tol"]
    return out


def judge_outputs(task: Task, native: Any, hi: Any, got_a: Any, got_b: Any, *, inputs: list | None = None,
                  arg: dict | None = None, override: dict | None = None, chunk: int | None = None,
                  device: str = "cpu", native_spread: dict[str, float] | None = None,
                  sampled_torch_err: dict[str, float] | None = None, ref_in_place: bool = False) -> dict[str, Any]:
    """Compare the candidate's outputs (run A, and run B for unwritten/determinism, or None) with the
    reference's. ref_in_place: the reference's outputs stay where they are (host memory: a big case's), each block
    moved to `device` as the bar reads it, not the whole output at once. native_spread: {output
    path: the native reference's run-to-run spread} (verify/refout.py; with hi, the paths that are
    ill-conditioned and also held to the native reference); sampled_torch_err: {output path: PyTorch's error on
    a float64 sample of the batch} (without hi). Returns the
    VerifyCase numbers and bar fields plus passed, deterministic, note."""
    import torch

    from evokernel_mcp.verify.outputs import OutputError, StructureMismatch, match_structure

    note = _subclass_note(got_a) or (_subclass_note(got_b) if got_b is not None else None)
    if note:
        return {"passed": False, "note": note}
    scalars = _scalar_paths(native)
    try:
        ref = _leaves(native, None if ref_in_place else device)
        ref_hi = _leaves(hi, None if ref_in_place else device) if hi is not None else {}
    except OutputError as e:
        return {"passed": False, "note": f"the reference's {e}"}
    try:
        out_a = _leaves(got_a, device, scalars, ref)
        out_b = _leaves(got_b, device, scalars, ref) if got_b is not None else None
    except OutputError as e:
        return {"passed": False, "note": f"candidate {e}"}
    from evokernel_mcp.verify.outputs import Leaf

    pairs = match_structure([Leaf(p, t) for p, t in out_a.items()], [Leaf(p, t) for p, t in ref.items()])
    if isinstance(pairs, StructureMismatch):
        return {"passed": False, "note": pairs.message}
    inputs = list(inputs or [])  # where they are: the one an arg-reduction reads goes to `device` when read
    ctx = {"task": task, "override": override, "chunk": chunk or DEFAULT_CHUNK, "arg": arg or {}, "inputs": inputs,
           "device": device,
           "spread": native_spread or {}, "sampled": sampled_torch_err or {},
           "input_dtypes": [t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]}
    parts, det = [], True
    for cand_leaf, ref_leaf in pairs:
        path = ref_leaf.path
        b = out_b.get(path) if out_b is not None else None
        if b is not None and (b.shape != cand_leaf.tensor.shape or b.dtype != cand_leaf.tensor.dtype):
            b, det = None, False
        h = ref_hi.get(path)
        if h is not None and tuple(h.shape) != tuple(ref_leaf.tensor.shape):
            h = None
        part, d = _judge_leaf(path, cand_leaf.tensor, b, ref_leaf.tensor, h, ctx)
        det = det and d
        parts.append((path, part))
    merged = _merge(parts)
    merged["deterministic"] = det if out_b is not None else None
    return merged


def judge(task: Task, shape: str, seed: int, case: dict[str, Any], run_a: dict, run_b: dict,
          override: dict | None, device: str = "cpu", probe: bool = False, ref_in_place: bool = False) -> dict[str, Any]:
    """The case record (VerifyCase fields) from what the two sides sent (ref_in_place: judge_outputs')."""
    plan = case.get("plan") or {}
    res = judge_outputs(task, case["native"], case.get("hi"), run_a.get("out"), run_b.get("out"),
                        inputs=case.get("inputs"), arg=case.get("arg_reductions"), override=override,
                        chunk=plan.get("chunk_elems"), device=device, native_spread=case.get("native_spread"),
                        sampled_torch_err=case.get("sampled_torch_err"), ref_in_place=ref_in_place)
    return case_record(shape, seed, case, res, run_a, run_b, probe)


def case_record(shape: str, seed: int, case: dict[str, Any], res: dict[str, Any], run_a: dict, run_b: dict,
                probe: bool = False) -> dict[str, Any]:
    """The case record from judge_outputs' result and the runs' own flags (inputs_mutated)."""
    rec: dict[str, Any] = {"shape": shape, "seed": seed, "probe": probe,
                           "reference_precision": case.get("reference_precision")}
    mutated = bool(run_a.get("inputs_mutated") or run_b.get("inputs_mutated"))
    notes = []
    if probe:
        notes.append("probe seed: signed inputs (randn x 4) beyond the reference's own input distribution")
    notes += list(case.get("notes") or [])
    if res.get("note"):
        notes.append(res["note"])
    if mutated:
        notes.append("the candidate modified its inputs")
    if res.get("deterministic") is False:  # reported, not failed: atomics-based reductions are order-dependent
        notes.append("two runs differ bitwise (race or atomics?)")
    passed = bool(res.get("passed")) and not mutated
    return {**rec, **{k: v for k, v in res.items() if k != "note"}, "inputs_mutated": mutated, "passed": passed,
            "note": "; ".join(notes) or None}


def output_digests(out: Any, device: str) -> dict[str, tuple] | None:
    """{output path: (dtype, shape, compare.digest)} of a run's outputs, or None where they cannot be flattened."""
    from evokernel_mcp.verify.compare import digest
    from evokernel_mcp.verify.outputs import OutputError

    try:
        leaves = _leaves(out, device)
    except OutputError:
        return None
    return {p: (str(t.dtype), tuple(t.shape), digest(t)) for p, t in leaves.items()}


def has_nan(out: Any, device: str) -> bool:
    """Whether any floating output element is NaN (where the poison of run A may have survived)."""
    from evokernel_mcp.verify.outputs import OutputError

    try:
        leaves = _leaves(out, device)
    except OutputError:
        return True
    return any((t.is_floating_point() or t.is_complex()) and _any_nan(t) for t in leaves.values())


def _any_nan(t) -> bool:
    """torch.isnan(t).any() in flat blocks: never a mask of a big output's size (1 GiB for 1 G elements)."""
    import torch

    from evokernel_mcp.verify.compare import BLOCK_ELEMS

    if not t.is_contiguous():
        return bool(torch.isnan(t).any())
    x = t.reshape(-1)
    return any(bool(torch.isnan(x[s:s + BLOCK_ELEMS]).any()) for s in range(0, max(1, x.numel()), BLOCK_ELEMS))
