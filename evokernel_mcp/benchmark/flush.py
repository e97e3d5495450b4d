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


def lean_flush_bytes(l2: int, mall: int) -> int | None:
    """The flush buffer of a lean arm (a shape of more than 1 GB of its own: its inputs alone are many times the
    caches): twice the caches it evicts, without MIN_FLUSH_BYTES's floor (an H100: 100 MB, not 256 MiB, beside the
    running arm's forward); None where the L2 size is unknown (the floor stays)."""
    return 2 * (l2 + mall) if l2 > 0 else None


class CacheFlusher:
    """Evicts L2 (+ MALL) with a read-only pass over a buffer written once, so the caches hold clean lines."""

    def __init__(self, device: Any, nbytes: int | None = None) -> None:
        import torch

        l2, mall, self.source = cache_bytes(device)
        self.nbytes = int(nbytes or max(2 * (l2 + mall), MIN_FLUSH_BYTES))
        self.device = device
        self.buf: Any = None
        self.sink = torch.empty((), dtype=torch.float32, device=device)
        self.restore()

    def restore(self) -> None:
        """The buffer made (again, after release): written once, then read once, so the caches hold clean lines."""
        import torch

        if self.buf is None:
            self.buf = torch.ones(self.nbytes // 4, dtype=torch.float32, device=self.device)  # the only write pass
            self.flush()  # evicts the dirty lines left by the fill itself

    def release(self) -> None:
        """The buffer goes (its device memory back once the allocator's cache is emptied): a lean arm between its
        blocks holds no flush buffer beside the running arm (blocks.BlockTimer.give_back); restore() before the
        next flush."""
        self.buf = None

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
