"""The two halves of a verify case that run INSIDE sandboxed children (runtime/child.py), next to the
code they call. Nothing here judges: the runner compares (verify/runner_side.py, verify/case.py).

Reference child (one per reference source): for (shape set, seed[, probe]) it plans the case's memory
(verify/refplan.py, verify/memory.py: shapes from get_inputs on meta tensors and one dry forward on meta, or for a small case of a
task with declared input shapes a bound on its outputs, against the free device and host memory; a case that
cannot fit is refused with the sizes, kind "too_big"), makes the
inputs (the signed probe replaces floating inputs when asked: verify/probe.py), runs the reference
natively and in float64 where that runs and fits (verify/refout.py), and says which integer outputs are
arg-reductions (by behaviour: the indices select the max/min of an input along a dim). With `hold`, the
float64 outputs stay here until the runner asks for them (op "expected" with `held`), so one reply never
carries inputs, native and float64 outputs at once (host memory).

Candidate child (one per job): verify/cand_side.py.
"""

from __future__ import annotations

from typing import Any

from evokernel_mcp import candidate as cand
from evokernel_mcp.verify import draws
from evokernel_mcp.verify.argred import arg_reductions
from evokernel_mcp.verify.refout import reference_outputs
from evokernel_mcp.verify.refplan import TooBig, _free_here, _no_room_for_hi, _outputs_check, _plan, _sample_room

MODIFIED_INPUTS = "the reference modified its inputs in place"


class HarnessError(Exception):
    """The inputs or the reference failed: not the candidate's fault (reported as kind 'harness')."""

    kind = "harness"


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def _to(inputs: list[Any], device: str) -> list[Any]:
    import torch

    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]


def _model(loaded, seed: int):
    if seed not in loaded.models:
        loaded.models.clear()  # one seed's model at a time: memory
        loaded.models[seed] = cand.build_reference(loaded.task, loaded.module, seed, loaded.device)
    return loaded.models[seed]


def _built_model(loaded, seed: int):
    """_model, its failure the reference's (HarnessError), not the candidate's."""
    try:
        return _model(loaded, seed)
    except Exception as e:  # noqa: BLE001
        raise HarnessError(f"building the reference Model(*get_init_inputs()) failed: {type(e).__name__}: {e}") from e


def _make_inputs(loaded, shape: str, seed: int, probe: bool) -> list[Any]:
    from evokernel_mcp.verify.probe import signed_probe_inputs_replacing

    try:
        if cand.is_spec_task(loaded.task):  # host draws, kept between cases and jobs (verify/draws.py)
            inputs = draws.inputs(loaded.task, shape, seed, loaded.device, lambda: _free_here(loaded.device))
        else:
            inputs = cand.make_inputs(loaded.task, shape, seed, loaded.device, loaded.module)
    except Exception as e:  # noqa: BLE001 - the harness's or the reference's inputs, never the candidate
        raise HarnessError(f"making the inputs failed (reference get_inputs or the task's input specs): "
                           f"{type(e).__name__}: {e}") from e
    return signed_probe_inputs_replacing(inputs, seed) if probe else inputs


# ---------------------------------------------------------------- arg-reductions
# ---------------------------------------------------------------- reference child ops
def _on_own_inputs(inputs: list[Any], outputs) -> tuple[Any, bool]:
    """(outputs(inputs) with the reference's forwards on the inputs themselves, not a copy; whether the inputs'
    digest is unchanged after it)."""
    from evokernel_mcp.verify.refout import owned_inputs

    want = _digests(inputs)
    with owned_inputs():
        out = outputs(inputs)
    return out, _digests(inputs) == want


def _own_inputs_outputs(loaded, inputs: list[Any], req: dict[str, Any], outputs):
    """outputs(inputs) on the inputs themselves (_on_own_inputs: a case within its memory cap); a reference
    that wrote into them (their digest changed) runs again, with copies, on the same inputs made afresh (they
    are a function of the shape set and seed). Returns (inputs, outputs)."""
    out, kept = _on_own_inputs(inputs, outputs)
    if kept:
        return inputs, out
    out = None
    inputs = _make_inputs(loaded, req["shape"], int(req["seed"]), bool(req.get("probe")))
    return inputs, outputs(inputs)


def ref_case(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Inputs, native and float64 outputs, init inputs and state for one (shape set, seed).

    req: shape, seed, hi (want the float64 reference), probe (signed probe inputs), hold (keep the
    float64 outputs here for op "expected" with held=true; the reply then has hi=None, hi_held=True),
    inputs_only (the reply is {"inputs"} alone), work (count the forward's FLOPs on meta tensors: reply "work").
    Reply: inputs, native, hi, init_inputs, state, arg_reductions, plan {where, ref_hi, chunk_elems,
    needed_bytes, budget_bytes}, notes[], reference_precision (what the outputs are judged against, and why),
    native_spread {output path: max |native - native run again|}, sampled_torch_err {output path: PyTorch's
    error on a float64 sample of the batch}, workspace_bytes (the native forward's working memory on a GPU, for
    the benchmark's memory plan) (reference_outputs)."""
    import torch

    seed, shape = int(req["seed"]), req["shape"]
    if req.get("inputs_only"):  # benchmark's refill pool and post-timing checks: no forward, no plan for one
        return {"inputs": _make_inputs(loaded, shape, seed, bool(req.get("probe")))}
    want_hi = bool(req.get("hi", True))
    loaded.memory_factor = float(req.get("memory_factor") or 0.0)  # the runner's setting, for this case's plan
    notes: list[str] = []
    model = _built_model(loaded, seed)
    plan, note, bound = _plan(loaded, model, shape, None, want_hi)
    if plan is not None and plan.refuse and draws.CACHE.bytes:  # kept draws of other cases go first
        from evokernel_mcp.runtime.devmem import release_cached

        draws.CACHE.clear()
        release_cached()
        plan, note, bound = _plan(loaded, model, shape, None, want_hi)
    if plan is not None and plan.refuse:
        raise TooBig(plan.refuse)
    inputs = _make_inputs(loaded, shape, seed, bool(req.get("probe")))
    if plan is None:  # shapes were not known on meta: plan from the real inputs, before any forward
        plan, note, bound = _plan(loaded, model, shape, inputs, want_hi)
        if plan is not None and plan.refuse:
            raise TooBig(plan.refuse)
    notes += [note] if note else []
    hi = want_hi and (plan is None or plan.ref_hi)
    why_not = None
    if want_hi and not hi:
        why_not = _no_room_for_hi(plan)
        notes.append(f"float64 reference left out: {why_not.removeprefix('the float64 copy ')}; judged against "
                     "the native-dtype reference with a doubled tolerance")
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    try:
        room = _sample_room(plan) if why_not else {}
        check = _outputs_check(loaded, inputs, want_hi, bound) if hi and bound is not None else None
        if not getattr(plan, "pristine", True):  # within the job's memory cap: no copy of the inputs
            inputs, ref = _own_inputs_outputs(loaded, inputs, req, lambda x: reference_outputs(
                model, x, hi, loaded.device, why_not, hi_check=check, **room))
        else:
            ref = reference_outputs(model, inputs, hi, loaded.device, why_not, hi_check=check, **room)
    except TooBig:
        raise
    except Exception as e:  # noqa: BLE001
        raise HarnessError(f"the reference failed on these inputs: {type(e).__name__}: {e}") from e
    native, ref_hi = ref["native"], ref["hi"]
    if hi and ref_hi is None:
        notes.append(f"float64 reference left out: {ref['precision'].removeprefix('native (').rstrip(')')}; judged "
                     "against the native-dtype reference with a doubled tolerance")
    elif ref["spread"] and ref_hi is not None:
        notes.append(f"ill-conditioned: {ref['precision'].split('(', 1)[1].rstrip(')')}; also held to the native "
                     "reference (run twice) within its bar")
    _sync(loaded.device)
    init = cand.init_inputs(loaded.task, loaded.module)
    out = {"inputs": inputs, "native": _wire(native), "hi": _wire(ref_hi) if ref_hi is not None else None,
           "init_inputs": init, "state": state, "arg_reductions": arg_reductions(native, inputs), "notes": notes,
           "plan": plan.model_dump() if plan is not None else None, "reference_precision": ref["precision"],
           "native_spread": ref["spread"], "sampled_torch_err": ref["sampled"],
           "workspace_bytes": ref["workspace_bytes"]}
    if req.get("work"):  # benchmark: the FLOPs of one forward, counted on meta tensors (benchmark/work.py)
        from evokernel_mcp.benchmark.work import count_flops

        out["work"] = count_flops(model, inputs)
    if req.get("hold"):
        loaded.held_hi = out["hi"]
        out["hi"], out["hi_held"] = None, out["hi"] is not None
    return out


def ref_plan(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The memory plan ref_case would make for (shape, seed), from meta tensors only: nothing is allocated but
    the reference model (built for the case anyway). Reply: {"plan": plan fields, or None when the shapes are
    not known before the inputs exist}."""
    loaded.memory_factor = float(req.get("memory_factor") or 0.0)
    model = _built_model(loaded, int(req["seed"]))
    plan = _plan(loaded, model, req["shape"], None, bool(req.get("hi", True)))[0]
    return {"plan": plan.model_dump() if plan is not None else None}


def ref_expected(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The reference's outputs on inputs given by the runner (benchmark's post-timing checks), or with
    held=true the float64 outputs ref_case kept (then dropped here). own_inputs=true: the forward runs on the
    received inputs themselves (no copy); a reference that modifies them is refused (MODIFIED_INPUTS), and the
    runner asks again without it."""
    if req.get("held"):
        hi, loaded.held_hi = getattr(loaded, "held_hi", None), None
        return {"hi": hi}
    inputs = _to(req["inputs"], loaded.device)
    model = _model(loaded, int(req["seed"]))
    # verify's reference outputs (ref_case): the native run-to-run spread of an ill-conditioned output, or
    # PyTorch's sampled error where the float64 copy did not run, come along so the runner judges by verify's bar
    if req.get("own_inputs"):  # this process's own copy: no second one (device memory), checked by digest
        ref, kept = _on_own_inputs(inputs, lambda x: reference_outputs(model, x, bool(req.get("hi", True)),
                                                                       loaded.device))
        if not kept:
            raise HarnessError(f"{MODIFIED_INPUTS}: ask again with a copy")
    else:
        ref = reference_outputs(model, inputs, bool(req.get("hi", True)), loaded.device)
    native, ref_hi = ref["native"], ref["hi"]
    _sync(loaded.device)
    arg = arg_reductions(native, inputs)
    out = {"native": _wire(native), "hi": _wire(ref_hi) if ref_hi is not None else None, "arg_reductions": arg,
           "native_spread": ref["spread"], "sampled_torch_err": ref["sampled"], "reference_precision": ref["precision"]}
    return out  # (an arg-reduction's values: the runner judges with the inputs it sent, never a copy sent back)


# ---------------------------------------------------------------- candidate child


def _digests(inputs: list[Any]) -> list[Any]:
    """compare.digest of each tensor input (None for the others)."""
    import torch

    from evokernel_mcp.verify.compare import digest

    return [digest(t) if isinstance(t, torch.Tensor) else None for t in inputs]


def _wire(out: Any) -> Any:
    """A reference's output for the wire: plain tensors, tuples/lists/dicts, Python numbers (a complex
    number as a 0-d complex128 tensor: frames carry no complex scalars)."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (list, tuple)):
        return type(out)(_wire(v) for v in out) if type(out) in (list, tuple) else tuple(_wire(v) for v in out)
    if isinstance(out, dict):
        return {str(k): _wire(v) for k, v in out.items()}
    if isinstance(out, complex):
        return torch.tensor(out, dtype=torch.complex128)
    return out


def _plain(out: Any) -> Any:
    """Outputs as plain data for the wire: tensors (a subclass is sent as its plain data and named),
    tuples/lists/dicts of them, Python scalars. Anything else raises a CandidateError naming it."""
    import torch

    if isinstance(out, torch.Tensor):
        return out.detach() if type(out) in (torch.Tensor, torch.nn.Parameter) else \
            {"__subclass__": type(out).__name__, "data": out.detach().as_subclass(torch.Tensor)}
    if isinstance(out, (list, tuple)):
        return type(out)(_plain(v) for v in out) if type(out) in (list, tuple) else tuple(_plain(v) for v in out)
    if isinstance(out, dict):
        return {str(k): _plain(v) for k, v in out.items()}
    if isinstance(out, complex):
        return torch.tensor(out, dtype=torch.complex128)
    if out is None or isinstance(out, (bool, int, float)):
        return out
    raise cand.CandidateError(f"candidate returned a {type(out).__name__}; return the output tensor(s) like "
                              "the reference's forward")
