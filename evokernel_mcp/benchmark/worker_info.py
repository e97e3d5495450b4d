"""What the runner reports about its device for a benchmark: names, versions, cache size, and the
measured ceilings (harness code: measured by the runner itself, never by a candidate's process)."""

from __future__ import annotations

import platform
from typing import Any

from evokernel_mcp.runtime import protocol


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    if not torch.cuda.is_available():
        return {**info, "backend": "none", "name": f"cpu ({platform.machine()})", "arch": None}
    p = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    arch = (getattr(p, "gcnArchName", "") or "").split(":")[0] if hip else f"sm_{p.major}{p.minor}"
    return {**info, "backend": "rocm" if hip else "cuda", "name": p.name, "arch": arch,
            "hip": hip, "cuda": torch.version.cuda, "l2_bytes": int(getattr(p, "L2_cache_size", 0) or 0)}


def ceilings_for(wanted: bool, progress) -> dict[str, Any] | None:
    """The device's ceilings for a benchmark that asks for them (`wanted`), None on the CPU path."""
    import torch

    if not wanted or not torch.cuda.is_available():
        return None  # the CPU path has no device roofline: host timings are not compared to ceilings
    from evokernel_mcp.benchmark.ceilings import ensure

    try:
        return ensure(refresh=False, progress=progress).model_dump(mode="json")
    except Exception as e:  # noqa: BLE001 - ceilings are an extra: never fail the benchmark for them
        if protocol.classify_text(f"{type(e).__name__}: {e}"):
            raise
        return {"error": f"{type(e).__name__}: {e}"}
