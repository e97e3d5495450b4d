"""rocminfo parser on every genuine recording in tests/fixtures/rocm/rocminfo/, plus malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evokernel_mcp.devices.models import RocminfoReport
from evokernel_mcp.devices.rocm import parse_rocminfo
from evokernel_mcp.errors import ParseError

ROCMINFO = Path(__file__).resolve().parents[1] / "fixtures" / "rocm" / "rocminfo"
MI300X = ROCMINFO / "mi300x_vf_gfx942_rocm6.2.2.txt"
MI250X = ROCMINFO / "mi250x_gfx90a_rocm6.2.1.txt"
GFX950_POOL = ROCMINFO / "gfx950_pool_isa_excerpt_aiter-4457.txt"
MI355X = ROCMINFO / "mi355x_gfx950_agent_excerpt_rocm-libraries-9055.txt"
MI325X = ROCMINFO / "mi325x_gfx942_agent_excerpt_rocm-systems-8263.txt"
ALL = sorted(ROCMINFO.glob("*.txt"))


def parse(path: Path) -> RocminfoReport:
    return parse_rocminfo(path.read_text(encoding="utf-8"))


def test_every_rocminfo_fixture_is_covered_below():
    assert {p.name for p in ALL} == {p.name for p in (MI300X, MI250X, GFX950_POOL, MI355X, MI325X)}


def test_mi300x_vf_four_gfx942_agents():
    r = parse(MI300X)
    assert r.rock_version == "6.8.5" and r.runtime_version == "1.14"
    assert len(r.agents) == 6 and [a.device_type for a in r.agents[:2]] == ["CPU", "CPU"]
    gpus = r.gpus
    assert [g.agent_number for g in gpus] == [3, 4, 5, 6]
    assert [g.uuid for g in gpus] == ["GPU-573a05b34a58c14a", "GPU-7c53f16b3a3d021d", "GPU-ca9461ec5e624f18",
                                      "GPU-94351c0381afd30b"]
    for g in gpus:
        assert g.arch == "gfx942" and g.name == "gfx942" and g.marketing_name == "AMD Instinct MI300X VF"
        assert g.compute_units == 304 and g.simds_per_cu == 4 and g.shader_engines == 32
        assert g.wavefront_size == 64 and g.workgroup_max_size == 1024
        assert g.max_waves_per_cu == 32 and g.max_workitems_per_cu == 2048
        assert g.max_clock_mhz == 2100 and g.cacheline_bytes == 64 and g.chip_id == 29877
        assert (g.l1_bytes, g.l2_bytes, g.l3_bytes) == (32 * 1024, 4096 * 1024, 262144 * 1024)
        assert g.lds_bytes_per_workgroup == 65536
        assert g.global_memory_bytes == 200753152 * 1024
        assert g.isa_names == ["amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"]


def test_mi250x_gfx90a_with_literal_colour_codes():
    r = parse(MI250X)
    assert r.rock_version == "6.3.6"  # first line carries literal '^[[37m' ... '^[[0m'
    (g,) = r.gpus
    assert g.arch == "gfx90a" and g.marketing_name == "AMD Instinct MI250X"
    assert g.compute_units == 110 and g.wavefront_size == 64 and g.max_clock_mhz == 1700
    assert (g.l1_bytes, g.l2_bytes, g.l3_bytes) == (16 * 1024, 8192 * 1024, None)
    assert g.lds_bytes_per_workgroup == 65536 and g.chip_id == 29704
    assert g.isa_names == ["amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"]


def test_gfx950_pool_excerpt_gives_160kb_lds():
    (g,) = parse(GFX950_POOL).gpus
    assert g.lds_bytes_per_workgroup == 163840
    assert g.arch == "gfx950" and g.name is None and g.compute_units is None
    assert g.isa_names == ["amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-",
                           "amdgcn-amd-amdhsa--gfx9-4-generic:sramecc+:xnack-"]


def test_mi355x_excerpt_gives_256_cus():
    (g,) = parse(MI355X).gpus
    assert g.arch == "gfx950" and g.marketing_name == "AMD Instinct MI355X" and g.chip_id == 30115
    assert g.compute_units == 256 and g.max_clock_mhz == 2400 and g.cacheline_bytes == 128
    assert g.wavefront_size == 64 and g.lds_bytes_per_workgroup is None


def test_mi325x_agent_excerpt():
    (g,) = parse(MI325X).gpus
    assert g.agent_number == 10 and g.arch == "gfx942" and g.marketing_name == "AMD Instinct MI325X"
    assert g.compute_units == 304 and g.max_clock_mhz == 2100 and g.cacheline_bytes == 128
    assert g.chip_id == 29861 and g.wavefront_size is None


def test_real_ansi_codes_and_right_padding_are_ignored():
    text = MI300X.read_text()
    padded = "\n".join(f"\x1b[32m{line}\x1b[0m".ljust(60) if i % 3 == 0 else line.ljust(60)
                       for i, line in enumerate(text.splitlines()))
    assert parse_rocminfo(padded) == parse_rocminfo(text)


@pytest.mark.parametrize("text, where", [
    ("", "line 1"),
    ("hello world\n", "line 1"),
    ("ROCk module version 6.8.5 is loaded\n=====\nHSA System Attributes\n=====\n", "line 4"),
])
def test_garbage_is_a_parse_error_naming_the_line(text, where):
    with pytest.raises(ParseError) as e:
        parse_rocminfo(text)
    assert where in str(e.value)


def test_truncated_number_names_its_line():
    lines = MI300X.read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if line.strip().startswith("Size:") and "64(0x40) KB" in line)
    broken = "\n".join(lines[:n] + [lines[n].replace("64(0x40) KB", "64(0x4")] + lines[n + 1:])
    with pytest.raises(ParseError) as e:
        parse_rocminfo(broken)
    assert f"line {n + 1}" in str(e.value) and "Size" in str(e.value)


def _parses_or_parse_error(text: str) -> None:
    try:
        report = parse_rocminfo(text)
    except ParseError as e:
        assert "line" in str(e) or "rocminfo" in str(e)
        return
    assert isinstance(report, RocminfoReport) and report.agents
    for g in report.gpus:
        assert g.arch is None or g.arch.startswith("gfx")


FIXTURE_TEXTS = [p.read_text() for p in ALL]
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_hypothesis_random_text(text):
    _parses_or_parse_error(text)


@FAST
@given(st.sampled_from(FIXTURE_TEXTS), st.floats(0, 1))
def test_hypothesis_random_truncation(text, frac):
    _parses_or_parse_error(text[: int(len(text) * frac)])


@FAST
@given(st.sampled_from(FIXTURE_TEXTS), st.lists(st.integers(0, 600), max_size=40))
def test_hypothesis_random_line_deletion(text, drop):
    lines = text.splitlines()
    _parses_or_parse_error("\n".join(line for i, line in enumerate(lines) if i not in set(drop)))


@FAST
@given(st.sampled_from(FIXTURE_TEXTS), st.integers(0, 600), st.text(max_size=40))
def test_hypothesis_random_line_replaced(text, where, junk):
    lines = text.splitlines()
    lines[where % len(lines)] = junk
    _parses_or_parse_error("\n".join(lines))
