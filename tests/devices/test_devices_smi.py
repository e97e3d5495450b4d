"""amd-smi / rocm-smi / nvidia-smi parsers on the recordings we have, and on malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evokernel_mcp.devices.amdsmi import parse_amdsmi_json, parse_amdsmi_text, parse_rocmsmi_json, quantity
from evokernel_mcp.devices.cuda import parse_nvidia_smi_xml, parse_torch_probe
from evokernel_mcp.errors import ParseError

FIX = Path(__file__).resolve().parents[1] / "fixtures"
AMDSMI = FIX / "rocm" / "amd-smi"
CUDA = FIX / "cuda"


def test_amdsmi_static_text_mi300a():
    gpus = parse_amdsmi_text((AMDSMI / "static_text_mi300a_x4_amdsmi-readme.txt").read_text())
    assert [g.gpu for g in gpus] == [0, 1, 2, 3]  # the 4 CPU blocks are skipped
    assert all(g.market_name == "MI300A" and g.vram_type == "HBM" for g in gpus)
    assert gpus[0].vram_bytes == 64289 * 1024**2 and gpus[0].bdf == "0000:01:00.0"


def test_amdsmi_static_text_mi350x_excerpt():
    (g,) = parse_amdsmi_text((AMDSMI / "static_text_mi350x_excerpt_rocm-systems-pr2987.txt").read_text())
    assert g.market_name == "AMD Instinct MI350X" and g.target_graphics_version == "gfx950"
    assert g.num_compute_units == 128 and g.bdf == "0000:05:00.0" and g.vram_bytes is None


def test_amdsmi_metric_clock_text():
    (g,) = parse_amdsmi_text((AMDSMI / "metric_clock_text_changelog_rocm6.1.1.txt").read_text())
    assert g.max_gfx_clock_mhz == 1800 and g.max_mem_clock_mhz == 1200


@pytest.mark.parametrize("name, n", [("process_json_changelog_rocm6.2.0.json", 1),
                                     ("topology_a_t_json_changelog_rocm6.1.1.json", 2)])
def test_amdsmi_json_list_and_gpu_data_shapes(name, n):
    text = (AMDSMI / name).read_text()
    listed = parse_amdsmi_json(text)
    assert [g.gpu for g in listed] == list(range(n))
    wrapped = parse_amdsmi_json(json.dumps({"gpu_data": json.loads(text)}))  # ROCm 7.x wrapper
    assert wrapped == listed


def test_amdsmi_quantities():
    assert quantity({"value": 64289, "unit": "MB"}) == (64289.0, "MB")
    assert quantity("2100 MHz") == (2100.0, "MHz")
    assert quantity("N/A") is None and quantity(None) is None


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", '"x"'])
def test_amdsmi_json_malformed(text):
    with pytest.raises(ParseError):
        parse_amdsmi_json(text)


def test_amdsmi_text_without_gpu_block():
    with pytest.raises(ParseError):
        parse_amdsmi_text("CPU: 0\n    SMU:\n        FW_VERSION: 85.90.0\n")


def test_rocmsmi_json_malformed():
    with pytest.raises(ParseError):
        parse_rocmsmi_json("<html>")


@pytest.mark.parametrize("text, where", [("", "line 1"), ("<nvidia_smi_log><gpu>", "line 1"),
                                         ("<other/>", "root element")])
def test_nvidia_smi_malformed(text, where):
    with pytest.raises(ParseError) as e:
        parse_nvidia_smi_xml(text)
    assert where in str(e.value)


def test_torch_probe_output_malformed():
    with pytest.raises(ParseError):
        parse_torch_probe("Traceback (most recent call last):\n")


NVSMI_RECORDINGS = sorted(CUDA.glob("nvidia-smi-q-x_*.xml"))


@pytest.mark.parametrize("path", NVSMI_RECORDINGS or [pytest.param(None, marks=pytest.mark.skip(
    reason="no recorded nvidia-smi -q -x in tests/fixtures/cuda yet"))])
def test_nvidia_smi_recording(path):
    r = parse_nvidia_smi_xml(path.read_text())
    assert r.driver_version and r.cuda_version and r.gpus
    for g in r.gpus:
        assert g.product_name and ("H100" in g.product_name or "H200" in g.product_name)
        assert g.memory_total_bytes and g.memory_total_bytes > 70 * 1024**3
        assert g.max_sm_clock_mhz and 1000 < g.max_sm_clock_mhz < 3000
        assert g.uuid and g.uuid.startswith("GPU-") and g.pci_bus_id


TORCH_RECORDINGS = sorted(CUDA.glob("torch_props_*.json"))


@pytest.mark.parametrize("path", TORCH_RECORDINGS or [pytest.param(None, marks=pytest.mark.skip(
    reason="no recorded torch props in tests/fixtures/cuda yet"))])
def test_torch_props_recording(path):
    probe = parse_torch_probe(path.read_text())
    assert probe.devices
    for d in probe.devices:
        assert d.major == 9 and d.multi_processor_count == 132 and d.total_memory > 70 * 1024**3
