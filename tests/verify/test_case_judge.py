"""verify/case.py's judge in isolation (no runner): outputs of every kind paired and judged with bar.py,
arg-reductions by the values selected, Python scalars, structure and subclass failures, tolerance caps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from evokernel_mcp.tasks import task_from_reference  # noqa: E402
from evokernel_mcp.verify.argred import arg_reductions  # noqa: E402
from evokernel_mcp.verify.case import judge, judge_outputs, tolerance_override  # noqa: E402

TASK = task_from_reference("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n")


def _j(native, got, hi=None, **kw):
    return judge_outputs(TASK, native, hi, got, got, **kw)


def test_tuple_dict_int_bool_and_scalar_outputs_pass_themselves_and_fail_when_changed():
    x = torch.randn(64, 32, dtype=torch.float64)
    native = (x.float(), {"idx": torch.arange(5), "mask": x > 0}, 3.5, 7)
    hi = (x, {"idx": torch.arange(5), "mask": x > 0}, 3.5, 7)
    assert _j(native, native, hi)["passed"] is True
    wrong_int = (x.float(), {"idx": torch.arange(5) + 1, "mask": x > 0}, 3.5, 7)
    r = _j(native, wrong_int, hi)
    assert r["passed"] is False and r["mismatches"] == 5 and "idx" in r["note"]
    wrong_scalar = (x.float(), {"idx": torch.arange(5), "mask": x > 0}, 3.6, 7)
    assert _j(native, wrong_scalar, hi)["passed"] is False
    as_tensor = (x.float(), {"idx": torch.arange(5), "mask": x > 0}, torch.tensor(3.5), torch.tensor(7))
    assert _j(native, as_tensor, hi)["passed"] is True, "a 0-d tensor stands for the reference's Python number"


def test_structure_and_subclass_failures_name_what_differs():
    t = torch.ones(3)
    r = _j((t, t), (t,))
    assert r["passed"] is False and "missing out[1]" in r["note"]
    r = _j(t, torch.ones(4))
    assert r["passed"] is False and "shape [4] != reference [3]" in r["note"]
    r = _j(t, {"__subclass__": "Evil", "data": t})
    assert r["passed"] is False and "subclass (Evil)" in r["note"]
    r = _j(t, "a string")
    assert r["passed"] is False and "str" in r["note"]


def test_argmax_ties_are_legal_and_found_by_behaviour():
    x = torch.zeros(4, 6)
    x[:, 1] = x[:, 4] = 1.0  # two maxima per row
    ref = torch.argmax(x, dim=1)
    found = arg_reductions(ref, [x])
    assert found == {"out": {"input": 0, "dim": 1, "op": "max"}}
    other_tie = torch.full((4,), 4)
    assert not torch.equal(other_tie, ref)
    r = judge_outputs(TASK, ref, None, other_tie, None, inputs=[x], arg=found)
    assert r["passed"] is True and "arg-reduction" in r["bar"]
    r = judge_outputs(TASK, ref, None, torch.zeros(4, dtype=torch.int64), None, inputs=[x], arg=found)
    assert r["passed"] is False and r["mismatches"] == 4
    assert arg_reductions(torch.arange(4), [x]) == {}, "an integer output that selects no max/min is judged exactly"


def test_all_zeros_tiny_outputs_fail_the_rms_bar():
    x = torch.rand(2, 393216, dtype=torch.float64)
    ref = torch.softmax(x, dim=1)
    r = judge_outputs(TASK, ref.float(), ref, torch.zeros(2, 393216), None)
    assert r["passed"] is False and r["mismatches"] == 2 * 393216 and r["reference"] == "float64"
    assert judge_outputs(TASK, ref.float(), ref, ref.float(), None)["passed"] is True


def test_unwritten_and_nondeterminism_are_counted():
    ref = torch.ones(10)
    a, b = torch.ones(10), torch.ones(10)
    a[3], b[3] = float("nan"), -320.0
    r = judge_outputs(TASK, ref, ref.double(), a, b)
    assert r["passed"] is False and r["unwritten_count"] == 1 and r["nan_count"] == 0
    b2 = torch.ones(10)
    b2[5] = 1.0 + 1e-6
    r = judge_outputs(TASK, ref, ref.double(), torch.ones(10), b2)
    assert r["deterministic"] is False


def test_tolerance_only_tightens_and_says_when_capped():
    assert tolerance_override(TASK, "float32", {"atol": 1.0, "rtol": 1.0}) == {"tol": 1.0}
    x = torch.randn(100, dtype=torch.float64)
    r = judge_outputs(TASK, x.float(), x, x.float() * 1.05, None, override={"atol": 1.0, "rtol": 1.0})
    assert r["passed"] is False and "capped" in r["tolerance_note"] and r["tol"] == 1e-4
    r = judge_outputs(TASK, x.float(), x, x.float(), None, override={"atol": 1e-6, "rtol": 1e-6})
    assert r["tolerance_custom"] is True and r["tol"] == 1e-6


def test_case_record_reports_probe_and_mutation():
    x = torch.randn(8)
    case = {"native": x, "hi": x.double(), "inputs": [x], "notes": []}
    rec = judge(TASK, "default", 0, case, {"out": x, "inputs_mutated": True}, {"out": x}, None, probe=True)
    assert rec["probe"] is True and rec["passed"] is False and "modified its inputs" in rec["note"]
    assert "beyond the reference's own input distribution" in rec["note"]
