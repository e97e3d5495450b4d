"""One bar for every output the benchmark judges: the runner's post-timing checks and the per-repetition probes
use verify's judge and verify's bar function (verify/bar.leaf_bar) with the same reference outputs (float64, the
native run-to-run spread, PyTorch's sampled error), and the check on verify's signed probe inputs decides the
verdict as verify's probe case does."""

from __future__ import annotations

import torch

from evokernel_mcp.benchmark import probes, verdict
from evokernel_mcp.benchmark.checks import output_checks
from evokernel_mcp.benchmark.runner_side import _check
from evokernel_mcp.tasks import load_task
from evokernel_mcp.verify.case import judge_outputs

TASK = load_task("vector_add")


def _native_only(n: int = 1000):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, generator=g)


def test_without_float64_the_probes_and_the_checks_take_verify_s_sampled_floor():
    """Native reference alone (the float64 copy did not fit): PyTorch's error measured on a float64 sample sets
    verify's floor (3 x sampled). An output off by 0.02 everywhere passes verify with a sampled error of 0.01
    and fails it with none; the runner's check and the probes agree in both cases."""
    nat = _native_only()
    out = nat + 0.02
    table = probes.position_table(2)
    for sampled, want in (({"out": 0.01}, True), ({}, False)):
        exp = {"native": nat, "hi": None, "arg_reductions": {}, "sampled_torch_err": sampled}
        ref = judge_outputs(TASK, nat, None, out, None, sampled_torch_err=sampled)
        assert ref["passed"] is want, ref
        assert _check(TASK, out, exp)["passed"] is want
        bar = probes.ProbeBar(TASK, [exp], table)
        assert bar.check(_probe_rows(out, table, bar.chunks), 0, 1)["passed"] is want


def _probe_rows(out, table, chunks):
    """The rows the arm's Prober reads off `out` for repetitions 0, 1, ... (one per table row, all content 0)."""
    pr = probes.Prober(table, chunks)
    pr.begin()
    for g in range(4):
        pr.take(out, g)
    return pr.end()


def test_ill_conditioned_outputs_are_held_to_the_native_reference_in_the_runner_s_check_too():
    """With the native run-to-run spread of an ill-conditioned output (verify/refout.py), verify also holds the
    candidate to the native reference; the runner's check passes the spread on, so it fails the same output."""
    nat = _native_only()
    hi = nat.double() + 0.5  # PyTorch far from float64: ill-conditioned
    out = hi.float()  # matches float64 exactly, far from native
    exp = {"native": nat, "hi": hi, "arg_reductions": {}, "native_spread": {"out": 0.0}}
    assert judge_outputs(TASK, nat, hi, out, None, native_spread={"out": 0.0})["passed"] is False
    assert _check(TASK, out, exp)["passed"] is False
    assert _check(TASK, out, {**exp, "native_spread": {}})["passed"] is True  # what the check did without it


def test_a_failed_check_names_the_accuracy_against_verify_s_bar():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(128, 256, generator=g) * 4, torch.randn(256, 128, generator=g) * 4
    hi = a.double() @ b.double()
    out = a.bfloat16().float() @ b.bfloat16().float()
    chk = _check(TASK, out, {"native": a @ b, "hi": hi, "arg_reductions": {}})
    assert chk["passed"] is False
    assert "accuracy below the problem's dtype" in chk["note"] and "tol 1.0e-04" in chk["note"], chk


def test_a_failed_signed_probe_check_is_its_own_invalid_reason_after_the_other_output_checks():
    bad = {"passed": False, "mismatches": 9, "max_abs_err": 0.5, "note": "accuracy below the problem's dtype"}
    good = {"passed": True, "mismatches": 0}
    valid, reason, detail = verdict.judge_shape({"check_timed": good, "check_fresh": good, "check_probe": bad}, None)
    assert (valid, reason) == (False, "below_problem_precision") and "check_probe" in detail
    assert "TF32" in verdict.EXPLAIN["below_problem_precision"]
    assert verdict.judge_shape({"check_fresh": {**bad}, "check_probe": bad}, None)[1] == "wrong_output_after_timing"
    unjudged = {"passed": None, "note": "not judged: the reference failed on signed probe inputs"}
    assert verdict.judge_shape({"check_timed": good, "check_fresh": good, "check_probe": unjudged}, None)[0]


def test_the_probe_check_shows_in_the_structured_checks_and_the_sentence():
    bar = "rms-floored tol=1.0e-04 (fp32) floor=2x torch native error (4.77e-07)"
    raw = {"check_timed": {"passed": True, "max_abs_err": 0.0, "bar": bar},
           "check_fresh": {"passed": True, "max_abs_err": 0.0, "bar": bar},
           "check_probe": {"passed": False, "mismatches": 7, "max_abs_err": 0.49, "bar": bar}}
    checks, sentence = output_checks(raw)
    assert checks.probe.passed is False and checks.probe.mismatches == 7
    assert "output on verify's signed probe inputs: did NOT match the reference (7 mismatches" in sentence
