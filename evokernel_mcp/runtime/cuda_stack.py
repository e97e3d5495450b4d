"""The per-thread stack the CUDA driver reserves for a context, set low in each of our processes on an NVIDIA GPU.

A context reserves its stack for every thread the device can hold at once: at the driver's default of 1,024
bytes a thread that is most of what an idle torch process holds beyond the context itself (bench/ctx_memory.py,
on an H100: 612 MiB an idle torch process, 414 MiB with the limit at 256 bytes). A job has four or five of our
processes on the device (runner, reference, candidate, arms, a spare), so the default costs a 1-2 GB problem
about 1 GB of its device-memory plan for nothing it uses.

Lowering the limit changes no kernel's behaviour: per the driver API (cuCtxSetLimit, CU_LIMIT_STACK_SIZE) the
driver raises the stack for each launch that needs more, and keeps it raised, so a kernel with a deep stack
(spills, local arrays, recursion) still runs, and every launch after the first (the warm-ups, before any
timing) finds the room made. tests/runtime/test_cuda_stack_gpu.py launches such a kernel in a process with the
low limit. ROCm is left as it is: its scratch memory is sized per launch.

Called through ctypes on libcuda after torch has made the process's context (the primary context torch uses).
"""

from __future__ import annotations

import ctypes

_CU_LIMIT_STACK_SIZE = 0


def limit_stack(nbytes: int) -> int | None:
    """Set the stack limit of this process's current CUDA context (made with torch if there is none yet) to
    `nbytes` a thread; returns the limit the driver reports afterwards, or None where nothing was set (0: keep
    the driver's default; not a CUDA build of torch; no device; the driver refused: never fatal)."""
    if nbytes <= 0:
        return None
    try:
        import torch

        if not getattr(torch.version, "cuda", None) or not torch.cuda.is_available():
            return None
        torch.zeros(1, device="cuda")  # the primary context, made by torch (a no-op where it exists)
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        if lib.cuCtxSetLimit(_CU_LIMIT_STACK_SIZE, nbytes) != 0:
            return None
        got = ctypes.c_size_t()
        if lib.cuCtxGetLimit(ctypes.byref(got), _CU_LIMIT_STACK_SIZE) != 0:
            return None
        return int(got.value)
    except Exception:  # noqa: BLE001 - a default left in place costs memory, never a job
        return None
