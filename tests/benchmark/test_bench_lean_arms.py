"""A big shape's benchmark on a GPU keeps one arm's working memory on the device at a time: the runner's copies
of the inputs wait on the host while the arms get theirs, and each arm gives its allocator's cache back after
every block and makes it again, untimed and off the runner's clock, before its next one (arm_ready). Here with
a fake device (torch.cuda.empty_cache counted) and fake children; the memory itself is measured on the GPU
by bench/kernelbench_sweep.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fakearms import ArmChild as _Child

from evokernel_mcp.benchmark import arms as arms_mod
from evokernel_mcp.benchmark import runner_side, sides, timing
from evokernel_mcp.benchmark.blocks import BlockTimer


def test_a_lean_arm_gives_its_cache_back_after_each_block_and_warms_untimed_before_the_next(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    calls = []

    def fn(x):
        calls.append(1)
        return x + 1

    bt = BlockTimer(fn, [(torch.randn(64),)], timing.TimingOptions(max_time_s=0.1), gpu=False, sample_size=1)
    bt.warm_up()
    bt.lean = True  # set by arm_init on a GPU only; the block itself runs on the host clock here
    loaded = SimpleNamespace(arms={"baseline": bt})
    n0 = len(calls)
    sides.arm_ready(loaded, {"name": "baseline"})
    assert len(calls) == n0 + 1 and bt.rep == 0, "one untimed call, no repetition counted"
    sides.arm_block(loaded, {"name": "baseline", "k": 3, "defer": True})
    rep = sides.arm_times(loaded, {"name": "baseline"})
    assert len(rep["times"]) == 3 and bt.rep == 3 and len(calls) == n0 + 4
    assert emptied == [1] and bt.last is None, "the block's cache went back after its times"
    bt.lean = False
    sides.arm_ready(loaded, {"name": "baseline"})
    bt.give_back()
    assert emptied == [1] and len(calls) == n0 + 4, "an arm that is not lean keeps its cache warm"


def _interleave(lean: bool):
    log: list = []
    cand, base = _Child("candidate", log), _Child("baseline", log)
    arms = arms_mod.Arms(cand, base, task=None, deadline=1e12, dev="cpu")
    x = torch.randn(1024)
    case = {"inputs": [x], "native": [x.clone()], "init_inputs": [], "state": None}
    pool = [[torch.randn(1024)]]
    opt = {"min_reps": 2, "max_reps": 8, "max_time_s": 0.05}
    arms_mod.interleave(arms, case, pool, 0, opt, lambda *a: None, True, None, sample=0, release_inputs=lean,
                            staged=lean)
    return log, case, pool


def test_a_big_gpu_shape_sends_host_inputs_asks_each_arm_ready_before_every_block_and_keeps_no_inputs():
    log, case, pool = _interleave(lean=True)
    inits = [r for _, op, r in log if op == "arm_init"]
    assert len(inits) == 2 and all(r["lean"] for r in inits)
    assert all(t.device.type == "cpu" for r in inits for t in r["inputs"]), "the runner's copies wait on the host"
    for i, (name, op, _) in enumerate(log):
        if op == "arm_block":
            assert log[i - 1][:2] == (name, "arm_ready"), "every block is preceded by its arm's untimed call"
    assert case["inputs"][0].device.type == "meta" and pool[0][0].device.type == "meta", \
        "after the arms' set-up the runner holds no copy of the inputs"


def test_a_small_shape_asks_no_arm_ready_and_keeps_its_arms_warm():
    log, case, _ = _interleave(lean=False)
    assert not any(op == "arm_ready" for _, op, _ in log)
    assert all(not r["lean"] for _, op, r in log if op == "arm_init")
    assert case["inputs"][0].device.type == "cpu"


def test_a_big_shapes_check_inputs_land_on_the_host_and_go_to_the_reference_handed_over():
    """The post-timing checks of a staged shape: the reference's inputs wait on the runner's host (no device copy
    in the runner while the candidate and the reference each get theirs), and go out handed over."""
    seen = []

    class Courier:
        def handing_over(self):
            import contextlib

            seen.append("handed")
            return contextlib.nullcontext()

    class Ref:
        courier = Courier()

        def request(self, req, timeout_s, max_bytes, device=None):
            seen.append((req["op"], device, req.get("own_inputs", False)))
            return {"inputs": [torch.zeros(2)], "native": torch.zeros(2)}

    ref = Ref()
    arms = arms_mod.Arms(ref, ref, task=None, deadline=1e12, dev="cuda")
    x = arms.inputs(ref, {"shape": "s", "seed": 1}, staged=True)
    assert seen == [("case", None, False)] and x[0].device.type == "cpu"
    seen.clear()
    runner_side.expected(arms, ref, [torch.zeros(2)], 0, False, staged=True)
    assert seen == ["handed", ("expected", None, True)]
    seen.clear()
    arms.inputs(ref, {"shape": "s", "seed": 1}, staged=False)
    runner_side.expected(arms, ref, [torch.zeros(2)], 0, False)
    assert seen == [("case", None, False), ("expected", None, True)], "a small shape: as before"


def test_only_a_big_shape_whose_inputs_dominate_is_staged_on_the_host():
    from evokernel_mcp.runtime.devplan import host_staged

    assert host_staged(8 << 30, 1 << 20), "a reduction: three input copies would be 3x its bytes"
    assert not host_staged(6 << 30, 6 << 30), "an activation stays device to device"
    assert not host_staged(300 << 20, 1 << 20), "a small shape"


def test_once_the_arms_have_their_inputs_nothing_in_the_runner_keeps_its_copy_alive():
    """An activation's big shape (not staged: the device-to-device path): the runner's copy of the inputs must
    be gone, not merely renamed, before the first block (a request it sent must not keep it alive)."""
    import gc
    import weakref

    alive = []

    class Child(_Child):
        def request(self, req, timeout_s, max_bytes, device=None):
            if req["op"] == "arm_block" and not alive:
                gc.collect()
                alive.append(ref() is not None)
            return super().request({"op": req["op"], "k": req.get("k")}, timeout_s, max_bytes, device)

    log: list = []
    arms = arms_mod.Arms(Child("candidate", log), Child("baseline", log), task=None, deadline=1e12, dev="cpu")
    case = {"inputs": [torch.randn(1024)], "native": [torch.randn(1024)], "init_inputs": [], "state": None}
    ref = weakref.ref(case["inputs"][0])
    opt = {"min_reps": 2, "max_reps": 8, "max_time_s": 0.05}
    arms_mod.interleave(arms, case, [], 0, opt, lambda *a: None, True, None, sample=0, release_inputs=True)
    assert alive == [False]


def test_the_benchmarks_case_is_planned_within_the_jobs_memory_cap_as_verifys_is():
    """The reference's case for a benchmark shape carries memory_factor: a big shape's reference then runs its
    forward on its inputs themselves (no copy beside the forward's temporaries: 16.6 GiB of 4 GiB on an H100)."""
    from evokernel_mcp import settings
    from evokernel_mcp.benchmark.runner_side import _bench_shape

    class Stop(Exception):
        pass

    class Arms:
        def ask(self, child, req, max_bytes=0, handed=False, device=None):
            self.req = req
            raise Stop

    arms = Arms()
    with pytest.raises(Stop):
        _bench_shape(arms, None, "full", 0, {}, lambda *a: None, gpu=False)
    assert arms.req["op"] == "case" and arms.req["memory_factor"] == settings.get().memory_factor > 0


def test_a_parked_arm_keeps_its_tensors_and_values_and_times_the_same_inputs_after_it_comes_back():
    """park() moves an arm's input sets and pool to host buffers (the same tensor objects, their storage swapped),
    unpark() brings them back; the calls, which hold those objects, then run on the same values."""
    x, pool = torch.randn(256), [torch.randn(256)]
    seen = []
    bt = BlockTimer(lambda t: seen.append(t.clone()) or t * 2, [(x,)], timing.TimingOptions(max_time_s=0.1),
                    gpu=False, sample_size=0, refill_pool=[pool])
    bt.lean = True
    want = x.clone()
    ptr = x.data_ptr()
    bt.park()
    assert bt.parked is not None and x.data_ptr() != ptr and torch.equal(x, want), "its own host buffer, same values"
    bt.park()  # a second park while parked changes nothing
    assert len(bt.parked) == 3, "the input set, the pool set and (host path) its copy of the first content"
    bt.ready()  # unpark, then the untimed call
    assert bt.parked is None and torch.equal(seen[-1], want) and bt.rep == 0
    bt.lean = False
    bt.park()
    assert bt.parked is None, "an arm that is not lean never parks"


def test_parked_arms_take_turns_one_park_per_switch_and_none_while_an_arm_runs_twice():
    log: list = []
    cand, base = _Child("candidate", log), _Child("baseline", log)
    arms = arms_mod.Arms(cand, base, task=None, deadline=1e12, dev="cpu")
    x = torch.randn(1024)
    case = {"inputs": [x], "native": [x.clone()], "init_inputs": [], "state": None}
    opt = {"min_reps": 2, "max_reps": 8, "max_time_s": 0.05}
    arms_mod.interleave(arms, case, [], 0, opt, lambda *a: None, True, None, sample=0, release_inputs=True,
                            staged=True, park=True)
    assert all(r["park"] for _, op, r in log if op == "arm_init"), "each arm parks at the end of its set-up"
    ops = [(n, op) for n, op, _ in log if op in ("arm_park", "arm_ready", "arm_block")]
    holder = None
    for i, (name, op) in enumerate(ops):
        if op == "arm_block":
            assert ops[i - 1] == (name, "arm_ready")
            if holder not in (None, name):
                assert ops[i - 2] == (holder, "arm_park"), "the arm before it parked first"
            else:
                assert ops[i - 2][1] != "arm_park", "no park when the same arm runs again"
            holder = name
    blocks = [n for n, op in ops if op == "arm_block"]
    switches = sum(a != b for a, b in zip(blocks, blocks[1:]))
    assert sum(op == "arm_park" for _, op in ops) == switches > 0


def test_a_big_shape_parks_its_arms_only_where_nothing_else_fits_what_is_free():
    """Parking made a big shape's benchmark two to five times as long (each switch of arms copies its data out and back),
    so it is the last resort: a plan over the soft cap that the free memory holds runs unparked."""
    from evokernel_mcp.runtime.devplan import PARK_NOTE, plan_benchmark

    gib = 2**30
    i, o, work = 8 * gib, 4, 8 * gib  # 94_MSELoss: 8 GiB in, a scalar out, 8 GiB of the forward's temporaries
    cap = 24 * gib - 4 * (600 << 20)
    soft = plan_benchmark(i, o, 75 * gib, 80 * gib, True, 1, 1, workspace_bytes=work, cap=cap, can_park=True)
    assert not soft.park_idle_arms and soft.too_big is None and soft.needed_bytes > cap, "over the soft cap, unparked"
    assert PARK_NOTE not in soft.notes
    tight = plan_benchmark(i, o, 30 * gib, 80 * gib, True, 1, 1, workspace_bytes=work, cap=cap, can_park=True)
    assert tight.park_idle_arms and tight.too_big is None and PARK_NOTE in tight.notes
    assert tight.parts["arms"] == i + 2 * o and tight.parts["arms' working memory"] == work
    assert not tight.control and tight.refill_sets == 0 and tight.sample_size == 0
    unparked = plan_benchmark(i, o, 30 * gib, 80 * gib, True, 1, 1, workspace_bytes=work, cap=cap)
    assert unparked.too_big is not None, "without parking the same device says too_big"
    roomy = plan_benchmark(i, o, 75 * gib, 80 * gib, False, 0, 0, workspace_bytes=0, cap=None, can_park=True)
    assert not roomy.park_idle_arms


def test_a_shape_of_about_1_gb_parks_its_arms_to_keep_within_the_cap_where_a_bigger_one_runs_over_it():
    """6_Matmul_with_large_K_dimension_ (1.07 GB of inputs, a small output) on an 80 GB card: two arms holding the
    inputs beside three CUDA contexts are over 3x its own bytes however lean the plan, and a switch of arms copies
    only about a gigabyte out and back, so its arms take turns, saying why; inputs over PARK_FOR_CAP_BYTES run
    unparked over the soft cap (parking made a 4-13 GB shape's benchmark two to five times as long) unless the
    host holds their copies (park_big) and even one turn of lean arms is over the cap (the next test)."""
    from evokernel_mcp.runtime.devplan import PARK_CAP_NOTE, PARK_FOR_CAP_BYTES, PARK_NOTE, data_cap, plan_benchmark

    gib = 2**30
    i, o = 1_073_741_824, 262_144
    cap = data_cap(i + o, 3.0, 3)
    p = plan_benchmark(i, o, 75 * gib, 80 * gib, True, 1, 1, workspace_bytes=32 << 20, cap=cap, can_park=True)
    assert p.park_idle_arms and p.too_big is None and PARK_CAP_NOTE in p.notes and PARK_NOTE not in p.notes
    assert p.parts["arms"] == i + 2 * o, "one arm's data on the device at a time"
    assert not plan_benchmark(i, o, 75 * gib, 80 * gib, True, 1, 1, cap=cap).park_idle_arms, "graph replays: no park"
    i2 = PARK_FOR_CAP_BYTES + 1
    q = plan_benchmark(i2, o, 75 * gib, 80 * gib, True, 1, 1, workspace_bytes=i2, cap=data_cap(i2 + o, 3.0, 3),
                       can_park=True)  # its forward's temporaries as big as its inputs: over the cap
    assert not q.park_idle_arms and q.needed_bytes > (q.cap_bytes or 0), "over the soft cap, unparked"
    assert plan_benchmark(1 << 20, o, 75 * gib, 80 * gib, True, 1, 1, cap=None, can_park=True).park_idle_arms is False


def test_big_inputs_park_for_the_cap_only_where_one_turn_of_lean_arms_is_over_it():
    """94_MSELoss on an 80 GB card: 8 GiB of inputs, a scalar output, and 8 GiB of temporaries in its forward. Lean
    arms give their cache back between blocks, so while one arm runs, the other holds its inputs alone: 8 + 8 + 8
    GiB, over the cap (3 x 8 GiB less three contexts); with the host able to hold the copies (park_big) its arms
    take turns. 19_ReLU (6 GiB in, 6 GiB out, no temporaries): one turn is 6 + 6 + 2 x 6 - 6 (the runner's outputs
    let go) = 18 GiB, under the cap, so it stays unparked however the plan's every-arm figure reads."""
    from evokernel_mcp.runtime.devplan import PARK_CAP_NOTE, data_cap, plan_benchmark

    gib = 2**30
    loss_i, loss_o = 8 * gib, 4
    cap = data_cap(loss_i + loss_o, 3.0, 3)
    loss = plan_benchmark(loss_i, loss_o, 75 * gib, 80 * gib, True, 1, 1, workspace_bytes=8 * gib, cap=cap,
                          can_park=True, park_big=True)
    assert loss.park_idle_arms and PARK_CAP_NOTE in loss.notes and loss.too_big is None
    assert loss.parts["arms"] + loss.parts["arms' working memory"] <= cap, "one arm's data at a time, within the cap"
    no_host = plan_benchmark(loss_i, loss_o, 75 * gib, 80 * gib, True, 1, 1, workspace_bytes=8 * gib, cap=cap,
                             can_park=True)
    assert not no_host.park_idle_arms, "without room on the host for the parked copies: unparked, over the soft cap"
    relu = plan_benchmark(6 * gib, 6 * gib, 75 * gib, 80 * gib, True, 1, 1, workspace_bytes=0,
                          cap=data_cap(12 * gib, 3.0, 3), can_park=True, park_big=True)
    assert not relu.park_idle_arms and relu.too_big is None


def test_a_big_shape_parks_for_the_cap_only_where_the_host_and_each_arm_may_hold_its_inputs(monkeypatch):
    """The parked copies are pinned host memory in each arm's process: four times the inputs free to the runner,
    and each arm's memory limit at least twice them (a user's child_memory of 4G keeps an 8 GiB shape unparked)."""
    from evokernel_mcp.benchmark import room
    from evokernel_mcp.runtime import limits

    gib = 2**30
    monkeypatch.setattr(room, "_host_free", lambda: 64 * gib)
    monkeypatch.setattr(limits, "memory_bytes", lambda: 32 * gib)
    assert room.host_holds_parked(8 * gib)
    assert not room.host_holds_parked(17 * gib), "the host's free memory is under 4x the inputs"
    monkeypatch.setattr(limits, "memory_bytes", lambda: 4 * gib)
    assert not room.host_holds_parked(8 * gib), "an arm may not hold its parked copy"
    monkeypatch.setattr(limits, "memory_bytes", lambda: None)
    assert room.host_holds_parked(8 * gib), "no limit on the children"
