"""The two halves of a verify case that run INSIDE sandboxed children (runtime/child.py), next to the
code they call. Nothing here judges: the runner compares (verify/runner_side.py).

Reference child (one per reference source): fresh inputs for (shape set, seed), the reference output
natively and in float64 (inputs upcast), the init inputs and the model's state (so a candidate
ModelNew gets the same weights). Candidate child (one per job): the candidate on those inputs, with
torch's uninitialised allocators poisoned (run A: NaN, run B: -320), on its own copies of the inputs.
"""

from __future__ import annotations

import copy
from typing import Any

from evokernel_mcp import candidate as cand


def _sync(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()


def _upcast(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]


def _clone(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _to(inputs: list[Any], device: str) -> list[Any]:
    import torch

    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]


def _model(loaded, seed: int):
    if seed not in loaded.models:
        loaded.models.clear()  # one seed's model at a time: memory
        loaded.models[seed] = cand.build_reference(loaded.task, loaded.module, seed, loaded.device)
    return loaded.models[seed]


def _outputs(model, inputs: list[Any], hi: bool) -> tuple[Any, Any]:
    import torch

    with torch.no_grad():
        native = model(*_clone(inputs))
        ref_hi = copy.deepcopy(model).double()(*_upcast(inputs)) if hi else None
    return native, ref_hi


def ref_case(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Inputs, native and float64 outputs, init inputs and state for one (shape set, seed)."""
    import torch

    seed = int(req["seed"])
    try:
        inputs = cand.make_inputs(loaded.task, req["shape"], seed, loaded.device, loaded.module)
    except Exception as e:  # noqa: BLE001 - the harness's or the reference's inputs, never the candidate
        raise HarnessError(f"making the inputs failed (reference get_inputs or the task's input specs): "
                           f"{type(e).__name__}: {e}") from e
    try:
        model = _model(loaded, seed)
        native, ref_hi = _outputs(model, inputs, bool(req.get("hi", True)))
    except Exception as e:  # noqa: BLE001
        raise HarnessError(f"the reference failed on these inputs: {type(e).__name__}: {e}") from e
    _sync(loaded.device)
    state = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    init = cand.init_inputs(loaded.task, loaded.module)
    return {"inputs": inputs, "native": native, "hi": ref_hi, "init_inputs": init, "state": state}


def ref_expected(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The reference's outputs on inputs given by the runner (benchmark's post-timing checks)."""
    model = _model(loaded, int(req["seed"]))
    native, ref_hi = _outputs(model, _to(req["inputs"], loaded.device), bool(req.get("hi", True)))
    _sync(loaded.device)
    return {"native": native, "hi": ref_hi}


class HarnessError(Exception):
    """The inputs or the reference failed: not the candidate's fault (reported as kind 'harness')."""

    kind = "harness"


def candidate_fn(loaded, req: dict[str, Any]):
    """The candidate as a callable on the reference's inputs (ModelNew built once per seed)."""
    import torch

    mod = loaded.module
    if callable(getattr(mod, "run", None)):
        return mod.run
    seed = int(req["seed"])
    if seed not in loaded.models:
        loaded.models.clear()
        torch.manual_seed(seed)
        try:
            model = mod.ModelNew(*req.get("init_inputs", []))
        except Exception as e:  # noqa: BLE001
            raise cand.CandidateError(f"ModelNew(*init_inputs) failed: {type(e).__name__}: {e}") from e
        state = req.get("state") or {}
        if state and set(state) == set(model.state_dict()):
            model.load_state_dict(state)
        loaded.models[seed] = model.to(loaded.device)
    return loaded.models[seed]


def cand_run(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Run the candidate on its own copies of the inputs; poison 'nan' | 'sentinel' | None."""
    import torch

    from evokernel_mcp.verify.compare import SENTINEL, poisoned_allocations

    fn = candidate_fn(loaded, req)
    inputs = _to(req["inputs"], loaded.device)
    before = _clone(inputs)
    poison = {"nan": float("nan"), "sentinel": SENTINEL}.get(req.get("poison") or "")
    with torch.no_grad():
        if poison is None:
            out = fn(*inputs)
        else:
            with poisoned_allocations(poison):
                out = fn(*inputs)
    _sync(loaded.device)
    mutated = any(isinstance(a, torch.Tensor) and not _same(a, b) for a, b in zip(inputs, before))
    return {"out": _plain(out), "inputs_mutated": mutated}


def _same(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(_bits(a), _bits(b)))


def _bits(t):
    from evokernel_mcp.verify.compare import _bits as bits

    return bits(t)


def _plain(out: Any) -> Any:
    """Outputs as plain data for the wire: tensors (a subclass is sent as its plain data and named),
    tuples/lists/dicts of them, Python scalars. Anything else raises a CandidateError naming it."""
    import torch

    if isinstance(out, torch.Tensor):
        return out if type(out) in (torch.Tensor, torch.nn.Parameter) else \
            {"__subclass__": type(out).__name__, "data": out.detach().as_subclass(torch.Tensor)}
    if isinstance(out, (list, tuple)):
        return type(out)(_plain(v) for v in out)
    if isinstance(out, dict):
        return {str(k): _plain(v) for k, v in out.items()}
    if out is None or isinstance(out, (bool, int, float)):
        return out
    raise cand.CandidateError(f"candidate returned a {type(out).__name__}; return the output tensor(s) like "
                              "the reference's forward")
