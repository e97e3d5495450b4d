"""The reference process keeps a spec task's host draws (verify/draws.py): the same numbers as a fresh draw,
copies handed out, a byte budget, and a key that changes with everything the draw depends on."""

from __future__ import annotations

import pytest
import torch

from evokernel_mcp import candidate as cand
from evokernel_mcp.tasks import get_task
from evokernel_mcp.verify import draws

BIG = 1 << 40


@pytest.fixture(autouse=True)
def _empty_cache():
    draws.CACHE.clear()
    draws.CACHE.hits = draws.CACHE.misses = 0
    yield
    draws.CACHE.clear()


def test_kept_draw_equals_a_fresh_draw_and_is_handed_out_as_copies():
    task = get_task("rmsnorm")
    first = draws.inputs(task, "small", 3, "cpu", lambda: BIG)
    again = draws.inputs(task, "small", 3, "cpu", lambda: BIG)
    fresh = cand.make_inputs(task, "small", 3, "cpu")
    assert (draws.CACHE.misses, draws.CACHE.hits) == (1, 1)
    assert len(first) == len(fresh) and all(torch.equal(a, b) for a, b in zip(again, fresh))
    for t in first:  # a reference that writes into its inputs
        if isinstance(t, torch.Tensor):
            t.fill_(7)
    third = draws.inputs(task, "small", 3, "cpu", lambda: BIG)
    assert all(torch.equal(a, b) for a, b in zip(third, fresh))
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(third, again) if isinstance(a, torch.Tensor))


def test_key_follows_seed_shape_set_and_specs():
    task = get_task("rmsnorm")
    k = draws.key(task, "small", 0)
    assert k == draws.key(task, "small", 0)
    assert k != draws.key(task, "small", 1)
    assert k != draws.key(task, "small", 0, "cuda")
    assert k != draws.key(task, "medium", 0)
    spec = task.inputs[0].model_copy(update={"std": 2.0})
    other = task.model_copy(update={"inputs": [spec, *task.inputs[1:]]})
    assert k != draws.key(other, "small", 0)


def test_budget_evicts_least_recently_used_and_skips_what_cannot_fit():
    c = draws.DrawCache()
    mk = lambda n: (lambda: [torch.zeros(n, dtype=torch.uint8)])  # noqa: E731
    c.get("a", mk(400), 1000)
    c.get("b", mk(400), 1000)
    c.get("a", mk(400), 1000)  # a is now the most recent
    c.get("c", mk(400), 1000)  # b goes
    assert set(c._items) == {"a", "c"} and c.bytes == 800
    assert c.get("huge", mk(2000), 1000)[1] is False
    assert "huge" not in c._items and c.bytes == 800
    assert (c.hits, c.misses) == (1, 4)


def test_a_case_that_does_not_fit_empties_the_cache_first(tmp_path, monkeypatch):
    """The memory plan refuses while kept draws hold memory: they go, and the plan is made again."""
    from evokernel_mcp.runtime.child import Loaded
    from evokernel_mcp.verify import sides

    task = get_task("vector_add")
    loaded = Loaded("reference", cand.load_module(task.reference_source, "reference_fit_test", tmp_path), task, "cpu")
    sides.ref_case(loaded, {"shape": "small", "seed": 1, "inputs_only": True})
    assert draws.CACHE.bytes > 0
    calls = []

    def plan(*a, **k):
        calls.append(draws.CACHE.bytes)
        refuse = "no room" if draws.CACHE.bytes else None
        return type("P", (), {"refuse": refuse, "ref_hi": True, "model_dump": lambda self: {}})(), None, None

    monkeypatch.setattr(sides, "_plan", plan)
    sides.ref_case(loaded, {"shape": "small", "seed": 2, "hi": True})
    assert calls[0] > 0 and calls[1] == 0


def test_a_draw_too_big_to_keep_is_handed_out_without_a_copy(monkeypatch):
    """A big case's memory plan counts no extra copy of its inputs: an unkept draw is not cloned."""
    monkeypatch.setattr(draws, "DEFAULT_MB", 0)
    task = get_task("rmsnorm")
    made = []
    real = cand.spec_draws
    monkeypatch.setattr(cand, "spec_draws", lambda *a: made.append(real(*a)) or made[-1])
    got = draws.inputs(task, "small", 3, "cpu", lambda: BIG)
    assert draws.CACHE.bytes == 0 and got[0] is made[0][0]


def test_budget_is_capped_by_host_memory_and_the_setting(monkeypatch):
    monkeypatch.setattr(draws, "DEFAULT_MB", 10)
    assert draws.budget_bytes(BIG) == 10 << 20
    assert draws.budget_bytes(8 << 20) == 1 << 20
    monkeypatch.setattr(draws, "DEFAULT_MB", 0)
    assert draws.budget_bytes(BIG) == 0


def test_reference_case_op_uses_the_kept_draw(tmp_path):
    """Through the reference child's op (in-process, CPU): a second case of the same seed is a hit with the
    same inputs; a KernelBench reference never uses the cache."""
    from evokernel_mcp.runtime.child import Loaded
    from evokernel_mcp.verify import sides

    task = get_task("vector_add")
    mod = cand.load_module(task.reference_source, "reference_draws_test", tmp_path)
    loaded = Loaded("reference", mod, task, "cpu")
    a = sides.ref_case(loaded, {"shape": "small", "seed": 5, "inputs_only": True})["inputs"]
    b = sides.ref_case(loaded, {"shape": "small", "seed": 5, "hi": True})["inputs"]
    assert (draws.CACHE.misses, draws.CACHE.hits) == (1, 1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert all(torch.equal(x, y) for x, y in zip(a, cand.make_inputs(task, "small", 5, "cpu")))


def test_the_plan_op_answers_the_plan_the_case_then_makes_without_making_inputs(tmp_path):
    """op "plan" (the runner asks it before a case, to give our idle processes back before the reference's
    peak): the same plan as the case's, from meta tensors; no input is drawn and no forward runs."""
    from evokernel_mcp.runtime.child import Loaded
    from evokernel_mcp.verify import draws, sides

    task = get_task("vector_add")
    mod = cand.load_module(task.reference_source, "reference_plan_test", tmp_path)
    loaded = Loaded("reference", mod, task, "cpu")
    draws.CACHE.clear()
    plan = sides.ref_plan(loaded, {"shape": "small", "seed": 3, "hi": True})["plan"]
    assert draws.CACHE.bytes == 0, "no inputs made"
    case = sides.ref_case(loaded, {"shape": "small", "seed": 3, "hi": True})
    assert plan is not None and plan["where"] == case["plan"]["where"]
    assert plan["needed_bytes"] == case["plan"]["needed_bytes"] and plan["cap_bytes"] is None
