"""verify_vs_pytorch on the CPU runner: harness failures are the harness's (kind harness /
too_big with the sizes), a missing module is named, overrides are applied and recorded (and refused for
a name the reference lacks), a looser tolerance is capped, the journal records the call."""

from __future__ import annotations

import anyio
import pytest

from evokernel_mcp.app import close_app
from evokernel_mcp.errors import BadInput
from evokernel_mcp.verify import ToleranceArg, verify_vs_pytorch

REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2

batch_size = 4
dim = 64

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""
SAME = REF + "\nclass ModelNew(Model):\n    pass\n"


@pytest.fixture(scope="module", autouse=True)
def _app():
    yield
    anyio.run(close_app)


def verify(candidate: str, reference: str = REF, **kw):
    kw.setdefault("seeds", 1)
    kw.setdefault("wait_s", 120)
    return anyio.run(lambda: verify_vs_pytorch(candidate, reference=reference, **kw))


def test_overrides_are_applied_recorded_and_journaled():
    r = verify(SAME, overrides={"batch_size": 3, "dim": 5}, experiment="verify/overrides")
    assert r.passed is True and r.overrides_applied == {"batch_size": 3, "dim": 5}
    assert [c.numel for c in r.cases] == [15, 15] and [c.probe for c in r.cases] == [False, True]
    assert r.result_id and r.result_id.startswith("r-")
    assert all(c.bar and c.reference == "float64" for c in r.cases)
    with pytest.raises(BadInput, match="batch_sise.*did you mean 'batch_size'"):
        verify(SAME, overrides={"batch_sise": 3})
    with pytest.raises(BadInput, match="positive"):
        verify(SAME, overrides={"dim": -4})
    with pytest.raises(BadInput, match="shipped task"):
        anyio.run(lambda: verify_vs_pytorch("def run(x, y): return x + y", task="vector_add",
                                            overrides={"N": 4}, wait_s=60))


def test_looser_tolerance_is_capped_and_reported():
    r = verify(REF + "\nclass ModelNew(Model):\n    def forward(self, x):\n        return super().forward(x) * 1.01\n",
               tolerance=ToleranceArg(atol=1.0, rtol=1.0), probe=False)
    assert r.passed is False and "capped" in r.cases[0].tolerance_note and r.cases[0].tol == 1e-4


def test_inputs_of_four_tebibytes_are_refused_with_the_sizes():
    huge = REF.replace("torch.rand(batch_size, dim)", "torch.rand(1 << 40, 1)")
    r = verify(huge + "\nclass ModelNew(Model):\n    pass\n", reference=huge, probe=False)
    assert r.passed is False and r.error.kind == "too_big", r.error
    assert "does not fit" in r.error.message and "GB" in r.error.message and "overrides" in r.error.message
    assert "shapes" in r.error.message and r.reason.startswith("too_big: ")


@pytest.mark.parametrize("body,words", [
    ("raise ValueError('no inputs today')", "no inputs today"),
    ("return [torch.rand(-3, 4)]", "get_inputs"),
    ("torch.manual_seed(2**70)\n    return [torch.rand(2)]", "get_inputs"),
])
def test_input_failures_are_the_harness_s(body, words):
    bad = REF.replace("return [torch.rand(batch_size, dim)]", body)
    r = verify(bad + "\nclass ModelNew(Model):\n    pass\n", reference=bad, probe=False)
    assert r.passed is False and r.error.kind == "harness", r.error
    assert words in r.error.message and "candidate raised" not in r.error.message


def test_a_missing_module_is_named():
    r = verify("import evk_no_such_module_xyz\n" + SAME, probe=False)
    assert r.passed is False and r.error.kind == "missing_module" and "evk_no_such_module_xyz" in r.error.message


def test_a_candidate_that_raises_is_named_with_its_case():
    r = verify(REF + "\nclass ModelNew(Model):\n    def forward(self, x):\n        raise ValueError('boom')\n",
               probe=False)
    assert r.passed is False and r.error.kind == "exception", r.error
    assert "candidate raised" in r.error.message and "boom" in r.error.message
    assert "shape set" in r.error.message and "seed" in r.error.message, r.error.message
