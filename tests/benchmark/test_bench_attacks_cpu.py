"""Candidates that try to forge a benchmark win on the CPU path, through the tool at default settings (short
budget): each must come back valid=false with its reason, or with its true speedup. The candidates are in
tests/benchmark/candidates/cheat_*.py, against an fp32 matmul reference (matmul_ref.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from evokernel_mcp.benchmark.api import benchmark

HERE = Path(__file__).resolve().parent / "candidates"
REF = (HERE / "matmul_ref.py").read_text()
HONEST = "import torch\n\n\ndef run(x, y):\n    return torch.matmul(x, y)\n"
FAST = {"max_time_s": 0.25, "min_reps": 10, "wait_s": 300, "timeout_s": 300}


def _bench(name: str, **kw):
    src = HONEST if name == "honest" else (HERE / f"{name}.py").read_text()
    res = anyio.run(lambda: benchmark(candidate=src, reference=REF, **{**FAST, **kw}))
    assert res.error is None, res.error
    return res.results[0]


def test_honest_candidate_is_valid_with_every_repetition_probed():
    sr = _bench("honest")
    assert sr.valid, (sr.invalid_reason, sr.invalid_detail)
    assert sr.probes_checked and sr.probes_checked >= sr.candidate.reps  # warm-up blocks are probed too
    assert sr.noise_floor is not None and "control arm" in sr.noise_floor.source  # the control arm is a default
    assert sr.runner_clock and "runner's clock" in sr.runner_clock


@pytest.mark.parametrize("name,reason", [
    ("cheat_block_timer_scaled", "time_below_runner_bound"),
    ("cheat_perf_counter_scaled", "time_below_runner_bound"),
    ("cheat_skip_alternate_reps", "wrong_output_in_timed_call"),
    ("cheat_probe_positions", "wrong_output_in_timed_call"),
    ("cheat_memo_ptr", "wrong_output_in_timed_call"),
    ("cheat_bf16_rounded", "wrong_output_in_timed_call"),
])
def test_forged_wins_are_invalid(name, reason):
    # a rescaled timer is seen against the runner's clock: blocks of several repetitions (the default budget)
    sr = _bench(name, **({"max_time_s": 2.0} if reason == "time_below_runner_bound" else {}))
    assert sr.valid is False and sr.invalid_reason == reason, (sr.invalid_reason, sr.invalid_detail, sr.speedup,
                                                               sr.runner_clock)
    assert sr.speedup is None


@pytest.mark.parametrize("name", ["cheat_block_timer_scaled", "cheat_skip_alternate_reps"])
def test_forged_wins_are_invalid_with_confirm(name):
    sr = _bench(name, confirm=True, **({"max_time_s": 2.0} if "timer" in name else {}))
    assert sr.valid is False and sr.speedup is None, (sr.invalid_reason, sr.confirm_speedup)


def test_memo_by_address_and_version_earns_nothing():
    """Every repetition's inputs are refilled (new values, new version counters): a cache keyed by
    (data_ptr, _version) never hits, so the candidate computes each time and reads no faster than it is."""
    sr = _bench("cheat_memo_ptr_version")
    assert sr.valid is False or sr.speedup < 1.3, (sr.speedup, sr.speedup_ci)


def test_modelled_tf32_fails_the_fp32_bar():
    sr = _bench("cheat_tf32_modelled")
    assert sr.valid is False and sr.invalid_reason in ("wrong_output_in_timed_call", "wrong_output_after_timing")
