"""At least 30 level-1 problems from the REAL KernelBench files on the CPU path, through verify_vs_pytorch,
sizes scaled by `overrides` (overrides.scaled_overrides; the file itself is unchanged): the same-code
candidate (reference + `class ModelNew(Model): pass`) passes its seed and the signed probe, and a
perturbed one (outputs * 1.01 + 1e-3, indices + 1) fails. One runner serves the whole module."""

from __future__ import annotations

import pytest
from kbkit import perturbed, problem, same_code, summary, verify

from evokernel_mcp.overrides import scaled_overrides

pytestmark = pytest.mark.slow

# matmuls, activations, norms, reductions, pooling, convolutions, scans, losses
PROBLEMS = [1, 3, 4, 5, 8, 16, 18, 19, 20, 21, 22, 23, 24, 25, 26, 29, 31, 32, 36, 38, 41, 47, 51, 53, 54, 89, 93,
            94, 96, 100]
MAX_ELEMS = 2**16


@pytest.mark.parametrize("number", PROBLEMS)
def test_same_code_passes_and_perturbed_fails(number):
    name, src = problem(number)
    ov = scaled_overrides(src, max_elems=MAX_ELEMS)
    ok = verify(same_code(src), src, overrides=ov)
    assert ok.passed is True, f"{name} {ov}: {summary(ok)}"
    assert [c.probe for c in ok.cases] == [False, True]
    assert ok.overrides_applied == {k: list(v) if isinstance(v, tuple) else v for k, v in ov.items()}
    bad = verify(perturbed(src), src, overrides=ov, probe=False, stop_on_first_failure=True)
    assert bad.passed is False and bad.error is None, f"{name} {ov}: {summary(bad)}"


def test_at_least_thirty_problems():
    assert len(set(PROBLEMS)) >= 30
