"""Measured ceilings of a device: copy bandwidth and matmul TFLOP/s, measured once and cached on disk.

Runner side (`worker_ceilings`, run inside the device's runner): a large device-to-device copy counting
bytes read + written, and n x n x n matrix products in bf16 / fp16 / fp32 on random data (never zeros:
zeros run faster than real data), each timed with events after warm-up; median of the timed runs.
Server side: `load_cached` / `store` under sub_state_dir("ceilings"), keyed by device name + driver +
torch version, and the `measure_ceilings` tool in api.py.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import logging
from typing import Any

from evokernel_mcp.benchmark.messages import CeilingsRequest
from evokernel_mcp.benchmark.models import Ceilings
from evokernel_mcp.models import Provenance
from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.runtime.devmem import release_cached

log = logging.getLogger(__name__)
MATMUL_DTYPES = ("bf16", "fp16", "fp32")


def cache_key(device: str, driver: str | None, torch_version: str | None) -> str:
    text = json.dumps([device, driver, torch_version])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_cached(device: str, driver: str | None, torch_version: str | None) -> Ceilings | None:
    path = sub_state_dir("ceilings") / f"{cache_key(device, driver, torch_version)}.json"
    try:
        c = Ceilings.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return c.model_copy(update={"cached": True})


def store(c: Ceilings) -> None:
    path = sub_state_dir("ceilings") / f"{cache_key(c.device, c.driver, c.torch_version)}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(c.model_copy(update={"cached": False}).model_dump_json(indent=1))
    tmp.replace(path)


# ------------------------------------------------------------------------------------ runner side
def _median(x: list[float]) -> float:
    s = sorted(x)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def _time_events(fn, reps: int, warmup: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in pairs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return _median([s.elapsed_time(e) for s, e in pairs])


def _time_host(fn, reps: int, warmup: int) -> float:
    import time

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t) / 1e6)
    return _median(out)


def device_identity() -> dict[str, Any]:
    """Name, driver and torch version of the runner's device (the cache key)."""
    import torch

    from evokernel_mcp.benchmark.clocks import driver_version

    if torch.cuda.is_available():
        backend = "rocm" if torch.version.hip else "cuda"
        return {"device": torch.cuda.get_device_name(0), "backend": backend,
                "driver": driver_version(backend) or f"{backend} runtime {torch.version.hip or torch.version.cuda}",
                "torch": torch.__version__}
    import platform

    return {"device": f"cpu ({platform.processor() or platform.machine()})", "backend": "none",
            "driver": None, "torch": torch.__version__}


def measure(copy_bytes: int | None = None, matmul_n: int | None = None) -> Ceilings:
    """Measure copy bandwidth and matmul TFLOP/s on this process's device (GPU: events; CPU: host clock)."""
    import torch

    ident = device_identity()
    gpu = ident["backend"] != "none"
    dev = "cuda" if gpu else "cpu"
    timer = _time_events if gpu else _time_host
    copy_bytes = copy_bytes or ((2 << 30) if gpu else (32 << 20))
    matmul_n = matmul_n or (8192 if gpu else 256)
    reps, warm = (10, 3) if gpu else (3, 1)
    src = torch.randn(copy_bytes // 4, device=dev)
    dst = torch.empty_like(src)
    ms = timer(functools.partial(dst.copy_, src), reps, warm)
    copy_gbs = 2 * src.numel() * 4 / (ms * 1e-3) / 1e9
    del src, dst
    release_cached()  # the copy's gigabytes go back before cuBLAS makes its lasting workspace
    tflops: dict[str, float] = {}
    torch_dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    for name in MATMUL_DTYPES if gpu else ("fp32",):  # CPU bf16/fp16 matmuls are emulated: no ceiling
        a = torch.randn(matmul_n, matmul_n, device=dev, dtype=torch_dtypes[name])
        b = torch.randn(matmul_n, matmul_n, device=dev, dtype=torch_dtypes[name])
        ms = timer(lambda a=a, b=b: torch.matmul(a, b), reps, warm)
        tflops[name] = 2 * matmul_n**3 / (ms * 1e-3) / 1e12
        del a, b
    release_cached()
    where = f"measured on {ident['device']} ({'device events' if gpu else 'host clock, CPU'})"
    return Ceilings(
        device=ident["device"], driver=ident["driver"], torch_version=ident["torch"], copy_gbs=copy_gbs,
        matmul_tflops=tflops, measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        host_timing=not gpu,
        provenance=[
            Provenance(field="copy_gbs", source="measured", detail=f"{where}: tensor.copy_ of "
                       f"{copy_bytes >> 20} MiB fp32, (read+write bytes) / median of {reps} timed copies"),
            Provenance(field="matmul_tflops", source="measured", detail=f"{where}: torch.matmul {matmul_n}^3 on "
                       f"torch.randn data, 2n^3 / median of {reps}; fp32 with torch's default "
                       "(no TF32 unless enabled)"),
        ])


def ensure(refresh: bool = False, progress=None, **sizes: Any) -> Ceilings:
    """Cached ceilings of this runner's device, measured (and stored) when absent or refresh is asked."""
    ident = device_identity()
    c = None if refresh else load_cached(ident["device"], ident["driver"], ident["torch"])
    if c is not None:
        if c.launch_cost_detail is None and not c.host_timing:  # cached before the launch cost existed
            c = with_launch_cost(c, ident["backend"], progress)
            store(c)
            c = c.model_copy(update={"cached": True})
        return c
    if progress is not None:
        progress(0, 1, f"measuring ceilings of {ident['device']} (copy bandwidth, matmul rates)")
    c = measure(sizes.get("copy_bytes"), sizes.get("matmul_n"))
    c = with_launch_cost(c, ident["backend"], progress)
    store(c)
    return c


def with_launch_cost(c: Ceilings, backend: str, progress=None) -> Ceilings:
    """c plus the device's launch cost (launch_cost.py); CPU: none."""
    if backend == "none":
        return c
    from evokernel_mcp.benchmark import launch_cost

    if progress is not None:
        progress(0, 1, "measuring the launch cost ncu counts (ncu on a 1-element kernel)")
    lc = launch_cost.measure(backend)
    prov = [*c.provenance, Provenance(field="launch_cost_us", source="measured" if lc.us is not None else "none",
                                      detail=lc.detail)]
    return c.model_copy(update={"launch_cost_us": lc.us, "launch_cost_detail": lc.detail, "provenance": prov})


def worker_ceilings(ctx: Any, req: CeilingsRequest, progress) -> Ceilings:  # noqa: ARG001
    """Runner op "measure_ceilings": the ceilings of this runner's device (cached unless req.refresh)."""
    import torch

    if torch.cuda.is_available():  # the launch cost is measured on the activity clock
        from evokernel_mcp.benchmark.timing import prime_activity

        prime_activity()
    c = ensure(req.refresh, progress, copy_bytes=req.copy_bytes, matmul_n=req.matmul_n)
    progress(1, 1, "done")
    return c
