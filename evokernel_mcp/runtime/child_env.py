"""The environment of a sandboxed child (runtime/child_proc.py), and of the zygote that forks CPU children
(runtime/zygote_link.py starts it with a CPU child's)."""

from __future__ import annotations

import os
import time

from evokernel_mcp.runtime import pycache, sandbox


def child_env(device: str, scratch, level: str, *, triton_key: str | None = None, queues: int | None = None,
              extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandboxed child (the zygote is started with a CPU child's: zygote_link.py)."""
    env = sandbox.base_env({"HOME": str(scratch), "TMPDIR": str(scratch / "tmp"),
                            "TRITON_CACHE_DIR": str(scratch / ".triton")})
    env["_EVOKERNEL_SPAWNED_AT"] = repr(time.time())  # the child reports how long its exec took (boot_s)
    if triton_key and device != "cpu":  # an earlier spare's (child.py _triton_key)
        env["_EVOKERNEL_TRITON_KEY"] = triton_key
    for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "TRITON_INTERPRET"):
        if k in os.environ:
            env[k] = os.environ[k]
    env.update(pycache.child_env(level))  # the runner's bytecode, read-only, where torch ships none
    if queues:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = str(queues)
    if device == "cpu":  # host timing: one thread per arm, and an idle arm's threads never spin, so arms
        env["OMP_WAIT_POLICY"] = "PASSIVE"  # timed in turn do not compete for the cores
        env["OMP_NUM_THREADS"] = "1"
        # glibc's mmap threshold moves with each process's allocation history: a process still at the
        # default mmaps (and page-faults) every multi-MB output, measured 3x slower than its twin; fix it
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
        env.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 30))
    env.update(extra or {})
    return env
