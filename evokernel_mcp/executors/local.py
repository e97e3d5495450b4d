"""The default executor: this host's device pool (runtime/pool.py RunnerPool, one harness-only runner per
device). Slots are the pool's devices; the pool runs one op per device at a time (its per-device lock), so
every local device is busy with one stage and a benchmark has its device alone. Shared with the
single-candidate tools (verify_vs_pytorch, benchmark ...): they queue on the same per-device locks."""

from __future__ import annotations

from evokernel_mcp.executors.base import Executor, ProgressFn, Stage
from evokernel_mcp.runtime.pool import RunnerPool
from evokernel_mcp.runtime.protocol import WorkerReply


class LocalExecutor(Executor):
    name = "local"

    def __init__(self, pool: RunnerPool):
        self.pool = pool

    async def slots(self) -> list[str]:
        return list(self.pool.devices)

    async def run(self, slot: str, stage: Stage, on_progress: ProgressFn | None = None) -> WorkerReply:
        return await self.pool.call(slot, stage.op, stage.payload, timeout_s=stage.timeout_s, on_progress=on_progress)

    def capacity_hint(self) -> int:
        return len(self.pool.devices)

    def describe(self) -> str:
        return f"local pool ({', '.join(self.pool.devices)})"
