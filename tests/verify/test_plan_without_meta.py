"""A small case of a task with declared input shapes is planned from a bound on its outputs, without a forward on
meta tensors (a process's first meta op imports torch._dynamo, seconds); a case where the bound's slack could
matter, and a KernelBench reference, still run the meta forward."""

from __future__ import annotations

import pytest

from evokernel_mcp import candidate as cand
from evokernel_mcp.runtime.child import Loaded
from evokernel_mcp.tasks import get_task, task_from_reference
from evokernel_mcp.verify import draws, memory, sides


@pytest.fixture
def meta_calls(monkeypatch):
    calls = []
    real = memory.meta_output_specs

    def spy(model, inputs):
        calls.append([tuple(t.shape) for t in inputs])
        return real(model, inputs)

    monkeypatch.setattr(memory, "meta_output_specs", spy)
    yield calls
    draws.CACHE.clear()


def _ref(task, tmp_path, tag):
    return Loaded("reference", cand.load_module(task.reference_source, f"reference_{tag}", tmp_path), task, "cpu")


def test_small_declared_case_plans_without_a_meta_forward(tmp_path, meta_calls):
    loaded = _ref(get_task("vector_add"), tmp_path, "bound")
    case = sides.ref_case(loaded, {"shape": "small", "seed": 1, "hi": True})
    assert meta_calls == []
    assert case["plan"]["ref_hi"] and case["plan"]["refuse"] is None and case["hi"] is not None
    assert case["plan"]["ref_hi_bytes"] >= 8 * 3 * 1000  # the float64 inputs and outputs at least


def test_case_near_the_budget_runs_the_meta_forward(tmp_path, meta_calls, monkeypatch):
    monkeypatch.setattr(memory, "SMALL_FRACTION", 10**12)
    loaded = _ref(get_task("vector_add"), tmp_path, "meta")
    case = sides.ref_case(loaded, {"shape": "small", "seed": 1, "hi": True})
    assert meta_calls == [[(1000,), (1000,)]]
    assert case["plan"]["ref_hi_bytes"] == 8 * 3 * 1000  # exact sizes from the meta forward


def test_kernelbench_reference_runs_the_meta_forward(tmp_path, meta_calls):
    src = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.sum(0)\n"
           "def get_inputs():\n    return [torch.randn(64, 8)]\ndef get_init_inputs():\n    return []\n")
    task = task_from_reference(src)
    loaded = _ref(task, tmp_path, "kb")
    sides.ref_case(loaded, {"shape": task.shape_names()[0], "seed": 1, "hi": True})
    assert meta_calls == [[(64, 8)]]
