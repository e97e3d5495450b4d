"""Device memory one process caches is memory no other process can use (the runner, the candidate, the
next job's reference all share one GPU): hand it back to the driver at the points that matter."""

from __future__ import annotations

import sys
from typing import Any


def release_cached(min_idle_bytes: int = 0) -> None:
    """torch.cuda.empty_cache() when CUDA/HIP is in use in this process and the allocator holds more
    than min_idle_bytes it is not using (a no-op on the CPU path, and before torch is imported)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    if min_idle_bytes and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() <= min_idle_bytes:
        return
    torch.cuda.empty_cache()


# The runner's allocator never splits a cached block bigger than this for a smaller request. Without it, a
# long-lived small allocation (cuBLAS's workspace at the first matmul, a cached tensor) carved out of a
# gigabyte block that a big job left cached pins that whole block for the runner's life. On an H100 the runner
# held 2 GiB beyond its context from its first benchmark on, through every later job (most likely a block of
# the ceilings' 2 GiB copy buffers); with this setting its floor is its context again. Set for the runner's
# process only (runner_alloc_env); a child's allocator is torch's default.
RUNNER_MAX_SPLIT_MB = 256
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def runner_alloc_env(env) -> None:
    """Before torch starts in the runner: max_split_size_mb (RUNNER_MAX_SPLIT_MB) in the allocator's settings,
    unless the user set the allocator's settings already (theirs are kept as they are)."""
    if not any(env.get(k) for k in ALLOC_CONF_VARS):
        env["PYTORCH_CUDA_ALLOC_CONF"] = f"max_split_size_mb:{RUNNER_MAX_SPLIT_MB}"


KEEP_MAX_BYTES = 512 << 20
KEEP_FRACTION = 0.05


def trim_between_cases() -> None:
    """Between the cases of one job (runner side): give cached memory back only when more than min(512 MiB,
    5 % of the device) is idle. Every empty_cache means cudaFree now and cudaMalloc on the next case, driver
    calls that slow down when a second GPU's processes make theirs. What stays cached is not free for the next
    case's memory plan in the children: kept this small, it can move only a case within that much of the
    device's limit; the gigabytes of a big case still go back."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    release_cached(int(min(KEEP_MAX_BYTES, KEEP_FRACTION * total)))


def _host_cache_release():
    """torch's call that gives its cached pinned host memory back (its name varies by version), or None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return next((f for f in (getattr(torch._C, n, None) for n in ("_accelerator_emptyHostCache", "_host_emptyCache"))
                 if f is not None), None)


def host_empty(shape, dtype):
    """A host tensor to stage device data in (the runner's copies of a big shape's inputs): pinned where CUDA is
    in use and torch can give pinned memory back (release_host), so the copies run at the link's speed, not
    pageable memory's (a few GB/s); pageable otherwise, or when pinning is refused."""
    import torch

    if torch.cuda.is_initialized() and _host_cache_release() is not None:
        try:
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        except RuntimeError:
            pass
    return torch.empty(shape, dtype=dtype)


def release_host() -> None:
    """The pinned host memory torch caches after host_empty's tensors are gone goes back to the system."""
    f = _host_cache_release()
    if f is not None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            f()


def map_tensors(x: Any, fn) -> Any:
    """The same structure (lists, tuples, dicts) with fn applied to every tensor in it."""
    import torch

    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(map_tensors(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: map_tensors(v, fn) for k, v in x.items()}
    return x


def on_host(x: Any) -> Any:
    """The same structure with every tensor copied to host memory (host_empty: pinned where it can be given
    back, release_host at the job's end), the device copies let go by the caller."""
    return map_tensors(x, lambda t: t if t.device.type == "cpu" else host_empty(t.shape, t.dtype).copy_(t))
