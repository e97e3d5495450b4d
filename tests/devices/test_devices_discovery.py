"""query_rocminfo end to end: stand-in executables replaying genuine recordings ("replay"), the 'none' backend,
the per-process cache, and the acceptance check through the real MCP client over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from evokernel_mcp import subproc
from evokernel_mcp.devices import discovery
from evokernel_mcp.devices.cuda import TORCH_PROBE, parse_torch_probe, run_torch_probe
from evokernel_mcp.devices.models import TorchProbe

FIX = Path(__file__).resolve().parents[1] / "fixtures"
REPLAY_BIN = FIX / "rocm_replay_bin"
DEVICE_ENV = ("ROCMINFO", "NVIDIA_SMI", "AMD_SMI", "ROCMINFO_REPLAY_FILE")


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No ROCm/CUDA install dirs and a PATH that holds only an empty folder."""
    monkeypatch.setattr(subproc, "INSTALL_DIRS", [])
    for var in DEVICE_ENV:
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return monkeypatch


def test_replay_rocminfo_mi300x_inprocess(bare_env):
    bare_env.setenv("PATH", f"{REPLAY_BIN}{os.pathsep}{os.environ['PATH']}")
    r = discovery.query_rocminfo(refresh=True)
    assert r.backend == "rocm" and len(r.devices) == 4 and not r.cached
    assert {(d.arch, d.compute_units, d.lds_bytes_per_workgroup) for d in r.devices} == {("gfx942", 304, 65536)}
    assert r.tools[0].name == "rocminfo" and r.tools[0].path == str(REPLAY_BIN / "rocminfo")
    again = discovery.query_rocminfo()
    assert again.cached and again.devices == r.devices


def test_replay_rocminfo_mi250x_via_env_var(bare_env):
    bare_env.setenv("ROCMINFO", str(REPLAY_BIN / "rocminfo"))
    bare_env.setenv("ROCMINFO_REPLAY_FILE", "mi250x_gfx90a_rocm6.2.1.txt")
    r = discovery.query_rocminfo(refresh=True)
    assert r.backend == "rocm" and [(d.arch, d.compute_units) for d in r.devices] == [("gfx90a", 110)]


def test_replay_nvidia_smi_h200_with_recorded_torch_props(bare_env):
    """nvidia-smi replays the H200 recording; the torch subprocess is replaced by its H200 recording."""
    bare_env.setenv("NVIDIA_SMI", str(REPLAY_BIN / "nvidia-smi"))
    recorded = parse_torch_probe((FIX / "cuda" / "torch_props_h200.json").read_text())
    bare_env.setattr(discovery, "run_torch_probe", lambda timeout_s: recorded)
    r = discovery.query_rocminfo(refresh=True)
    assert r.backend == "cuda" and len(r.devices) == 1
    d = r.devices[0]
    assert d.name == "NVIDIA H200" and d.arch == "sm_90" and d.max_clock_mhz == 1980
    assert d.compute_units == 132 and d.l2_bytes == 60 * 1024**2 and d.memory_bytes == 150109880320
    src = {p.field: p.source for p in r.provenance}
    assert src["devices[0].compute_units"] == "torch" and src["devices[0].max_clock_mhz"] == "nvidia-smi"
    assert [t.name for t in r.tools] == ["nvidia-smi", "torch"]
    assert r.tools[0].version == "driver 580.159.04, CUDA 13.0"


def test_replay_nvidia_smi_when_torch_has_no_cuda(bare_env):
    bare_env.setenv("NVIDIA_SMI", str(REPLAY_BIN / "nvidia-smi"))
    bare_env.setattr(discovery, "run_torch_probe",
                     lambda timeout_s: TorchProbe(torch_version="2.13.0+cpu", error="torch.cuda.is_available() is False"))
    r = discovery.query_rocminfo(refresh=True)
    assert r.backend == "cuda" and r.devices[0].memory_bytes == 143771 * 1024**2  # nvidia-smi's value
    assert any("is_available() is False" in n for n in r.notes)


def test_torch_probe_script_with_a_stub_torch(tmp_path):
    """The probe script's own logic (attribute harvesting, JSON shape), with a stub `torch` package."""
    stub = tmp_path / "torch"
    stub.mkdir()
    (stub / "__init__.py").write_text(
        "__version__ = '0.0-stub'\n"
        "class version:\n    cuda = '13.0'\n    hip = None\n"
        "class _P:\n    name = 'Stub GPU'; major = 9; minor = 0; multi_processor_count = 132\n"
        "    L2_cache_size = 1024; warp_size = 32; uuid = object()\n"
        "class cuda:\n    is_available = staticmethod(lambda: True)\n"
        "    device_count = staticmethod(lambda: 2)\n    get_device_properties = staticmethod(lambda i: _P())\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    res = subproc.run_sync([sys.executable, str(TORCH_PROBE)], timeout_s=60, env=env)
    probe = parse_torch_probe(res.stdout)
    assert probe.torch_version == "0.0-stub" and probe.cuda_version == "13.0" and probe.error is None
    assert [d.index for d in probe.devices] == [0, 1]
    d = probe.devices[1]
    assert (d.name, d.major, d.multi_processor_count, d.l2_cache_size, d.warp_size) == ("Stub GPU", 9, 132, 1024, 32)
    assert d.total_memory is None and isinstance(d.uuid, str)


@pytest.mark.gpu
@pytest.mark.cuda
def test_torch_probe_on_a_cuda_gpu():
    probe = run_torch_probe(120)
    assert probe.error is None and probe.devices and probe.devices[0].multi_processor_count


def test_none_backend_without_any_gpu_tool(bare_env):
    r = discovery.query_rocminfo(refresh=True)
    assert r.backend == "none" and r.devices == []
    assert [t.target for t in r.offline_targets] == ["gfx90a", "gfx942", "gfx950", "sm_90", "sm_80"]
    assert any("rocminfo not found" in n for n in r.notes) and any("nvidia-smi not found" in n for n in r.notes)
    assert any("No GPU found" in n for n in r.notes)


def test_failing_rocminfo_becomes_a_note(bare_env, tmp_path):
    fake = tmp_path / "rocminfo"
    fake.write_text("#!/bin/sh\necho 'ROCk module is NOT loaded, possibly no GPU devices' >&2\nexit 1\n")
    fake.chmod(0o755)
    bare_env.setenv("ROCMINFO", str(fake))
    r = discovery.query_rocminfo(refresh=True)
    assert r.backend == "none" and any("exited with 1" in n and "NOT loaded" in n for n in r.notes)


def _server_env(path: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    env.update(PATH=path, EVOKERNEL_HOME=str(home), ROCM_PATH=str(home / "no-rocm"), CUDA_HOME=str(home / "no-cuda"))
    return env


async def _call_stdio(env: dict[str, str], args: dict) -> tuple[dict, list]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=env)
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("query_rocminfo", args)
    assert not result.is_error, result.content
    return result.structured_content, tools


def _provenance_by_field(prov: list[dict]) -> dict[str, str]:
    """field -> source, expanding the MCP surface's merged entries ('a, b', 'devices[0-3].x')."""
    import re

    out = {}
    for p in prov:
        for f in p["field"].split(", "):
            m = re.match(r"^([^\[]*)\[([\d,-]+)\](.*)$", f)
            if not m:
                out[f] = p["source"]
                continue
            for run in m.group(2).split(","):
                lo, _, hi = run.partition("-")
                for i in range(int(lo), int(hi or lo) + 1):
                    out[f"{m.group(1)}[{i}]{m.group(3)}"] = p["source"]
    return out


def test_replay_query_rocminfo_through_mcp_stdio(tmp_path):
    env = _server_env(f"{REPLAY_BIN}{os.pathsep}{os.environ.get('PATH', '')}", tmp_path)
    out, tools = anyio.run(_call_stdio, env, {"refresh": True})
    tool = next(t for t in tools if t.name == "query_rocminfo")
    assert tool.output_schema and "refresh" in tool.input_schema["properties"]
    assert out["backend"] == "rocm" and len(out["devices"]) == 4
    for i, d in enumerate(out["devices"]):
        assert d["arch"] == "gfx942" and d["compute_units"] == 304 and d["lds_bytes_per_workgroup"] == 65536
        src = _provenance_by_field(out["provenance"])
        assert src[f"devices[{i}].compute_units"] == "rocminfo"
        assert src[f"devices[{i}].lds_bytes_per_workgroup"] == "rocminfo"
