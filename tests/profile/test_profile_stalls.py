"""The `stalls` preset: where the warps wait, as derived values with formulas and one finding naming the top
reasons. AMD figures come from a genuine rocprof-compute recording (MI300X, gfx942, vecCopy)."""

from __future__ import annotations

import csv
from pathlib import Path

from evokernel_mcp.profile import presets, stalls
from evokernel_mcp.profile.derived import DeviceSpec, derive
from evokernel_mcp.profile.findings import findings_for
from evokernel_mcp.profile.models import PmcDispatch

VCOPY = (Path(__file__).resolve().parents[1] / "fixtures" / "rocm" / "rocprof-compute"
         / "workload_vcopy_mi300x_gfx942_rocm7.0.0_rocpd" / "pmc_perf.csv")
MI300X = DeviceSpec(arch="gfx942", vendor="amd", compute_units=304, num_xcc=8, max_waves_per_cu=32,
                    peak_gbs=5300.0, source="test")
H100 = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=3352.0, source="test")


def _nv(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


def test_the_ncu_preset_asks_for_every_reason_and_the_total():
    names = presets.ncu_metrics("stalls", None)
    assert {_nv(r) for r in stalls.NV_REASONS} <= set(names)
    assert stalls.NV_ISSUE in names and "gpu__time_duration.sum" in names


def test_top_reasons_are_named_with_their_share_and_what_moves_them():
    c = {stalls.NV_ISSUE: 0.3, _nv("long_scoreboard"): 4.0, _nv("barrier"): 2.5, _nv("short_scoreboard"): 1.5,
         _nv("selected"): 1.0, _nv("wait"): 0.4, _nv("not_selected"): 0.6}
    d = derive(c, 200_000.0, H100)
    assert d["stall_long_scoreboard"].value == 4.0 and d["stall_long_scoreboard"].formula == _nv("long_scoreboard")
    assert d["cycles_per_issue"].value == 10.0 and d["issue_active"].value == 30.0
    (f,) = [x for x in findings_for([PmcDispatch(kernel="k", duration_ns=200_000.0, counters=c, derived=d)])[1]
            if x.kind == "stall"]
    # the three largest reasons other than issuing, in order, each with its share of the 10 cycles
    assert f.text.index("long_scoreboard 40%") < f.text.index("barrier 25%") < f.text.index("short_scoreboard 15%")
    assert "selected" not in f.text.replace("not_selected", "") and " wait " not in f.text
    assert "more independent loads in flight" in f.text and "every 10.0 cycles" in f.text
    assert f.evidence["stall_barrier"] == 2.5 and f.evidence["issue_active"] == 30.0


def test_no_stall_counters_no_stall_finding():
    d = derive({"dram__throughput.avg.pct_of_peak_sustained_elapsed": 80.0}, 1e6, H100)
    assert not [k for k in d if k.startswith("stall_")] and "cycles_per_issue" not in d
    assert stalls.finding(d) is None


def _vcopy_dispatch_1() -> dict[str, float]:
    with VCOPY.open(newline="") as f:
        return {r["Counter_Name"]: float(r["Counter_Value"]) for r in csv.DictReader(f)
                if r["Dispatch_ID"] == "1" and r["Counter_Name"] in stalls.AMD_COUNTERS}


def test_amd_wave_shares_from_a_recorded_copy_kernel_say_it_waits_on_memory():
    c = _vcopy_dispatch_1()
    assert {"SQ_WAVE_CYCLES", "SQ_WAIT_ANY", "SQ_WAIT_INST_ANY", "SQ_ACTIVE_INST_ANY"} <= set(c)
    d = derive(c, None, MI300X)
    dep = d["wave_dependency_wait_pct"]
    assert dep.formula == "100 * SQ_WAIT_ANY / SQ_WAVE_CYCLES"
    assert abs(dep.value - 100 * c["SQ_WAIT_ANY"] / c["SQ_WAVE_CYCLES"]) < 1e-3 and 50 < dep.value < 90
    assert d["wave_issuing_pct"].value < 5  # a copy kernel issues little and waits long
    f = stalls.finding(d)
    assert f is not None and f.kind == "stall" and "mostly wave dependency wait" in f.text


def test_the_amd_preset_fits_every_arch_offline():
    for arch in presets.AMD_ARCHES:
        names = presets.validate_counters(presets.preset_counters("stalls", arch), arch)
        assert set(names) == set(stalls.AMD_COUNTERS)


def test_every_ncu_name_of_the_preset_is_in_a_recorded_h200_capture_and_an_axpy_waits_on_memory():
    from evokernel_mcp.profile.ncu_parsers import parse_ncu_raw_csv

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "ncu_raw_axpy_full_h200.csv").read_text()
    header = set(next(csv.reader([text.splitlines()[0]])))
    assert set(stalls.NV_METRICS) <= header  # no invented metric name
    (raw,) = parse_ncu_raw_csv(text, "raw.csv")
    d = derive(raw.counters, raw.duration_ns, H100)
    f = stalls.finding(d)
    assert f is not None and "stalled mostly on long_scoreboard" in f.text
    assert d["cycles_per_issue"].value > d["stall_long_scoreboard"].value > 0.5 * d["cycles_per_issue"].value
