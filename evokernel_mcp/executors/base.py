"""The Executor interface: where a stage of work (one runner op for one candidate) runs.

A stage is a runner op (runtime/ops.py: "verify", "verify_steps", "benchmark" ...) with a JSON-able
payload, the op's own time limit, and what device it needs. An executor owns a fixed set of *slots*
(one device each: a local GPU, a GPU held by a Ray actor on some host, or a CPU) and runs one stage at a
time per slot, so a stage that times has its device alone. Every executor keeps the trust model of the
local pool: the stage runs in a harness-only runner (runtime/runner.py) whose agent code lives in fresh
sandboxed children, under the same time limits; candidates and results cross by value (plain dicts).

    ex = executor_for(pool)                       # evokernel_mcp.executors
    slots = await ex.slots()                      # capacity = len(slots)
    reply = await ex.run(slots[0], Stage("verify", payload, timeout_s=60))   # a runtime.protocol.WorkerReply

Cancel: cancel the task awaiting `run` (anyio cancel scope, e.g. cancel_job on the batch job). Before the
cancellation propagates, the executor has stopped the stage (the local pool kills the runner's process
tree; Ray cancels the actor task, which does the same on its host). `run` never raises for a candidate's
misbehaviour: a hang, crash or raise is a WorkerReply with ok=false and an ErrorInfo.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from evokernel_mcp.runtime.protocol import WorkerReply

ProgressFn = Callable[[float, float, str], Awaitable[None] | None]
Needs = Literal["gpu", "any"]


@dataclass(frozen=True)
class Stage:
    """One runner op to run on one slot. `timeout_s` limits the op itself (a runner's cold start is not
    counted); `needs` is the device requirement ('gpu': a GPU if the executor has any, else its CPU path)."""

    op: str
    payload: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 300.0
    needs: Needs = "gpu"

    def __post_init__(self) -> None:
        if not self.op:
            raise ValueError("a stage needs an op name")
        if not self.timeout_s > 0:
            raise ValueError(f"stage timeout_s must be > 0, got {self.timeout_s}")


class Executor(abc.ABC):
    """Runs stages on slots. All methods are awaited in one event loop (the job manager's runtime loop)."""

    name: str = "executor"

    @abc.abstractmethod
    async def slots(self) -> list[str]:
        """The slot ids (one device each, e.g. 'cuda:0', 'ray:3'); starts the executor if needed."""

    @abc.abstractmethod
    async def run(self, slot: str, stage: Stage, on_progress: ProgressFn | None = None) -> WorkerReply:
        """Run `stage` on `slot` (one stage per slot at a time) and return the runner's reply."""

    def capacity_hint(self) -> int:
        """Slots without starting anything (a guess before a Ray executor has started: its configured size)."""
        return 1

    def describe(self) -> str:
        """One line for results and provenance: which executor, where."""
        return self.name

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release what the executor holds (actors, connections); the local pool is owned by the jobs."""
