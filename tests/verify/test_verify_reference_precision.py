"""verify_vs_pytorch end to end on the CPU runner (sandboxed children): a KernelBench-style model whose forward
cannot run in float64 verifies against the native reference and says so, and a perturbed copy fails; each
case carries its margin, error vs PyTorch and reference precision."""

from __future__ import annotations

import anyio
import pytest

from evokernel_mcp.app import close_app
from evokernel_mcp.kb_candidates import same_code
from evokernel_mcp.verify import verify_vs_pytorch

REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.lin = nn.Linear(n, h)

    def forward(self, x):
        state = torch.zeros(x.shape[0], 4)  # made in forward, float32
        return torch.cat([self.lin(x.to(torch.float32)), state], dim=1)

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return [32, 16]
"""
PERTURBED = REF + '''
class ModelNew(Model):
    def forward(self, x):
        return super().forward(x) * 1.01 + 1e-2
'''


@pytest.fixture(scope="module", autouse=True)
def _app():
    yield
    anyio.run(close_app)


def _verify(candidate: str):
    return anyio.run(lambda: verify_vs_pytorch(candidate, reference=REF, seeds=1, probe=False, wait_s=300,
                                               timeout_s=280))


def test_a_forward_that_fails_in_float64_verifies_against_the_native_reference():
    ok = _verify(same_code(REF))
    assert ok.passed is True and ok.error is None, ok
    (case,) = ok.cases
    assert case.reference == "native" and case.reference_precision.startswith("native (float64 forward failed")
    assert case.margin == 0.0 and case.native_spread_abs_err == 0.0 and case.error_vs_pytorch is None
    summary = ok.reference_precision
    assert summary.startswith("native (float64 forward failed") and "[1 of 1 cases]" in summary
    bad = _verify(PERTURBED)
    assert bad.passed is False and bad.error is None and bad.cases[0].mismatches > 0 and bad.cases[0].margin > 1
