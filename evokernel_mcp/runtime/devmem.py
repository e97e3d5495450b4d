"""Device memory one process caches is memory no other process can use (the runner, the candidate, the
next job's reference all share one GPU): hand it back to the driver at the points that matter."""

from __future__ import annotations

import sys


def release_cached(min_idle_bytes: int = 0) -> None:
    """torch.cuda.empty_cache() when CUDA/HIP is in use in this process and the allocator holds more
    than min_idle_bytes it is not using (a no-op on the CPU path, and before torch is imported)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    if min_idle_bytes and torch.cuda.memory_reserved() - torch.cuda.memory_allocated() <= min_idle_bytes:
        return
    torch.cuda.empty_cache()


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
