"""The Ray executor: `evokernel-mcp serve --executor ray --ray-address auto|ray://head:10001`.

Each slot is a Ray actor (`RunnerHost`) holding one GPU (num_gpus=1; num_cpus=1 on a CPU-only cluster)
for the executor's lifetime, on whichever host Ray places it. The actor hosts this package's RunnerPool
for that one device, so a stage there runs exactly as it runs locally: a harness-only runner
(runtime/runner.py) on the actor's host, agent code in fresh sandboxed children (bubblewrap), the same
per-op time limits, the runner replaced after a crash or a hang. A stage is one actor call; candidates and
results cross by value (the payload dict in, WorkerReply.model_dump() out). One stage per actor at a time
(the batch keeps one candidate in flight per slot, and the actor's pool lock serializes anyway), and an
actor's GPU is Ray's to give to it alone: GPU exclusivity while timing. Nothing of ours runs on a remote
host beyond Ray's own worker processes: the actors (and their runner children) end with this executor
or with the driver (the server) process.

Device visibility (the ROCm traps): Ray sets the visibility variable of the GPU it assigns
(CUDA_VISIBLE_DEVICES; HIP_VISIBLE_DEVICES since Ray 2.45 on AMD, ROCR_VISIBLE_DEVICES before).
The pool pins its runner with one variable (CUDA_ or HIP_VISIBLE_DEVICES = the physical id), and
rocprofv3 aborts when both HIP_ and ROCR_VISIBLE_DEVICES are set: on AMD the actor drops
ROCR_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL) from its own process environment
before it starts the pool (`actor_device`), so every process below it sees exactly one variable.

Cancelling `run` cancels the actor task (ray.cancel: the actor's asyncio task is cancelled, and the pool
kills the runner's process tree); an actor that dies (its host lost) gives a 'crash' reply and is
replaced before its next stage. `ray` is imported lazily: the server starts without it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio

from evokernel_mcp import settings
from evokernel_mcp.executors.base import Executor, ProgressFn, Stage
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.runtime.protocol import WorkerReply

log = logging.getLogger(__name__)

START_ALLOWANCE_S = 240.0  # a runner's cold start on the actor's host (torch import, spares) beyond the op's limit
AMD_DROP = ("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")


def actor_device(env: Mapping[str, str], gpu_ids: list[Any], vendor: str | None) -> tuple[str, list[str]]:
    """The pool device id for an actor that Ray gave `gpu_ids`, and the visibility variables to drop from
    the actor's environment so its runner sees exactly one (see the module doc). vendor: 'nvidia', 'amd'
    or None (no GPU: the CPU path)."""
    if not gpu_ids or vendor is None:
        return "cpu", []
    if len(gpu_ids) != 1:
        raise ValueError(f"a runner actor holds exactly one GPU, Ray gave it {gpu_ids}")
    gid = str(gpu_ids[0]).strip()
    if vendor == "amd":
        return f"rocm:{gid}", [v for v in AMD_DROP if v in env]
    return f"cuda:{gid}", []


def _vendor() -> str:
    """'amd' on a ROCm host (/dev/kfd and no NVIDIA driver), else 'nvidia' (called only when Ray gave a GPU)."""
    nv = "/proc/driver/nvidia/gpus"
    if os.path.exists("/dev/kfd") and not (os.path.isdir(nv) and os.listdir(nv)):
        return "amd"
    return "nvidia"


def _take_cpu_share(ids: list) -> str | None:
    """Under cpu_split "even": the runner this actor starts keeps to its GPU's share of the host's CPUs
    (runtime/cpus.py, by the GPU's index on the host), through cpus.RUNNER_CPUS in this actor's own
    environment (the runner applies it at its start; the actor's threads stay where Ray put them)."""
    from evokernel_mcp.runtime import cpus
    from evokernel_mcp.runtime.pool import host_gpus

    n = len(host_gpus())
    if cpus.split_setting() != "even" or len(ids) != 1 or n < 2:
        return None
    try:
        share = cpus.format_list(cpus.device_share(int(ids[0]), n))
    except ValueError:  # an id that is not an index
        return None
    os.environ[cpus.RUNNER_CPUS] = share
    return share


class RunnerHost:
    """The actor body (wrapped with ray.remote in RayExecutor): one device, one RunnerPool, one event loop
    (an async actor). Methods return plain dicts."""

    def __init__(self, use_gpu: bool):
        import ray

        ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", []) if use_gpu else []
        self.device, drop = actor_device(os.environ, ids, _vendor() if ids else None)
        for name in drop:  # this is the actor's own (Ray worker) process, not the server: one variable below it
            os.environ.pop(name, None)
        self.cpus = _take_cpu_share(ids)
        self.host = socket.gethostname()
        self.pool = None
        self.in_flight = 0

    def _pool(self):
        if self.pool is None:
            from evokernel_mcp.runtime.pool import RunnerPool

            self.pool = RunnerPool([self.device])
        return self.pool

    async def info(self) -> dict[str, Any]:
        vis = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
               if k in os.environ}
        restarts = dict(self.pool.restarts) if self.pool is not None else {}
        return {"device": self.device, "host": self.host, "pid": os.getpid(), "visible": vis, "restarts": restarts,
                "in_flight": self.in_flight, "cpus": self.cpus}

    async def call(self, op: str, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.in_flight += 1
        try:
            reply = await self._pool().call(self.device, op, payload, timeout_s=timeout_s)
        finally:
            self.in_flight -= 1
        out = reply.model_dump(mode="json")
        out["device"] = f"{self.device}@{self.host}"
        return out

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()
            self.pool = None


class RayExecutor(Executor):
    """Slots are RunnerHost actors. address: 'auto' (the cluster this host belongs to), 'ray://host:10001'
    (Ray Client), 'local' (start one here) or None (use the connection this process already has).
    slots: how many actors (default: one per GPU of the cluster, or one per CPU on a CPU-only cluster)."""

    name = "ray"

    def __init__(self, address: str | None = "auto", slots: int | None = None, *,
                 init_kwargs: dict[str, Any] | None = None):
        self.address, self.want, self.init_kwargs = address, slots, dict(init_kwargs or {})
        self._actors: dict[str, Any] = {}
        self._use_gpu = False
        self._start_lock = threading.Lock()
        self.hosts: dict[str, str] = {}

    # ---------------------------------------------------------------- start
    def _connect(self) -> None:
        import ray

        if not ray.is_initialized():
            if self.address is None:
                raise RuntimeError("Ray is not initialized in this process and no address was given")
            kw = {"log_to_driver": False, **self.init_kwargs}
            ray.init(address=None if self.address == "local" else self.address, **kw)

    def _actor_class(self):
        import ray

        res = {"num_gpus": 1, "num_cpus": 1} if self._use_gpu else {"num_cpus": 1}
        return ray.remote(max_restarts=0, **res)(RunnerHost)

    def _start(self) -> None:
        """Blocking: connect, size the slots, create the actors and wait until each has its device."""
        import ray

        self._connect()
        total = ray.cluster_resources()
        gpus, cpus = int(total.get("GPU", 0)), int(total.get("CPU", 0))
        self._use_gpu = gpus > 0
        n = self.want or (gpus if self._use_gpu else max(1, cpus))
        cls = self._actor_class()
        actors = {f"ray:{i}": cls.remote(self._use_gpu) for i in range(n)}
        infos = {slot: a.info.remote() for slot, a in actors.items()}
        wait_s = settings.get().start_timeout_s
        ready, pending = ray.wait(list(infos.values()), num_returns=len(infos), timeout=wait_s)
        for slot, ref in infos.items():
            if ref in ready:
                info = ray.get(ref)
                self._actors[slot] = actors[slot]
                self.hosts[slot] = f"{info['device']}@{info['host']}"
            else:
                ray.kill(actors[slot])
        if pending:
            log.warning("ray: %d of %d actors got no %s within %.0f s; using %d", len(pending), n,
                        "GPU" if self._use_gpu else "CPU", wait_s, len(self._actors))
        if not self._actors:
            raise RuntimeError(f"no Ray actor could get a {'GPU' if self._use_gpu else 'CPU'} within "
                               f"{wait_s:.0f} s (cluster resources: {total})")
        log.info("ray executor: %s", ", ".join(f"{s}={h}" for s, h in self.hosts.items()))

    def _ensure_started(self) -> None:
        with self._start_lock:
            if not self._actors:
                self._start()

    async def slots(self) -> list[str]:
        if not self._actors:
            await anyio.to_thread.run_sync(self._ensure_started)
        return list(self._actors)

    # ---------------------------------------------------------------- run
    async def run(self, slot: str, stage: Stage, on_progress: ProgressFn | None = None) -> WorkerReply:
        import ray

        t0 = time.perf_counter()
        actor = self._actors.get(slot)
        if actor is None:
            return self._failed(slot, "crash", f"slot {slot} is gone (its actor was lost and could not be "
                                "replaced)", t0)
        ref = actor.call.remote(stage.op, stage.payload, stage.timeout_s)
        try:
            with anyio.fail_after(stage.timeout_s + START_ALLOWANCE_S + 30):
                out = await asyncio.wrap_future(ref.future())
        except TimeoutError:  # the actor did not answer although its own pool limits the op: replace it
            await self._replace(slot, ref)
            return self._failed(slot, "timeout", f"{stage.op} got no answer from {self.hosts.get(slot, slot)} within "
                                f"{stage.timeout_s + START_ALLOWANCE_S + 30:.0f} s; the actor is replaced", t0)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError) as e:
            await self._replace(slot, None)
            return self._failed(slot, "crash", f"the Ray actor running {stage.op} on {self.hosts.get(slot, slot)} "
                                f"was lost ({type(e).__name__}); it is replaced before the next stage", t0,
                                detail=str(e)[-2000:])
        except BaseException:  # cancelled: stop the stage on its host (the actor's pool kills the runner)
            with anyio.CancelScope(shield=True):
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - already finished or the actor is gone
                    pass
            raise
        return WorkerReply(**out)

    def _failed(self, slot: str, kind: str, message: str, t0: float, detail: str | None = None) -> WorkerReply:
        return WorkerReply(ok=False, device=self.hosts.get(slot, slot), worker_replaced=True,
                           duration_s=time.perf_counter() - t0,
                           error=ErrorInfo(kind=kind, message=message, detail=detail))

    async def _replace(self, slot: str, ref: Any) -> None:
        import ray

        def replace() -> None:
            old = self._actors.get(slot)
            if ref is not None:
                try:
                    ray.cancel(ref, force=False)
                except Exception:  # noqa: BLE001
                    pass
            if old is not None:
                try:
                    ray.kill(old)
                except Exception:  # noqa: BLE001
                    pass
            new = self._actor_class().remote(self._use_gpu)
            try:
                info = ray.get(new.info.remote(), timeout=settings.get().start_timeout_s)
                self._actors[slot], self.hosts[slot] = new, f"{info['device']}@{info['host']}"
            except Exception:  # noqa: BLE001 - no capacity now: the slot is gone
                log.warning("ray: slot %s could not be replaced; continuing without it", slot)
                ray.kill(new)
                self._actors.pop(slot, None)

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(replace)

    def actor_infos(self) -> dict[str, dict[str, Any]]:
        """Blocking: each slot's device, host, visibility variables, runner restarts and calls in flight."""
        import ray

        refs = {slot: a.info.remote() for slot, a in self._actors.items()}
        return {slot: ray.get(ref, timeout=60) for slot, ref in refs.items()}

    def capacity_hint(self) -> int:
        return len(self._actors) or self.want or 1

    def describe(self) -> str:
        where = ", ".join(sorted(set(self.hosts.values()))) or "not started"
        return f"ray ({self.address or 'existing connection'}): {len(self._actors)} slots: {where}"

    async def aclose(self) -> None:
        import ray

        actors, self._actors = dict(self._actors), {}

        def close() -> None:
            refs = [a.close.remote() for a in actors.values()]
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=30)
            for a in actors.values():
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(close)
