"""The halves of benchmark that run INSIDE sandboxed children (runtime/child.py), where the kernels
launch: timing an arm (the candidate, the PyTorch reference, or a baseline source) with our loop
(timing.py, bound at the child's start, before any agent code loaded), and the candidate's outputs for
the post-timing checks. Times are raw: statistics, speedup and the verdict are computed in the runner
and the server, out of the agent's reach; a time a child reports about itself is checked there
against the device's physical floor."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.benchmark import timing
from evokernel_mcp.verify.sides import _model, _plain, _sync, _to, candidate_fn


def _clone(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _nbytes(inputs: list[Any]) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))


def _callable(loaded, req: dict[str, Any]):
    if loaded.role == "reference":
        return _model(loaded, int(req["seed"]))
    return candidate_fn(loaded, req)


def time_arm(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Time this child's callable on copies of req['inputs'] (TimingOptions in req['options'])."""
    import torch

    gpu = loaded.device != "cpu"
    fn = _callable(loaded, req)
    inputs = _to(req["inputs"], loaded.device)
    opt = timing.TimingOptions(**req["options"])
    k, flusher = 1, None
    if gpu and opt.cold_cache:
        l2, mall, _ = timing.cache_bytes(0)
        k = timing.copies_for(_nbytes(inputs), l2 + mall, torch.cuda.mem_get_info()[0])
        flusher = timing.CacheFlusher(0)
    arg_sets = [_clone(inputs) for _ in range(k)]
    with torch.no_grad():
        if gpu:
            run = timing.time_device(fn, arg_sets, opt, flusher=flusher)
        else:
            run = timing.time_host(fn, arg_sets, opt)
    out = run.to_dict()
    loaded.bench_sets = arg_sets  # the candidate's post-timing check refills one of these in place
    loaded.bench_reps = len(out["times_ms"])
    _sync(loaded.device)
    return out


def cand_checks(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The candidate's outputs (1) on the storage of its last timed input set, refilled in place with
    req['refill'] (a callable that caches by tensor address fails here) and (2) on fresh inputs."""
    import torch

    fn = _callable(loaded, req)
    sets = getattr(loaded, "bench_sets", None) or [_to(req["refill"], loaded.device)]
    target = sets[(getattr(loaded, "bench_reps", 1) - 1) % len(sets)]
    with torch.no_grad():
        for t, v in zip(target, _to(req["refill"], loaded.device)):
            if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape:
                t.copy_(v)
        out_refill = fn(*target)
        _sync(loaded.device)
        out_refill = _plain(out_refill)
        out_fresh = _plain(fn(*_to(req["fresh"], loaded.device)))
    _sync(loaded.device)
    loaded.bench_sets = None
    first = out_fresh[0] if isinstance(out_fresh, (list, tuple)) else out_fresh
    dtype = str(first.dtype).removeprefix("torch.") if isinstance(first, torch.Tensor) else None
    return {"refill": out_refill, "fresh": out_fresh, "output_dtype": dtype}
