"""bench/ncu_kinds.py, the pure part: ncu --csv -> the main kernel's median, the comparison and its "why", the
table. The ncu input is the recorded H200 output tests/fixtures/cuda/ncu_metrics_axpy_fma_h200.csv (SOURCES.md:
`ncu --csv --metrics ... --cache-control all --clock-control none`, the flags the script uses), parsed by the
live parser (evokernel_mcp.profile.ncu_parsers.parse_ncu_raw_csv); clock lines go through
evokernel_mcp.benchmark.clocks.parse_nvidia_smi_clocks in the format read_clocks asks nvidia-smi for."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evokernel_mcp.benchmark.clocks import parse_nvidia_smi_clocks
from evokernel_mcp.benchmark.models import (
    BenchmarkResult,
    ClockReadings,
    Clocks,
    ShapeResult,
    TimingInfo,
    TimingStats,
)
from evokernel_mcp.models import Provenance
from evokernel_mcp.profile.ncu_parsers import parse_ncu_raw_csv

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "cuda" / "ncu_metrics_axpy_fma_h200.csv"
_spec = importlib.util.spec_from_file_location("ncu_kinds", REPO / "bench" / "ncu_kinds.py")
nk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nk)


def _six_launches() -> str:
    """The fixture's preamble and header, then six gpu__time_duration rows of its axpy_kernel row (IDs and values
    replaced; one slow outlier), as ncu prints ten launches of one kernel after the runner's own stdout line."""
    lines = FIXTURE.read_text().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    row = next(ln for ln in lines if "axpy_kernel" in ln and "gpu__time_duration.sum" in ln)
    assert row.startswith('"0",') and row.endswith('"182,496"')
    body = [f'"{i}"' + row[3:-len('"182,496"')] + f'"{v:,}"'
            for i, v in enumerate([180_000, 181_000, 182_000, 183_000, 184_000, 500_000])]
    return "\n".join(lines[:head] + ['{"ok": true, "iters": 6}', lines[head], *body]) + "\n"


def test_main_kernel_of_the_recorded_fixture():
    ds = parse_ncu_raw_csv(FIXTURE.read_text())
    m = nk.ncu_main_kernel(ds, launches=2)
    assert m["kernel"] == "fma_loop_kernel"  # 547 us beats axpy's 182 us
    assert m["launches"] == 2 and m["median_us"] == pytest.approx(547.04)
    assert m["kernels_per_call"] == 2.0
    assert m["per_call_us"] == pytest.approx((182.496 + 182.112 + 547.072 + 547.008) / 2)
    assert m["kernels"]["axpy_kernel"]["median_us"] == pytest.approx(182.304)
    assert "only 2 launches of fma_loop_kernel" in m["error"]  # fewer than 5: not a comparable median
    assert "error" not in nk.ncu_main_kernel(ds, launches=2, min_launches=2)


def test_six_launches_median_and_preamble_skipped():
    m = nk.ncu_main_kernel(parse_ncu_raw_csv(_six_launches()), launches=6)
    assert m["kernel"] == "axpy_kernel" and m["launches"] == 6 and "error" not in m
    assert m["median_us"] == pytest.approx(182.5)  # the 500 us outlier moves the median by nothing
    assert (m["min_us"], m["max_us"]) == (pytest.approx(180.0), pytest.approx(500.0))
    assert m["kernels_per_call"] == 1.0


def test_compare():
    assert nk.compare(102.9, 100.0) == (pytest.approx(0.029), True)
    assert nk.compare(96.5, 100.0) == (pytest.approx(-0.035), False)
    assert nk.compare(None, 100.0) == (None, None)
    assert nk.compare(100.0, None) == (None, None)


def _ours(median_us: float, reasons_after: list[str] | None = None) -> dict:
    """ours_from_result of a BenchmarkResult built from the real models (field names checked by pydantic)."""
    ms = median_us / 1e3
    stats = TimingStats(median_ms=ms, min_ms=ms * 0.99, mean_ms=ms, p10_ms=ms, p90_ms=ms, std_ms=0.0,
                        ci_median_ms=(ms * 0.998, ms * 1.002), reps=200, rel_ci=0.002)
    res = BenchmarkResult(
        results=[ShapeResult(shape="default", candidate=stats, candidate_timing=TimingInfo(
            timer="activity", kernel_span_median_ms=ms - 0.00096, launch_cost_ms=0.00096))],
        clocks=ClockReadings(before=Clocks(sm_mhz=1980, mem_mhz=3201, throttle_reasons=[]),
                             after=Clocks(sm_mhz=1755, mem_mhz=3201, throttle_reasons=reasons_after or [])),
        timing_method="activity", provenance=[Provenance(field="results[].candidate, results[].baseline",
                                                         source="measured", detail="H200: activity clock")])
    return nk.ours_from_result(res.model_dump(mode="json"), False, None)


def _clocks(*lines: str) -> dict:
    return nk.clocks_summary([parse_nvidia_smi_clocks(ln).model_dump() for ln in lines])


BUSY_CAPPED = _clocks("1980, 3201, 0x0000000000000001, 90.2, 40", "1755, 3201, 0x0000000000000004, 698.5, 62",
                      "1800, 3201, 0x0000000000000004, 690.0, 63")
NCU_COOL = _clocks("1980, 3201, 0x0000000000000001, 85.0, 38", "1980, 3201, 0x0000000000000000, 310.0, 40")


def _ncu(median_us: float, kernels_per_call: float = 1.0, per_call_us: float | None = None) -> dict:
    return {"kernel": "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", "launches": 10, "median_us": median_us,
            "kernels_per_call": kernels_per_call, "per_call_us": per_call_us or median_us * kernels_per_call}


def test_ours_from_result_reads_the_model_fields():
    o = _ours(196.0, ["sw_power_cap"])
    assert o["median_us"] == pytest.approx(196.0) and o["ci_us"] == [pytest.approx(195.608), pytest.approx(196.392)]
    assert (o["timer"], o["reps"], o["valid"], o["error"]) == ("activity", 200, True, None)
    assert o["launch_cost_us"] == pytest.approx(0.96) and o["kernel_span_us"] == pytest.approx(195.04)
    assert o["provenance"] == "H200: activity clock"
    assert o["clocks"]["after"]["sm_mhz"] == 1755 and o["clocks"]["after"]["throttle_reasons"] == ["sw_power_cap"]


def test_clocks_summary():
    assert BUSY_CAPPED["reasons"] == ["sw_power_cap"]  # gpu_idle is not a slow-down
    assert (BUSY_CAPPED["sm_min_mhz"], BUSY_CAPPED["sm_max_mhz"], BUSY_CAPPED["busy_samples"]) == (1755, 1980, 2)
    assert BUSY_CAPPED["sm_busy_median_mhz"] == pytest.approx(1777.5)
    assert BUSY_CAPPED["power_max_w"] == pytest.approx(698.5)
    assert nk.clocks_summary([])["sm_min_mhz"] is None


def test_power_limited_gemm_says_why():
    row = nk.make_row("gemm", {"expect": "one cuBLAS kernel"}, _ours(196.0), _ncu(181.0), BUSY_CAPPED, NCU_COOL)
    assert row["within"] is False and row["diff"] == pytest.approx(196 / 181 - 1)
    assert row["at_least_40us"] is True
    assert row["why"].startswith("power-limited (sw_power_cap): ncu replays one kernel at a time")
    assert "sm clock 1980→1755 MHz" in row["why"] and "up to 698 W" in row["why"]


def test_power_cap_in_the_results_own_clock_reading_counts():
    """No sampled reading caught the cap, but the result's reading after the series did."""
    row = nk.make_row("gemm", {"expect": ""}, _ours(196.0, ["gpu_idle", "sw_power_cap"]), _ncu(181.0), NCU_COOL,
                      NCU_COOL)
    assert row["bench_reasons"] == ["sw_power_cap"] and row["why"].startswith("power-limited (sw_power_cap)")
    cool = nk.make_row("gemm", {"expect": ""}, _ours(196.0), _ncu(181.0), NCU_COOL, NCU_COOL)
    assert cool["why"] == "not explained by the recorded clocks, throttle reasons, kernel count or timer"


def test_within_and_other_reasons():
    ok = nk.make_row("bandwidth", {"expect": ""}, _ours(252.0), _ncu(250.0), NCU_COOL, NCU_COOL)
    assert ok["within"] is True and ok["why"] is None
    multi = nk.make_row("convolution", {"expect": ""}, _ours(150.0), _ncu(120.0, 3, 148.0), NCU_COOL, NCU_COOL)
    assert multi["within"] is False and "one call launches 3 kernels" in multi["why"]
    assert "all: 148.0 us per call" in multi["why"] and "power" not in multi["why"]
    short = nk.make_row("reduction", {"expect": ""}, _ours(30.5), _ncu(30.0), NCU_COOL, NCU_COOL)
    assert short["within"] is True and short["at_least_40us"] is False
    few = nk.make_row("gemm", {"expect": ""}, _ours(181.0), {**_ncu(181.0), "error": "only 3 launches"}, NCU_COOL,
                      NCU_COOL)
    assert few["within"] is None and few["why"] == "no ncu median: only 3 launches"
    none = nk.make_row("gemm", {"expect": ""}, {"median_us": None, "error": "compile_error: boom"}, _ncu(181.0),
                       NCU_COOL, NCU_COOL)
    assert none["diff"] is None and none["why"] == "no benchmark median: compile_error: boom"


def test_markdown_table_and_file_stem():
    rows = [nk.make_row("bandwidth", {"expect": ""}, _ours(252.0), _ncu(250.0), NCU_COOL, NCU_COOL),
            nk.make_row("gemm", {"expect": ""}, _ours(196.0), _ncu(181.0), BUSY_CAPPED, NCU_COOL)]
    meta = {"device": "H200", "date": "2026-11-22", "max_time_s": 1.5, "wall_s": 200.0,
            "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0",
                         "driver": "580.159.04", "ncu": "Version 2025.3.1.0"}}
    md = nk.to_markdown(meta, rows)
    assert md.startswith("# Single-kernel times vs ncu, four kinds: H200, 2026-11-22\n")
    assert "driver 580.159.04, ncu Version 2025.3.1.0" in md
    gemm = next(ln for ln in md.splitlines() if ln.startswith("| gemm |"))
    cells = [c.strip() for c in gemm.strip("|").split(" | ")]
    assert cells[1] == "`nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT`"
    assert cells[3:8] == ["196.0 [195.6, 196.4]", "181.0 (10)", "+8.29%", "no", "yes"]
    assert cells[8] == "sm 1980→1755 (min 1755) MHz, mem 3201 MHz, max 698 W"
    assert cells[10] == "sw_power_cap / none" and cells[11].startswith("power-limited")
    assert "| bandwidth |" in md and "+0.80% | yes | yes |" in md
    assert md.rstrip().endswith("Within 3 % of ncu at >= 40 us: 1 of 2 kinds (bandwidth).")
    assert nk.stem_for("H200", "2026-11-22", "t1") == "ncu_kinds_H200_2026-11-22_t1"
    assert nk.stem_for("H200", "2026-11-22") == "ncu_kinds_H200_2026-11-22"


def test_workloads_are_kernelbench_form():
    from evokernel_mcp.kb_candidates import same_code
    from evokernel_mcp.tasks import check_candidate_source, check_reference_source

    wls = nk.workloads()
    assert tuple(wls)[:4] == nk.KINDS == ("bandwidth", "reduction", "gemm", "convolution")
    for wl in wls.values():
        check_reference_source(wl["source"])
        check_candidate_source(same_code(wl["source"]))
    assert "torch.randn(134217728)" in wls["bandwidth"]["source"]
    assert "torch.randn(4096, 4096, dtype=torch.bfloat16)" in wls["gemm"]["source"]
