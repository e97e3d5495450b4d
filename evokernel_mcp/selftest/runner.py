"""Run the self-test: start the server (a subprocess over stdio by default, as an agent would), run the steps
through the MCP client, collect the versions of the stack, and (with --capture) record the raw tool outputs."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import logging
import os
import re
import socket
import sys
from pathlib import Path

from evokernel_mcp import executables
from evokernel_mcp.selftest import steps
from evokernel_mcp.selftest.models import SelftestReport
from evokernel_mcp.subproc import probe_version

log = logging.getLogger(__name__)


def rocm_version() -> str | None:
    """ROCm's own version file ($ROCM_PATH/.info/version), else the version in the install path."""
    root = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    f = root / ".info" / "version"
    if f.is_file():
        return f.read_text().strip() or None
    m = re.search(r"rocm-(\d+\.\d+(?:\.\d+)?)", str(root.resolve()))
    return m.group(1) if m else None


def att_decoder_version() -> str | None:
    from evokernel_mcp.errors import ToolNotFound
    from evokernel_mcp.profile.rocprofv3 import find_att_library

    try:
        d = Path(find_att_library())
    except ToolNotFound:
        return None
    libs = sorted(d.glob("librocprof-trace-decoder*.so*"))
    names = sorted({p.resolve().name for p in libs})
    return f"{', '.join(names)} in {d}" if names else str(d)


def versions() -> dict[str, str | None]:
    """ROCm, rocprofv3, the ATT decoder, torch, triton; nvcc, ncu and the driver on CUDA hosts."""
    out: dict[str, str | None] = {"python": sys.version.split()[0], "rocm": rocm_version()}
    for name in ("rocprofv3", "amd-smi", "hipcc", "nvcc", "ncu"):  # found as doctor and the tools find them
        exe = executables.find(name)
        out[name] = (probe_version(exe, executables.EXECUTABLES[name].version_args) or "found, version unknown") \
            if exe else None
    out["att_decoder"] = att_decoder_version()
    smi = executables.find("nvidia-smi")
    out["nvidia_driver"] = probe_version(smi, ("--query-gpu=driver_version", "--format=csv,noheader")) if smi else None
    for mod in ("torch", "triton", "mcp"):
        try:
            out[mod] = importlib.metadata.version(mod)
        except importlib.metadata.PackageNotFoundError:
            out[mod] = None
    from evokernel_mcp import __version__

    out["evokernel_mcp"] = __version__
    return out


def _client(inproc: bool):
    from mcp import Client

    if inproc:
        from evokernel_mcp.server import build_server

        return Client(build_server())
    from mcp.client.stdio import StdioServerParameters

    return Client(StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"],
                                        env=dict(os.environ)))


def select(only: list[str] | None) -> list[tuple]:
    if not only:
        return list(steps.STEPS)
    known = {s[0] for s in steps.STEPS}
    bad = [o for o in only if o not in known and not any(k.startswith(o) for k in known)]
    if bad:
        raise ValueError(f"unknown step(s) {bad}; steps: {', '.join(sorted(known))}")
    # query_rocminfo always runs first: the other steps need to know the host
    return [s for s in steps.STEPS if s[0] == "query_rocminfo" or any(s[0].startswith(o) for o in only)]


async def run_selftest(*, only: list[str] | None = None, quick: bool = False, capture_dir: str | None = None,
                       inproc: bool = False, step_timeout_s: float = 900.0) -> SelftestReport:
    chosen = select(only)
    report = SelftestReport(host=socket.gethostname(), versions=versions(),
                            started_utc=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    async with _client(inproc) as client:
        ctx = steps.Ctx(client=client, quick=quick, step_timeout_s=step_timeout_s)
        for name, tool, fn, slow in chosen:
            log.info("selftest step %s", name)
            report.steps.append(await steps.run_step(ctx, name, tool, fn, slow))
        report.backend = ctx.backend
        qr = next((s for s in report.steps if s.name == "query_rocminfo"), None)
        report.devices = [qr.detail] if qr and qr.status == "pass" else []
    if capture_dir:
        from evokernel_mcp.selftest.capture import capture

        report.capture_dir = str(Path(capture_dir).resolve())
        capture(Path(capture_dir), report, ctx)
    report.exit_code = 1 if any(s.status in ("fail", "degraded") for s in report.steps) else 0
    return report
