"""The profiler's peaks follow the live device: ncu's device__attribute_display_name (read from a genuine
recorded raw page) and rocprofv3's agent Product_Name pick the arch-table product; the product setting
(EVOKERNEL_PRODUCT) overrides; an unknown name keeps the default. The CUDA path runs through a REPLAY ncu (a fake
executable that writes a report file and prints the recorded raw CSV: it tests how we call ncu, not ncu)."""

from __future__ import annotations

import stat
from pathlib import Path

import anyio
import pytest
from local_session import local_launch

from evokernel_mcp.profile import collect, presets
from evokernel_mcp.profile.ncu_parsers import device_names
from evokernel_mcp.subproc import probe_version

RAW = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "ncu_raw_axpy_full_h200.csv"
REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n" \
      "def get_inputs():\n    return [torch.randn(64)]\ndef get_init_inputs():\n    return []\n"


def test_device_name_from_recorded_ncu_raw_page():
    assert device_names(RAW.read_text()) == ["NVIDIA H200"]
    header_only = RAW.read_text().splitlines()[0].replace("device__attribute_display_name", "x__y") + "\n"
    assert device_names(header_only) == []


def test_table_spec_follows_the_live_name_and_the_override(monkeypatch, use_settings):
    use_settings(product=None)
    h200 = collect.table_spec("sm_90", "nvidia", "NVIDIA H200")
    assert h200.peak_gbs == pytest.approx(4800.0) and "H200" in h200.source and "live device" in h200.source
    default = collect.table_spec("sm_90", "nvidia")
    assert default.peak_gbs != h200.peak_gbs and "arch default" in default.source
    use_settings(product="H100_SXM5")
    forced = collect.table_spec("sm_90", "nvidia", "NVIDIA H200")
    assert forced.peak_gbs == default.peak_gbs and "EVOKERNEL_PRODUCT" in forced.source


def test_ncu_metric_lists_ask_for_the_device_name():
    assert presets.NCU_DEVICE_NAME in presets.ncu_metrics("memory", None)


def _replay_ncu(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(f"""#!/usr/bin/env python3
import sys
a = sys.argv[1:]
if a[:1] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (REPLAY)")
elif "--import" in a:
    sys.stdout.write(open({str(RAW)!r}).read())
else:
    open(a[a.index("--export") + 1], "wb").write(b"replayed report")
    open(a[a.index("--log-file") + 1], "w").write("==PROF== replay\\n")
""")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_replay_ncu_pmc_uses_the_h200_peaks_from_the_recorded_device_name(tmp_path, monkeypatch, use_settings):
    monkeypatch.setenv("NCU", str(_replay_ncu(tmp_path)))
    use_settings(product=None)
    probe_version.cache_clear()
    launch = local_launch(tmp_path / "work", {"reference": REF, "candidate": "def run(x):\n    return x * 2\n",
                                              "warmup": 1, "iters": 1})
    res = anyio.run(collect.pmc_cuda, launch, presets.ncu_metrics("memory", None), None,
                    collect.table_spec("sm_90", "nvidia"), 3, "memory")
    assert res.tool.name == "ncu" and "REPLAY" in (res.tool.version or "")
    assert res.dispatches and res.dispatches[0].duration_ns == 44704
    src = next(p.detail for p in res.provenance if p.field == "dispatches[].derived")
    assert "H200_SXM" in src and "live device 'NVIDIA H200'" in src
