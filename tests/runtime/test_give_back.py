"""Our idle processes give their device memory back to a job that needs the room (spares.give_back_idle), and a
case the reference refused as too_big is asked again once after that (verify/runner_side.with_room); fakes for
the children and injected free-memory readings, no device."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import pytest

from evokernel_mcp.runtime import spares
from evokernel_mcp.runtime.child_proc import ChildFailed
from evokernel_mcp.verify.runner_side import with_room


class _Proc:
    pid = os.getpid()

    def poll(self):
        return None


class _Kid:
    def __init__(self):
        self.proc, self.discarded, self.warm = _Proc(), False, False

    def discard(self):
        self.discarded = True

    def stop(self):
        self.discarded = True
        return lambda: None


def _pool(monkeypatch, frees):
    pool = spares.Spares("cuda:0", n=0)
    pool._profiles = False
    pool._ready = [_Kid(), _Kid()]
    pool._refs = OrderedDict([("this", _Kid()), ("other", _Kid())])
    readings = iter(frees)
    monkeypatch.setattr(spares.Spares, "_free_memory", staticmethod(lambda: next(readings)))
    return pool


def test_idle_spares_and_other_cached_references_are_stopped_and_no_spare_starts_until_the_job_ends(monkeypatch):
    pool = _pool(monkeypatch, [(10 << 30, 80 << 30), (12 << 30, 80 << 30)])
    ready, keep, other = list(pool._ready), pool._refs["this"], pool._refs["other"]
    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self))
    out = pool.give_back_idle(keep=(keep,))
    assert all(k.discarded for k in ready) and other.discarded and not keep.discarded
    assert list(pool._refs) == ["this"] and pool._ready == []
    assert out["processes"] == 3 and out["freed_bytes"] == 2 << 30 and out["free_bytes"] == 12 << 30
    assert {h["role"] for h in out["holdings"]} == {"spare", "cached reference"}
    pool.n = 5
    pool.replenish()
    assert started == [], "no spare starts while the job that needed the room runs"
    k = spares.AFTER_BIG_SPARES
    pool.end_hold()
    assert not pool._held and len(started) == k < pool.n, \
        "after a big job a few spares start (the next job's children), not all: the next job may be big too"
    pool._starting = 0  # (the fake starts never land)
    pool.replenish(taking=True)
    assert len(started) == k, "a take within a job after a big one starts none"
    pool.end_hold()
    assert len(started) == k, "a job that took no child (a ping) changes nothing"
    pool._starting = 0
    pool._took = True  # a job that took a child and gave nothing back ends
    pool.end_hold()
    assert len(started) == k + pool.n, "all spares start again once a job that needed no room is over"
    pool._starting = 0
    pool._took = True
    pool.end_hold()
    assert len(started) == k + pool.n, "an ordinary job's end starts nothing of its own (its takes did)"


class _Spares:
    def __init__(self):
        self.calls, self.waits = 0, 0

    def wait_retired(self, timeout_s=30.0):
        self.waits += 1
        return 0.0

    def give_back_idle(self, keep, keep_spares=0):
        self.calls += 1
        return {"processes": 3, "freed_bytes": 2 * 10**9}


class _Ctx:
    def __init__(self, device="cuda:0"):
        self.device, self.spares = device, _Spares()


def _asks(*answers):
    it = iter(answers)

    def ask():
        a = next(it)
        if isinstance(a, Exception):
            raise a
        return a
    return ask


def test_a_case_refused_as_too_big_is_asked_again_once_after_giving_back_and_says_so():
    ctx, state = _Ctx(), {}
    case = with_room(ctx, _asks(ChildFailed("too_big", "needs 70 GB"), {"notes": ["x"]}), (), state)
    assert ctx.spares.calls == 1 and case["notes"][0] == "x" and "3 idle process(es)" in case["notes"][1]
    assert "2.0 GB freed" in case["notes"][1]
    with pytest.raises(ChildFailed) as ei:  # once per job: the next refusal stands
        with_room(ctx, _asks(ChildFailed("too_big", "needs 90 GB")), (), state)
    assert ctx.spares.calls == 1 and ei.value.message == "needs 90 GB"


def test_a_refusal_even_after_giving_back_names_it_and_other_failures_pass_through():
    ctx = _Ctx()
    with pytest.raises(ChildFailed) as ei:
        with_room(ctx, _asks(ChildFailed("too_big", "needs 99 GB"), ChildFailed("too_big", "needs 99 GB")), (), {})
    assert ei.value.kind == "too_big" and "asked again after giving back memory: 3 idle" in ei.value.message
    with pytest.raises(ChildFailed) as ei:
        with_room(ctx, _asks(ChildFailed("exception", "boom")), (), {})
    assert ei.value.kind == "exception" and ctx.spares.calls == 1
    cpu = _Ctx("cpu")
    with pytest.raises(ChildFailed):
        with_room(cpu, _asks(ChildFailed("too_big", "host")), (), {})
    assert cpu.spares.calls == 0, "the CPU path has no device memory to give back"


KB = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
batch_size = 4096
dim = 393216
def get_inputs():
    return [torch.rand(batch_size, dim)]
def get_init_inputs():
    return []
"""


class _Arms:
    def __init__(self, ctrl=None):
        from evokernel_mcp.tasks import task_from_reference

        self.task, self.ctrl = task_from_reference(KB), ctrl

    def children(self):
        return {"baseline": 1, "candidate": 2, **({"control": self.ctrl} if self.ctrl is not None else {})}


def test_a_benchmark_whose_arms_do_not_fit_gives_back_then_is_too_big_before_anything_runs(monkeypatch):
    torch = pytest.importorskip("torch")
    from evokernel_mcp.benchmark.room import room_for_arms as _room_for_arms

    case = {"inputs": [torch.zeros(1000)], "native": torch.zeros(1000)}  # 4 kB each: the arms need 48 kB
    readings = iter([(10_000, 80 << 30), (10**6, 80 << 30)])
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: next(readings))
    ctx, room = _Ctx(), {}
    _room_for_arms(ctx, _Arms(), None, case, room)
    assert ctx.spares.calls == 1, "short at first: our idle processes gave theirs back, then it fit"
    assert "given back before timing: 3 idle process(es)" in room["notes"][0]
    readings = iter([(10_000, 80 << 30), (10_000, 80 << 30)])
    with pytest.raises(ChildFailed) as ei:
        _room_for_arms(ctx, _Arms(), None, case, {})
    msg = ei.value.message
    assert ei.value.kind == "too_big" and msg.startswith("the benchmark's arms do not fit: it needs")
    assert "arms" in msg and "10.0 kB free" not in msg and "free of 85.9 GB" in msg and "overrides={" in msg
    readings = iter([(10**9, 80 << 30)])
    calls = ctx.spares.calls
    _room_for_arms(ctx, _Arms(), None, case, {})
    assert ctx.spares.calls == calls, "nothing given back when it fits"


def test_short_of_memory_for_three_arms_the_control_arm_goes_before_the_job_does(monkeypatch):
    torch = pytest.importorskip("torch")
    from evokernel_mcp.benchmark.room import room_for_arms as _room_for_arms

    case = {"inputs": [torch.zeros(1000)], "native": torch.zeros(1000)}  # 12 kB per arm, 12 kB besides
    free = int(37_000 / 0.9) + 1  # two arms fit (36 kB), three (48 kB) do not
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free, 80 << 30))
    ctx, room, arms = _Ctx(), {}, _Arms(ctrl="control-child")
    retired = []
    ctx.spares.retire = retired.append
    _room_for_arms(ctx, arms, None, case, room)
    assert arms.ctrl is None and retired == ["control-child"] and "control arm left out" in room["notes"][-1]
    assert ctx.spares.waits == 1, "the control arm's process is gone (its CUDA context too) before the arms start"


def test_a_7_5_gb_norm_benchmark_on_an_80_gb_card_runs_lean_and_lets_the_runners_output_copy_go(monkeypatch):
    """36_RMSNorm_ at full size (meta tensors: sizes without memory): 61.5 GB free of 85 GB with the runner holding
    the case. Short of the full benchmark, our idle processes give back first; then the control arm, the refill
    pool and the sampled repetitions go, the runner's device copy of the outputs goes, and the notes say so."""
    torch = pytest.importorskip("torch")
    from evokernel_mcp.benchmark.room import room_for_arms as _room_for_arms

    x = torch.empty(112, 64, 512, 512, device="meta")
    case = {"inputs": [x], "native": torch.empty(112, 64, 512, 512, device="meta")}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(61.5e9), int(85e9)))
    ctx, room, arms = _Ctx(), {}, _Arms(ctrl="control-child")
    retired = []
    ctx.spares.retire = retired.append
    p = _room_for_arms(ctx, arms, None, case, room, refill_sets=1, sample_size=1)
    assert ctx.spares.calls == 1 and arms.ctrl is None and retired == ["control-child"]
    assert (p.refill_sets, p.sample_size, p.control) == (0, 0, False) and room["plan"] is p
    assert case["native"].device.type == "meta" and case["inputs"][0] is x
    notes = " ".join(room["notes"])
    assert "given back before timing" in notes and "noise floor is the least band" in notes
    big = {"inputs": [torch.empty(10 * 10**9, device="meta")], "native": torch.empty(10, device="meta")}
    with pytest.raises(ChildFailed) as ei:  # 40 GB of inputs: no cut makes it fit
        _room_for_arms(ctx, _Arms(), None, big, {})
    assert ei.value.kind == "too_big" and "it needs 80.0 GB" in ei.value.message and "overrides={" in ei.value.message


def test_a_spare_whose_start_was_in_flight_when_the_room_was_given_back_is_stopped_when_it_arrives(monkeypatch):
    """Spares starting when a big job gave back its room would otherwise land in the pool mid-job: while held,
    one arriving beyond the spares the job left is stopped, unless a take() waits for it."""
    pool = _pool(monkeypatch, [(10 << 30, 80 << 30), (12 << 30, 80 << 30)])
    pool.give_back_idle(keep_spares=1)
    assert len(pool._ready) == 1
    late = _Kid()
    with pool._lock:
        pool._offer(late)
    assert late.discarded and len(pool._ready) == 1, "a late arrival beyond the kept spare goes"
    wanted = _Kid()
    with pool._lock:
        pool._takers = 1  # a job's take() waits for a child now
        pool._offer(wanted)
        pool._takers = 0
    assert not wanted.discarded and wanted in pool._ready
    pool.end_hold()
    after = _Kid()
    with pool._lock:
        pool._offer(after)
    assert not after.discarded and after in pool._ready, "once the job ends, spares are kept again"


class _Ref:
    """A reference child that answers the plan op with a plan over the memory cap, and records the order."""

    def __init__(self, log, cap_bytes=10**9, needed_bytes=2 * 10**9):
        self.log, self.plan = log, {"cap_bytes": cap_bytes, "needed_bytes": needed_bytes}

    def request(self, req, **_kw):
        self.log.append(req["op"])
        if req["op"] == "plan":
            return {"plan": self.plan}
        return {"plan": self.plan, "inputs": [], "native": None}


def test_a_case_over_the_memory_cap_gives_our_idle_processes_back_before_the_reference_makes_it():
    from evokernel_mcp.verify.runner_side import _reference_case, within_cap

    log, ctx, room = [], _Ctx(), {}
    ref = _Ref(log)
    kept = []
    ctx.spares.give_back_idle = lambda keep, keep_spares=0: (log.append("give_back"), kept.append(keep_spares),
                                                             {"processes": 8, "freed_bytes": 5 * 10**9})[-1]
    _reference_case(ctx, ref, "full", 0, False, 1e18, "cuda",
                    before=lambda plan: within_cap(ctx, ref, plan, room))
    assert log == ["plan", "give_back", "case"] and kept == [0] and "8 idle process(es)" in room["gave_back"]["what"]
    log.clear()
    within_cap(ctx, ref, ref.plan, room)
    assert log == [], "once per job"
    room, log[:] = {}, []
    roomy = _Ref(log, cap_bytes=10 * 10**9, needed_bytes=4 * 10**9)  # 6 GB of the cap left: spares fit in it
    within_cap(ctx, roomy, roomy.plan, room)
    assert kept[-1] == 1, "one spare kept for the next job, not as many as the plan's headroom would hold"
    within_cap(ctx, roomy, roomy.plan, {}, spares_room=False)
    assert kept[-1] == 0, "a benchmark keeps no spare within the cap"
    assert within_cap(ctx, ref, {"cap_bytes": None}, {}) is None, "under 1 GB of its own: no cap, nothing given back"
    assert within_cap(_Ctx("cpu"), ref, ref.plan, {}) is None


def test_a_plan_the_reference_forged_stops_nothing_and_breaks_nothing():
    """The plan comes from the reference's process (agent code): a reply that is not a plan, or numbers that are
    not byte counts, read as no plan; the job goes on."""
    from evokernel_mcp.verify.runner_side import plan_of, within_cap

    ctx = _Ctx()
    for reply in (None, [], "plan", {"plan": 7}, {"plan": ["x"]}, {}):
        assert plan_of(reply) is None
    for bad in ({"cap_bytes": "9" * 40}, {"cap_bytes": True}, {"cap_bytes": -5}, {"cap_bytes": 10**9,
                                                                                    "needed_bytes": "x"},
                {"cap_bytes": 1.5e9}):
        assert within_cap(ctx, None, bad, {}) is None
    assert ctx.spares.calls == 0


def test_the_next_job_of_a_source_planned_within_the_cap_gives_our_idle_processes_back_before_taking_children():
    """A reference whose last case was capped remembers it (Child.capped), and the next job of its source gives
    our idle processes back before taking its children, keeping the ready spares it will take; a source whose
    last case was not capped, or the CPU path, gives nothing back early."""
    from evokernel_mcp.verify.runner_side import give_back_early, within_cap

    log, ctx = [], _Ctx()
    kept = []
    ctx.spares.give_back_idle = lambda keep, keep_spares=0: (kept.append((keep, keep_spares)),
                                                             {"processes": 4, "freed_bytes": 10**9})[-1]
    ref = _Ref(log)
    ref.capped = False
    assert give_back_early(ctx, ref, 3) is None and kept == [], "nothing known of this source yet"
    within_cap(ctx, ref, ref.plan, {})
    assert ref.capped is True
    kept.clear()
    assert "4 idle process(es)" in give_back_early(ctx, ref, 3)["what"] and kept == [((ref,), 3)]
    within_cap(ctx, ref, {"cap_bytes": None}, {})
    assert ref.capped is False and give_back_early(ctx, ref, 3) is None, "its last case fitted without a cap"
    ref.capped = True
    assert give_back_early(_Ctx("cpu"), ref, 3) is None


def test_a_timed_arm_taken_while_a_job_holds_the_device_gate_starts_its_own_child_instead_of_waiting(monkeypatch):
    """During a hold the gate lets one background start through per waiting take, whatever its flavour: a timed arm
    (a warm child) must not wait for a warm start held there (it waited the 180 s start timeout on an H100)."""
    pool = spares.Spares("cuda:0", n=0)
    pool._profiles, pool._lean, pool._held = True, 1, True
    cold = _Kid()
    cold.timeable = False  # an untimed child: never a timed arm
    pool._ready = [cold]
    pool._starting, pool._starting_warm = 1, 1  # a warm start held at the device gate
    made = []

    def start_one(warm=True, background=False):
        kid = _Kid()
        kid.warm, kid.unnice = True, lambda: None
        made.append(kid)
        return kid

    monkeypatch.setattr(pool, "_start_one", start_one)
    got = []
    t = threading.Thread(target=lambda: got.append(pool.take("bench")), daemon=True)
    t.start()
    t.join(10)
    assert got and got[0] is made[0] and got[0].warm, "a child of its own, started at once"
    assert pool._ready == [cold], "the untimed spare stays for an untimed job"
