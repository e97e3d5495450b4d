"""A small case of a task with declared input shapes is planned from a bound on its outputs, without a forward on
meta tensors (a process's first meta op imports torch._dynamo, seconds), and so is a small KernelBench case on the
host, its real outputs checked against the bound before the float64 copy; a case where the bound's slack could
matter still runs the meta forward."""

from __future__ import annotations

import pytest

from evokernel_mcp import candidate as cand
from evokernel_mcp.runtime.child import Loaded
from evokernel_mcp.tasks import get_task, task_from_reference
from evokernel_mcp.verify import draws, memory, refplan, sides


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


KB_SUM = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.sum(0)\n"
          "def get_inputs():\n    return [torch.randn(64, 8)]\ndef get_init_inputs():\n    return []\n")
# outputs 4096 times the inputs' size: past the bound (4x the inputs) a small KernelBench case is planned from
KB_REPEAT = KB_SUM.replace("x.sum(0)", "x.repeat(4096, 1)")


def _kb(src, tmp_path, tag):
    task = task_from_reference(src)
    return _ref(task, tmp_path, tag), task.shape_names()[0]


def test_small_kernelbench_case_on_the_host_plans_without_a_meta_forward(tmp_path, meta_calls):
    loaded, shape = _kb(KB_SUM, tmp_path, "kb")
    case = sides.ref_case(loaded, {"shape": shape, "seed": 1, "hi": True})
    assert meta_calls == []
    assert case["plan"]["ref_hi"] and case["hi"] is not None and case["reference_precision"] == "float64"


def test_kernelbench_case_near_the_budget_runs_the_meta_forward(tmp_path, meta_calls, monkeypatch):
    monkeypatch.setattr(memory, "SMALL_FRACTION", 10**12)
    loaded, shape = _kb(KB_SUM, tmp_path, "kbmeta")
    sides.ref_case(loaded, {"shape": shape, "seed": 1, "hi": True})
    assert meta_calls == [[(64, 8)]]


def test_outputs_past_the_bound_are_planned_again_before_the_float64_copy(tmp_path, meta_calls, monkeypatch):
    # 40 MB free: the bound's plan keeps the float64 copy; the real outputs (8 MB, three copies, 16 MB in float64)
    # leave room for the native reference only
    monkeypatch.setattr(refplan, "_host_free", lambda: 40 << 20)
    loaded, shape = _kb(KB_REPEAT, tmp_path, "kbbig")
    case = sides.ref_case(loaded, {"shape": shape, "seed": 1, "hi": True})
    assert meta_calls == []
    assert case["hi"] is None and case["reference_precision"].startswith("native (the float64 copy does not fit")
    assert any(n.startswith("float64 reference left out: the float64 copy does not fit") for n in case["notes"]), case["notes"]


def test_outputs_past_the_bound_that_do_not_fit_at_all_are_too_big(tmp_path, meta_calls, monkeypatch):
    monkeypatch.setattr(refplan, "_host_free", lambda: 20 << 20)
    loaded, shape = _kb(KB_REPEAT, tmp_path, "kbhuge")
    with pytest.raises(sides.TooBig, match="does not fit"):
        sides.ref_case(loaded, {"shape": shape, "seed": 1, "hi": True})
