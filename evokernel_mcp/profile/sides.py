"""The half of profile_pmc / thread_trace that runs INSIDE the profiled child (runtime/child.py), under the
profiler, with only the candidate loaded: its warm-up launches, then the profiled ones bracketed by
cudaProfilerStart/Stop (ncu: --profile-from-start off; rocprofv3 selects by --kernel-iteration-range)."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.verify.cand_side import candidate_fn
from evokernel_mcp.verify.sides import _sync, _to


def profile_run(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """req: inputs (from the reference's process), init_inputs, state, seed, warmup, iters."""
    import torch

    fn = candidate_fn(loaded, req)
    inputs = _to(req["inputs"], loaded.device)
    gpu = loaded.device != "cpu"
    warmup, iters = int(req.get("warmup", 1)), int(req.get("iters", 1))
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        _sync(loaded.device)
        if gpu:
            torch.cuda.profiler.start()
        for _ in range(iters):
            fn(*inputs)
        _sync(loaded.device)
        if gpu:
            torch.cuda.profiler.stop()
    return {"warmup": warmup, "iters": iters}
