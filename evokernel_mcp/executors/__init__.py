"""Where batch stages run: the local device pool (default) or a Ray cluster (many GPUs, many hosts).

`serve --executor local|ray --ray-address auto|ray://head:10001 [--ray-slots N]` calls `configure`; the
environment variables EVOKERNEL_EXECUTOR, EVOKERNEL_RAY_ADDRESS and EVOKERNEL_RAY_SLOTS give the same
for a server started by a client config. `executor_for(pool)` is called inside a job (the runtime loop):
the local executor wraps that job manager's pool; the Ray executor is one per server process.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from evokernel_mcp.executors.base import Executor, Stage
from evokernel_mcp.executors.local import LocalExecutor

KINDS = ("local", "ray")


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "local"
    ray_address: str | None = "auto"
    ray_slots: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"executor {self.kind!r}: one of {', '.join(KINDS)}")
        if self.ray_slots is not None and self.ray_slots < 1:
            raise ValueError(f"ray slots must be >= 1, got {self.ray_slots}")


def _from_env() -> ExecutorConfig:
    slots = os.environ.get("EVOKERNEL_RAY_SLOTS", "").strip()
    return ExecutorConfig(kind=os.environ.get("EVOKERNEL_EXECUTOR", "local").strip() or "local",
                          ray_address=os.environ.get("EVOKERNEL_RAY_ADDRESS", "auto").strip() or "auto",
                          ray_slots=int(slots) if slots else None)


_config: ExecutorConfig | None = None
_ray: Executor | None = None
_lock = threading.Lock()


def configure(kind: str = "local", ray_address: str | None = "auto", ray_slots: int | None = None) -> ExecutorConfig:
    """Choose the executor of this process (the CLI calls it before the server starts)."""
    global _config
    cfg = ExecutorConfig(kind=kind, ray_address=ray_address, ray_slots=ray_slots)
    with _lock:
        _config = cfg
    return cfg


def config() -> ExecutorConfig:
    global _config
    with _lock:
        if _config is None:
            _config = _from_env()
        return _config


def set_executor(ex: Executor | None) -> None:
    """Use this executor for the non-local kind (tests and scripts that built a RayExecutor themselves)."""
    global _ray
    with _lock:
        _ray = ex


def executor_for(pool) -> Executor:
    """The executor batch stages run on: the local pool, or this process's Ray executor."""
    global _ray
    cfg = config()
    if cfg.kind == "local":
        return LocalExecutor(pool)
    with _lock:
        if _ray is None:
            from evokernel_mcp.executors.ray_executor import RayExecutor

            _ray = RayExecutor(cfg.ray_address, cfg.ray_slots)
        return _ray


__all__ = ["KINDS", "Executor", "ExecutorConfig", "LocalExecutor", "Stage", "config", "configure", "executor_for",
           "set_executor"]
