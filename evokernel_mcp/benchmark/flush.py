"""The cold-cache side of a timed repetition (our code, in each arm's process): the device's cache sizes, the
read-only flush pass that evicts them before every timed launch (timing.py's docstring says why read-only), and
how many input copies to rotate among so that the inputs themselves do not stay in cache."""

from __future__ import annotations

from typing import Any

MIN_FLUSH_BYTES = 256 << 20
MAX_COPIES = 16


def cache_bytes(device: Any) -> tuple[int, int, str]:
    """(L2 bytes, Infinity Cache / MALL bytes, where they came from) for a torch device."""
    import torch

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    mall, src = 0, "torch.cuda.get_device_properties(L2_cache_size)"
    arch = (getattr(props, "gcnArchName", "") or "").split(":")[0]
    if arch.startswith("gfx"):
        try:
            from evokernel_mcp.arch import table
            from evokernel_mcp.benchmark.roofline import resolve_product

            product = resolve_product(arch, props.name)
            f = table.product_fact(arch, product, "infinity_cache_mib") if product else None
            if f is not None:
                mall = int(float(f.value) * (1 << 20))
                src += f"; MALL from {f.ref}"
        except Exception:  # noqa: BLE001 - an arch the table does not know: no MALL term, keep the floor
            pass
    return l2, mall, src


class CacheFlusher:
    """Evicts L2 (+ MALL) with a read-only pass over a buffer written once, so the caches hold clean lines."""

    def __init__(self, device: Any, nbytes: int | None = None) -> None:
        import torch

        l2, mall, self.source = cache_bytes(device)
        self.nbytes = int(nbytes or max(2 * (l2 + mall), MIN_FLUSH_BYTES))
        self.buf = torch.ones(self.nbytes // 4, dtype=torch.float32, device=device)  # the only write pass
        self.sink = torch.empty((), dtype=torch.float32, device=device)
        self.flush()  # evicts the dirty lines left by the fill itself

    def flush(self) -> None:
        import torch

        torch.sum(self.buf, dim=0, out=self.sink)


def copies_for(input_bytes: int, cache_total: int, memory_free: int | None = None) -> int:
    """How many input copies to rotate among: enough to exceed 2x the caches, at most MAX_COPIES, within memory."""
    if input_bytes <= 0:
        return 1
    k = min(MAX_COPIES, max(1, -(-2 * cache_total // input_bytes)))
    if memory_free is not None:
        k = max(1, min(k, int(memory_free * 0.5 // input_bytes)))
    return int(k)
