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
    if reason == "time_below_runner_bound":  # the CPU clocks of its sandbox's process tree say so too
        assert "did work it did not report" in sr.runner_clock, sr.runner_clock


def test_a_forged_timer_is_invalid_with_confirm():
    """confirm=true times the comparison again in fresh processes: a rescaled timer is still invalid, and no
    speedup is reported."""
    sr = _bench("cheat_block_timer_scaled", confirm=True, max_time_s=2.0)
    assert sr.valid is False and sr.speedup is None, (sr.invalid_reason, sr.confirm_speedup)


def test_memo_by_address_and_version_earns_nothing():
    """Every repetition's inputs are refilled (new values, new version counters): a cache keyed by
    (data_ptr, _version) never hits, so the candidate computes each time and reads no faster than it is."""
    sr = _bench("cheat_memo_ptr_version")
    assert sr.valid is False or sr.speedup < 1.3, (sr.speedup, sr.speedup_ci)


def test_modelled_tf32_fails_the_fp32_bar():
    sr = _bench("cheat_tf32_modelled")
    assert sr.valid is False and sr.invalid_reason in ("wrong_output_in_timed_call", "wrong_output_after_timing")


NONNEG_REF = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, a, b):\n"
              "        return torch.matmul(a, b)\n\n\ndef get_inputs():\n    return [torch.rand(256, 256), torch.rand(256, 256)]"
              "\n\n\ndef get_init_inputs():\n    return []\n")


def test_modelled_tf32_on_nonnegative_inputs_fails_as_verify_fails_it():
    """KernelBench's matmul draws torch.rand (all >= 0, no cancellation): TF32's error is within the fp32 bar on
    those inputs and only verify's signed probe case fails it. The benchmark judges the same probe inputs by the
    same bar after timing: valid=false, naming the precision; the honest fp32 matmul stays valid."""
    from evokernel_mcp.verify import verify_vs_pytorch

    tf32 = (HERE / "cheat_tf32_modelled.py").read_text()
    v = anyio.run(lambda: verify_vs_pytorch(tf32, reference=NONNEG_REF, seeds=1, wait_s=300))
    assert v.passed is False and [c.passed for c in v.cases if c.probe] == [False]
    assert all(c.passed for c in v.cases if not c.probe)
    sr = anyio.run(lambda: benchmark(candidate=tf32, reference=NONNEG_REF, **FAST)).results[0]
    assert sr.valid is False and sr.invalid_reason == "below_problem_precision", (sr.invalid_reason,
                                                                                  sr.invalid_detail)
    assert "accuracy below the problem's dtype" in sr.invalid_detail
    assert sr.checks.timed.passed and sr.checks.fresh.passed and sr.checks.probe.passed is False
    honest = anyio.run(lambda: benchmark(candidate=HONEST, reference=NONNEG_REF, **FAST)).results[0]
    assert honest.valid and honest.checks.probe.passed, (honest.invalid_reason, honest.invalid_detail)
