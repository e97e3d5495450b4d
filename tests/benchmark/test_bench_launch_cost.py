"""The launch cost added to activity-clock times: parsed from genuine ncu output, measured through a replay
ncu (a fake executable that prints a recorded ncu CSV: tests how we call ncu, not ncu), added in the server
to both series, and reported with the bare span."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from evokernel_mcp.benchmark import launch_cost, results
from evokernel_mcp.benchmark.models import Ceilings
from evokernel_mcp.tasks import load_task

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "torch": "2.11.0"}


def test_ncu_durations_from_recorded_raw_page():
    text = (FIX / "ncu_raw_axpy_full_h200.csv").read_text()
    assert launch_cost.ncu_durations_us(text) == pytest.approx([44.704])  # the 'us' unit row is honoured
    assert launch_cost.ncu_durations_us("==PROF== Connected to process 1\n" + text) == pytest.approx([44.704])


def test_ncu_argv_profiles_the_child_cold_with_real_clocks():
    argv = launch_cost.ncu_argv("/x/ncu")
    for a, b in (("--cache-control", "all"), ("--clock-control", "none"), ("--page", "raw"),
                 ("--metrics", "gpu__time_duration.sum")):
        assert argv[argv.index(a) + 1] == b
    assert argv[-3:] == ["-m", "evokernel_mcp.benchmark.launch_cost", "--child"]


def _replay_ncu(tmp_path: Path, csv_text: str) -> Path:
    exe = tmp_path / "ncu"
    (tmp_path / "out.csv").write_text(csv_text)
    exe.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Version 2025.3.1.0 (replay)'; exit 0; fi\n"
                   f"cat '{tmp_path / 'out.csv'}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_replay_ncu_launch_cost_is_ncu_minus_activity_span(tmp_path, monkeypatch):
    text = (FIX / "ncu_raw_axpy_full_h200.csv").read_text()
    head, units, row = text.splitlines()[:3]
    rows = [row.replace('"44.704000"', f'"{v:.6f}"') for v in (1.536, 1.504, 1.568)]
    monkeypatch.setenv("NCU", str(_replay_ncu(tmp_path, "\n".join([head, units, *rows]) + "\n")))
    monkeypatch.setattr(launch_cost, "activity_span_us", lambda: (0.608, "ok"))
    lc = launch_cost.measure("cuda")
    assert lc.us == pytest.approx(1.536 - 0.608)
    assert "median of 3 launches" in lc.detail and "1-element fill" in lc.detail


def test_replay_ncu_with_no_rows_adds_nothing_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("NCU", str(_replay_ncu(tmp_path, "==PROF== No kernels were profiled.\n")))
    monkeypatch.setattr(launch_cost, "activity_span_us", lambda: (0.6, "ok"))
    lc = launch_cost.measure("cuda")
    assert lc.us is None and "nothing added" in lc.detail


def test_no_ncu_and_rocm_add_nothing(monkeypatch):
    monkeypatch.setenv("NCU", "/nonexistent/ncu")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert launch_cost.measure("cuda").us is None
    rocm = launch_cost.measure("rocm")
    assert rocm.us is None and "ROCm" in rocm.detail


def _activity_run(ms: float) -> dict:
    return {"times_ms": [ms] * 50, "method": "device activity timestamps", "host_timing": False, "timer": "activity",
            "extra": {"event_median_ms": ms + 0.003}}


def test_server_adds_launch_cost_to_both_activity_series_and_keeps_the_span():
    task = load_task("vector_add")
    ceil = Ceilings(device="NVIDIA H200", copy_gbs=4300.0, launch_cost_us=0.9)
    raw = {"shape": "medium", "candidate": _activity_run(0.0100), "baseline": _activity_run(0.0200),
           "check_timed": {"passed": True}, "check_fresh": {"passed": True}, "output_dtype": "float32"}
    sr = results.shape_result(raw, task, H200, ceil, "vector", 0.95)
    assert sr.candidate.median_ms == pytest.approx(0.0109) and sr.baseline.median_ms == pytest.approx(0.0209)
    assert sr.speedup == pytest.approx(0.0209 / 0.0109)
    assert sr.candidate_timing.kernel_span_median_ms == pytest.approx(0.0100)
    assert sr.candidate_timing.launch_cost_ms == pytest.approx(0.0009)
    off = results.shape_result(raw, task, H200, ceil, "vector", 0.95, launch_cost=False)
    assert off.candidate.median_ms == pytest.approx(0.0100) and off.candidate_timing.launch_cost_ms is None
    events = {**raw, "candidate": {**_activity_run(0.01), "timer": "events"}}
    assert results.shape_result(events, task, H200, ceil, "vector", 0.95).candidate.median_ms == pytest.approx(0.01)
    assert raw["candidate"]["times_ms"][0] == 0.0100  # the runner's raw times are not modified in place
