"""Where batch stages run: the local device pool (default) or a Ray cluster (many GPUs, many hosts).

The executor, ray_address and ray_slots settings (settings.py: `serve --executor local|ray --ray-address
auto|ray://head:10001 [--ray-slots N]` or their environment variables) choose it; `configure` overrides them.
`executor_for(pool)` is called inside a job (the runtime loop): the local executor wraps that job manager's pool;
the Ray executor is one per server process.
"""

from __future__ import annotations

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


def _from_settings() -> ExecutorConfig:
    from evokernel_mcp import settings

    s = settings.get()
    return ExecutorConfig(kind=s.executor, ray_address=s.ray_address, ray_slots=s.ray_slots)


_config: ExecutorConfig | None = None
_ray: Executor | None = None
_lock = threading.Lock()


def configure(kind: str = "local", ray_address: str | None = "auto", ray_slots: int | None = None) -> ExecutorConfig:
    """Choose the executor of this process instead of what the settings say (tests, scripts)."""
    global _config
    cfg = ExecutorConfig(kind=kind, ray_address=ray_address, ray_slots=ray_slots)
    with _lock:
        _config = cfg
    return cfg


def config() -> ExecutorConfig:
    global _config
    with _lock:
        if _config is None:
            _config = _from_settings()
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
