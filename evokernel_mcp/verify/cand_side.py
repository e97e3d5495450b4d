"""The candidate's half of a verify case, run INSIDE the candidate's sandboxed child (runtime/child.py, op "run"),
next to the code it calls: the candidate on the reference's inputs, with torch's uninitialised allocators poisoned
(run A: NaN, run B: -320), on its own copies of the inputs (verify/sides.py has the reference's half). With
`keep`, the pristine inputs stay here for the next run (`same_inputs`), so they cross the pipe once per case.
Nothing here judges: the runner compares (verify/runner_side.py, verify/case.py)."""

from __future__ import annotations

from typing import Any

from evokernel_mcp import candidate as cand
from evokernel_mcp.verify.refout import _clone
from evokernel_mcp.verify.sides import _digests, _plain, _sync, _to


def candidate_fn(loaded, req: dict[str, Any]):
    """The candidate as a callable on the reference's inputs (ModelNew built once per seed, with the
    reference's init inputs and weights, in the mode the reference runs in: no .eval())."""
    import torch

    mod = loaded.module
    if callable(getattr(mod, "run", None)):
        return mod.run
    seed = int(req["seed"])
    key = req.get("model_key", seed)  # op verify_steps: per step and seed (a step's init inputs are its own)
    if key not in loaded.models:
        loaded.models.clear()
        torch.manual_seed(seed)
        try:
            model = mod.ModelNew(*req.get("init_inputs", []))
        except Exception as e:  # noqa: BLE001
            raise cand.CandidateError(f"ModelNew(*init_inputs) failed: {type(e).__name__}: {e}") from e
        state = req.get("state") or {}
        if state and set(state) == set(model.state_dict()):
            model.load_state_dict(state)
        loaded.models[key] = model.to(loaded.device)
    return loaded.models[key]


def cand_run(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Run the candidate on its own copies of the inputs; poison 'nan' | 'sentinel' | None.
    keep=true keeps the pristine inputs for the next request with same_inputs=true (which carries none);
    pristine=false (a job planned within its memory cap) keeps the inputs themselves and a digest of them instead
    of a second copy: a mutation is then found by the digest, and the next run gets the inputs as they are.
    load_only=true receives and keeps the inputs (with keep=true) and runs nothing: the runner lets its own copy go
    before the forward that needs the room (verify/runner_side._candidate_runs)."""
    import torch

    from evokernel_mcp.verify.compare import SENTINEL, bitwise_equal, poisoned_allocations

    fn = candidate_fn(loaded, req)
    if req.get("same_inputs"):
        kept = getattr(loaded, "kept_inputs", None)
        if kept is None:
            raise RuntimeError("same_inputs: no inputs kept from the previous run")
        pristine, want = kept
        inputs = _clone(pristine) if want is None else pristine
    else:
        inputs = _to(req["inputs"], loaded.device)
        copy = req.get("pristine", True)  # False: the job's memory plan has no room for a second copy
        pristine = _clone(inputs) if copy else inputs
        want = None if copy else _digests(inputs)
    loaded.kept_inputs = (pristine, want) if req.get("keep") else None
    if req.get("load_only"):
        return {"loaded": loaded.kept_inputs is not None}
    poison = {"nan": float("nan"), "sentinel": SENTINEL}.get(req.get("poison") or "")
    with torch.no_grad():
        if poison is None:
            out = fn(*inputs)
        else:
            with poisoned_allocations(poison):
                out = fn(*inputs)
    _sync(loaded.device)
    if want is None:
        mutated = any(isinstance(a, torch.Tensor) and not bitwise_equal(a, b) for a, b in zip(inputs, pristine))
    else:
        mutated = _digests(inputs) != want
    return {"out": _plain(out), "inputs_mutated": mutated}
