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
