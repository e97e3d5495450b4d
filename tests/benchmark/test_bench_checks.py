"""The post-timing output checks as a benchmark result shows them: structured, and one readable sentence."""

from __future__ import annotations

from evokernel_mcp.benchmark.checks import output_checks

BAR = "rms-floored tol=1.0e-04 (fp32) floor=2x torch native error (4.77e-07)"


def test_checks_structured_and_in_one_sentence():
    raw = {"check_timed": {"passed": False, "max_abs_err": 0.03001, "rel_l2_err": 0.007, "mismatches": 985,
                           "nan_count": 0, "note": None, "bar": BAR},
           "check_fresh": {"passed": True, "max_abs_err": 0.0, "rel_l2_err": 0.0, "mismatches": 0, "nan_count": 0,
                           "note": None, "bar": BAR}}
    checks, sentence = output_checks(raw)
    assert checks.timed.passed is False and checks.timed.mismatches == 985 and checks.fresh.passed is True
    assert sentence == ("timed call's output (input storage refilled): did NOT match the reference (985 mismatches, "
                        "max_abs_err 0.03); output on fresh inputs: matched the reference (max_abs_err 0); bar: "
                        + BAR + ".")
    assert "{" not in sentence


def test_no_checks_no_detail():
    assert output_checks({}) == (None, None)
