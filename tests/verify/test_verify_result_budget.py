"""A verify result with the usual case count (two shape sets x three seeds + two probes), every case with its
margin, error vs PyTorch, reference precision and bar, fits the default result budget without cutting."""

from __future__ import annotations

import json

from evokernel_mcp.surface import shaping
from evokernel_mcp.surface.server import EvoServer
from evokernel_mcp.verify import VerifyCase, VerifyResult

WHY = ("native (float64 forward failed: RuntimeError: mat1 and mat2 must have the same dtype, but got Float and "
       "Double)")
BAR = ("rms-floored tol=2x1.0e-04 (fp32) vs the native-dtype reference, floor=2x its run-to-run spread (3.05e-05) "
       "(no float64 reference: see reference_precision)")


def _case(shape: str, seed: int, probe: bool) -> VerifyCase:
    return VerifyCase(
        shape=shape, seed=seed, probe=probe, passed=False, max_abs_err=0.01234567, max_rel_err=0.0123456,
        rel_l2_err=0.0101234, calc_diff=1.234567e-05, mismatches=4096, first_mismatch_index=[0, 17],
        mismatch_indices=[[0, i] for i in range(10)],
        mismatch_examples=[{"index": [0, i], "got": 1.0123456, "expected": 0.99987654} for i in range(3)],
        numel=65536, deterministic=True, inputs_mutated=False, torch_max_abs_err=1.2345678e-06, bar=BAR,
        reference="native", tol=1e-4, tolerance_note="default tol for fp32", floor_abs_err=2.4691356e-06,
        rms_ref=1.00123456, atol=2.00246912e-04, rtol=2e-4, margin=12.3456789, error_vs_pytorch=None,
        reference_precision=WHY, native_spread_abs_err=1.52587890625e-05,
        note="float64 reference left out: float64 forward failed: RuntimeError: mat1 and mat2 must have the same "
             "dtype, but got Float and Double; judged against the native-dtype reference with a doubled tolerance")


def test_eight_full_cases_fit_the_budget_uncut():
    cases = [_case(s, seed, False) for s in ("small", "full") for seed in range(3)]
    cases += [_case(s, 0, True) for s in ("small", "full")]
    res = VerifyResult(passed=False, cases=cases, task="kb_model", device="cuda:0", device_name="NVIDIA H100",
                       reference_precision=f"{WHY} [8 of 8 cases]", isolation="bwrap+uid")
    sc = EvoServer._result(None, "verify_vs_pytorch", res.model_dump()).structured_content
    size = len(json.dumps(sc, separators=(",", ":"), ensure_ascii=False))
    assert "trimmed" not in sc and size <= shaping.BUDGET_CHARS, size
    assert all("margin" in c and "reference_precision" in c for c in sc["cases"])
