"""Server-side assembly of a benchmark result from raw runner times (no runner, no GPU), the host timing
loop, and the refusal of impossible requests."""

from __future__ import annotations

import random

import pytest

from evokernel_mcp.benchmark import api, flush, results, timing
from evokernel_mcp.benchmark import arms as arms_mod
from evokernel_mcp.benchmark.models import Ceilings
from evokernel_mcp.errors import BadInput
from evokernel_mcp.runtime.protocol import WorkerReply
from evokernel_mcp.tasks import load_task

H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "torch": "2.11.0", "triton": "3.6.0",
        "cuda": "13.0", "python": "3.12.3"}
OK = {"passed": True, "mismatches": 0}


def _run(median, n=200, spread=0.01, seed=0):
    rng = random.Random(seed)
    return {"times_ms": [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)], "method": "device events",
            "host_timing": False, "warmup_calls": 3, "copies": 1, "stop_reason": "target_rel_ci"}


def _raw(shape, cand_ms, base_ms, check_timed=OK, check_fresh=OK):
    return {"shape": shape, "candidate": _run(cand_ms), "baseline": _run(base_ms, seed=1), "check_timed": check_timed,
            "check_fresh": check_fresh, "output_dtype": "bfloat16"}


def test_conv3d_full_result_on_h200_with_ceilings():
    task = load_task("conv3d_depthwise")
    ceil = Ceilings(device="NVIDIA H200", copy_gbs=4300.0, matmul_tflops={"bf16": 788.0})
    raw = _raw("full", 0.5, 1.0)
    sr = results.shape_result(raw, task, H200, ceil, "matrix", 0.95)
    ss = task.shape_set("full")
    assert sr.speedup == pytest.approx(2.0, rel=0.02) and not sr.noise
    assert sr.speedup_ci[0] < sr.speedup < sr.speedup_ci[1]
    assert sr.achieved_gbs == pytest.approx(ss.bytes / (sr.candidate.median_ms * 1e-3) / 1e9)
    r = sr.roofline
    assert r.fraction_of_peak_bandwidth == pytest.approx(r.achieved_gbs / 4800.0)
    assert r.fraction_of_measured_bandwidth == pytest.approx(r.achieved_gbs / 4300.0)
    assert r.roofline_ms == pytest.approx(max(ss.bytes / 4300e9, ss.flops / 788e12) * 1e3)
    assert sr.fraction_of_roofline == pytest.approx(sr.roofline_ms / sr.candidate.median_ms)
    assert sr.correct_after_timing and sr.flags == []


def test_flags_big_speedup_and_wrong_output():
    task = load_task("conv3d_depthwise")
    bad = {"passed": False, "mismatches": 12, "note": "first mismatch at [0, 1]"}
    sr = results.shape_result(_raw("full", 0.05, 1.0, check_fresh=bad), task, H200, None, "vector", 0.95)
    assert sr.valid is False and sr.invalid_reason == "wrong_output_after_timing"
    assert sr.speedup is None and sr.candidate is None  # no number a search loop could read
    assert sr.raw_invalid["speedup"] > 10 and "raw_invalid" not in sr.model_dump()
    assert any("> 10x" in f for f in sr.flags)
    assert any("fresh inputs does NOT match" in f for f in sr.flags)
    assert sr.correct_after_timing is False


def test_noise_verdict_when_intervals_overlap():
    task = load_task("vector_add")
    sr = results.shape_result(_raw("full", 1.0, 1.001), task, H200, None, "vector", 0.95)
    assert sr.noise is True


def test_result_from_reply_carries_device_clocks_versions_provenance():
    task = load_task("vector_add")
    reply = WorkerReply(ok=True, device="cuda:0", result={
        "device_info": H200, "shapes": [_raw("full", 1.0, 1.2)],
        "clocks_before": {"sm_mhz": 1980.0, "mem_mhz": 3201.0, "source": "nvidia-smi"},
        "clocks_after": {"sm_mhz": 1965.0, "mem_mhz": 3201.0, "source": "nvidia-smi"},
        "ceilings": Ceilings(device="NVIDIA H200", driver="580.159.04", copy_gbs=4300.0).model_dump(mode="json")})
    res = results.result_from_reply(reply, task, "vector", 0.95)
    assert res.state == "done" and res.error is None and res.device == "cuda:0: NVIDIA H200"
    assert res.clocks.before.sm_mhz == 1980.0 and res.clocks.after.sm_mhz == 1965.0
    assert res.versions["torch"] == "2.11.0" and res.versions["driver"] == "580.159.04"
    sources = " ".join(p.source for p in res.provenance)
    assert "arch.yaml#sm_90.products.H200_SXM" in sources and "task.yaml" in sources


def test_result_from_failed_reply_reports_error():
    from evokernel_mcp.models import ErrorInfo

    reply = WorkerReply(ok=False, device="cpu", error=ErrorInfo(kind="timeout", message="killed"))
    res = results.result_from_reply(reply, load_task("vector_add"), "matrix", 0.95)
    assert res.state == "failed" and res.error.kind == "timeout" and res.results == []


@pytest.mark.parametrize("kw,match", [
    ({"min_reps": 0}, "min_reps"), ({"max_time_s": -1.0}, "max_time_s"), ({"max_time_s": 0.0}, "max_time_s"),
    ({"target_rel_ci": 0.0}, "target_rel_ci"), ({"min_reps": 10, "max_reps": 5}, "max_reps"),
    ({"warmup_ms": -1.0}, "warmup_ms"),
])
def test_impossible_timing_options_refused(kw, match):
    with pytest.raises(BadInput, match=match):
        timing.TimingOptions(**kw)


def test_payload_refuses_unknown_shape_and_bad_sources():
    task = load_task("vector_add")
    opt = timing.TimingOptions()
    good = "def run(x, y):\n    return x + y\n"
    with pytest.raises(BadInput, match="no shape set"):
        api.build_payload(task, good, "pytorch", ["huge"], opt, 0)
    with pytest.raises(BadInput, match="candidate"):
        api.build_payload(task, "def nope(:\n", "pytorch", None, opt, 0)
    with pytest.raises(BadInput, match="baseline"):
        api.build_payload(task, good, "x = 1\n", None, opt, 0)
    p = api.build_payload(task, good, "pytorch", ["full", "small"], opt, 0)
    assert p["shapes"] == ["small", "full"] and p["options"]["min_reps"] == opt.min_reps


def test_host_timing_loop_reps_and_stop_reasons():
    calls = []
    run = timing.time_host(lambda a: calls.append(a), [(1,), (2,)], timing.TimingOptions(min_reps=7, max_time_s=1e-6,
                                                                                        warmup_ms=0))
    assert len(run.times_ms) == 7 and run.stop_reason == "max_time_s" and run.host_timing
    assert set(calls) == {1, 2}  # inputs rotated
    run = timing.time_host(lambda: None, [()], timing.TimingOptions(min_reps=3, max_reps=3, warmup_ms=0))
    assert len(run.times_ms) == 3 and run.stop_reason == "max_reps"


def test_copies_for_rotation():
    assert flush.copies_for(1 << 30, 60 << 20) == 1  # big inputs: no copies
    assert flush.copies_for(10 << 20, 60 << 20) == 12  # 2 x 60 MiB / 10 MiB
    assert flush.copies_for(1 << 10, 60 << 20) == flush.MAX_COPIES
    assert flush.copies_for(10 << 20, 60 << 20, memory_free=40 << 20) == 2


def test_every_arm_gets_a_fresh_child_of_its_own():
    """The baseline is never the cached reference process: "pytorch" loads the reference afresh, a baseline
    source loads in a fresh child as a candidate does, and the control arm is a further child."""
    import time

    from evokernel_mcp.benchmark import runner_side

    class Kid:
        def __init__(self, n):
            self.n, self.loaded = n, []

        def load_source(self, source, req, timeout_s):
            self.loaded.append(req["role"])

        def discard(self):
            pass

    class Spares:
        def __init__(self):
            self.made = []

        def fresh_reference(self, task, timeout_s, purpose):
            assert purpose == "bench"  # a timed arm: a child with the profiler warm
            self.made.append(Kid(f"ref{len(self.made)}"))
            return self.made[-1]

        def take(self, purpose):
            assert purpose == "bench"
            self.made.append(Kid(f"kid{len(self.made)}"))
            return self.made[-1]

    class Ctx:
        spares = Spares()

    task, deadline = load_task("vector_add"), time.monotonic() + 60
    base = runner_side._baseline_child(Ctx, "pytorch", task, deadline)
    ctrl = runner_side._baseline_child(Ctx, "pytorch", task, deadline)
    assert base.n == "ref0" and ctrl.n == "ref1"  # two fresh reference processes, not the cached one
    src = runner_side._baseline_child(Ctx, "def run(x, y):\n    return x + y\n", task, deadline)
    assert src.n == "kid2" and src.loaded == ["candidate"]
    arms = arms_mod.Arms("cand", base, task, deadline, ctrl)
    kids = arms.children()
    assert list(kids) == ["baseline", "candidate", "control"] and len({id(k) for k in kids.values()}) == 3
    assert arms_mod.Arms("cand", base, task, deadline).control is False


def test_clock_reads_are_shared_between_adjacent_shapes_but_never_across_device_work():
    from evokernel_mcp.benchmark.clocks import ShapeClocks
    from evokernel_mcp.benchmark.models import Clocks

    reads = []

    def read(backend, index):
        reads.append(backend)
        return Clocks(sm_mhz=1000.0 + len(reads), mem_mhz=3201.0, source="nvidia-smi")

    c = ShapeClocks(read, {"backend": "cuda"})
    b0 = c.before()
    a0 = c.after()
    b1 = c.before()  # shape 2 starts right after shape 1's after reading: the same reading
    assert (b0["sm_mhz"], a0["sm_mhz"], b1["sm_mhz"]) == (1001.0, 1002.0, 1002.0) and len(reads) == 2
    assert c.final()["sm_mhz"] == 1003.0  # shape 2 ran (or failed) after its before reading: read again
    c.after()
    c.stale()  # a confirm re-timed on the device
    assert c.final()["sm_mhz"] == 1005.0 and len(reads) == 5
    c.after()
    assert c.final()["sm_mhz"] == 1006.0 and len(reads) == 6  # nothing ran since: the job's after is that reading
    assert ShapeClocks(read, {"backend": "none"}).before() is None and len(reads) == 6


def test_driver_version_is_read_once_per_process_replay_nvidia_smi(tmp_path, monkeypatch):
    """A replay executable stands in for nvidia-smi (it prints the driver line of the H200 host's and counts
    its runs): every benchmark asked for the driver version (the ceilings' cache key), one nvidia-smi each."""
    from evokernel_mcp.benchmark import clocks

    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho run >> {tmp_path}/runs\necho 580.159.04\n")
    exe.chmod(0o755)
    monkeypatch.setenv("NVIDIA_SMI", str(exe))  # found as every tool finds it (executables.py)
    monkeypatch.setattr(clocks, "_DRIVER", {})
    assert [clocks.driver_version("cuda") for _ in range(3)] == ["580.159.04"] * 3
    assert (tmp_path / "runs").read_text().count("run") == 1


class _ShapeChild:
    """A child for one benchmark shape: records (name, op) in `asked` and answers each op with the case given."""

    def __init__(self, name: str, asked: list, case: dict, plan: dict | None = None):
        self.name, self.asked, self.case, self.plan = name, asked, case, plan

    def request(self, req, **kw):
        import torch

        self.asked.append((self.name, req["op"]))
        if req["op"] == "expected":
            self.asked.append((self.name, f"expected to {kw.get('device')}"))
        if req["op"] == "plan":
            return self.plan or {"plan": None}
        if req["op"] == "case":
            return dict(self.case)
        if req["op"] == "bench_checks":
            return {k: torch.ones(8) for k in ("refill", "fresh") if k in req}
        if req["op"] == "settled":
            return {"plain_tensor": True, "pending": False}
        return {"native": torch.ones(8), "outputs": torch.ones(8)}


def test_nothing_runs_in_the_candidates_process_before_its_timing_and_the_settled_check_comes_after(monkeypatch):
    """The order of what one shape asks of the candidate's child: its timing first (a call of the candidate before
    it changed that arm's times on an H100), then the post-timing checks, the settled-output check among them."""
    import torch

    from evokernel_mcp.benchmark import runner_side

    asked: list[tuple[str, str]] = []
    case = {"inputs": [torch.ones(8), torch.ones(8)], "native": torch.ones(8), "init_inputs": [], "state": {}}

    def Child(name: str):  # noqa: N802 - a class's stand-in
        return _ShapeChild(name, asked, case)

    def timed(arms, *_a, **_kw):
        asked.append(("cand", "TIMING"))
        return {"rounds": {}, "runner_bound": None, "samples": []}

    monkeypatch.setattr(runner_side, "interleave", timed)
    monkeypatch.setattr(runner_side, "_probe_bar", lambda *a, **kw: None)
    monkeypatch.setattr(runner_side, "_check", lambda *a, **kw: {"passed": True})
    monkeypatch.setattr(runner_side, "_probe_check", lambda *a, **kw: {"passed": True})
    task = load_task("vector_add")
    arms = arms_mod.Arms(Child("cand"), Child("base"), task, 1e12)
    out = runner_side._bench_shape(arms, Child("ref"), "small", 0, {}, lambda *a: None, False)
    mine = [op for who, op in asked if who == "cand"]
    assert mine[0] == "TIMING", mine
    assert mine.index("settled") > mine.index("TIMING") and out["settled"]["plain_tensor"] is True


def test_a_big_shape_against_pytorch_stops_the_cached_reference_before_timing_and_the_baseline_answers_the_checks(
        monkeypatch):
    """A shape of more than 1 GB of its own (planned within the job's memory cap) against PyTorch: the cached
    reference makes the case, the refill pool and the probe bar, then its process stops before any arm gets its
    inputs (one CUDA context fewer while the arms hold theirs); every post-timing check's inputs and expected outputs
    come from the baseline arm's process after its timing. A baseline source cannot answer for the reference: there
    the cached reference stays."""
    import torch

    from evokernel_mcp.benchmark import runner_side
    from evokernel_mcp.runtime.devplan import BenchPlan
    from evokernel_mcp.verify import runner_side as verify_side

    asked: list[tuple[str, str]] = []
    big = torch.empty(300_000_000, device="meta")  # 1.2 GB of inputs and of outputs: over the cap's line
    case = {"inputs": [big], "native": big, "init_inputs": [], "state": {}}
    plan = {"plan": {"cap_bytes": 3 << 30, "needed_bytes": 2 << 30}}

    def Child(name: str):  # noqa: N802 - a class's stand-in
        return _ShapeChild(name, asked, case, plan)

    dropped: list[str] = []

    class Spares:
        def drop_reference(self, child):
            dropped.append(child.name)
            asked.append((child.name, "STOPPED"))

        def retire(self, child, big=False):
            asked.append((child.name, "RETIRED"))

        def wait_retired(self):
            asked.append(("runner", "WAITED"))

    class Ctx:
        spares = Spares()

    def room(ctx, arms, ref, case, state, n_pool, sample, can_park=False, hand_over=False):
        asked.append(("runner", f"PLAN hand_over={hand_over}"))
        return BenchPlan(parts={}, needed_bytes=0, free_bytes=1, control=False, refill_sets=1, sample_size=0)

    def timed(arms, *_a, **_kw):
        asked.append(("cand", "TIMING"))
        return {"rounds": {}, "runner_bound": None, "samples": []}

    monkeypatch.setattr(runner_side, "interleave", timed)
    monkeypatch.setattr(runner_side, "room_for_arms", room)
    monkeypatch.setattr(runner_side, "_probe_bar", lambda arms, ref, *a, **kw: asked.append((ref.name, "BAR")))
    monkeypatch.setattr(runner_side, "_check", lambda *a, **kw: {"passed": True})
    monkeypatch.setattr(verify_side, "within_cap", lambda *a, **kw: None)
    task = load_task("vector_add")

    arms = arms_mod.Arms(Child("cand"), Child("base"), task, 1e12, Child("ctrl"), base_is_reference=True)
    out = runner_side._bench_shape(arms, Child("ref"), "small", 0, {}, lambda *a: None, True, Ctx())
    assert dropped == ["ref"] and arms.reference_gone, "the cached reference stopped"
    assert asked.index(("ctrl", "RETIRED")) < asked.index(("runner", "WAITED")) < asked.index(("ref", "case")), \
        "a capped shape's control arm is gone before the reference's forward makes the case"
    assert arms.ctrl is None and any("control arm left out" in n for n in out["memory_notes"])
    stop, timing = asked.index(("ref", "STOPPED")), asked.index(("cand", "TIMING"))
    assert ("runner", "PLAN hand_over=True") in asked[:stop] and ("ref", "BAR") in asked[:stop]
    assert stop < timing, "stopped before the arms get their inputs"
    assert all(who != "ref" for who, _ in asked[stop + 1:]), "nothing asked of the stopped reference"
    after = [op for who, op in asked[timing:] if who == "base"]
    assert after.count("case") == 3 and "expected" in after, "the checks' inputs and expected outputs: the baseline's"
    assert any("cached reference process stopped" in n for n in out["memory_notes"])

    asked.clear()
    dropped.clear()
    arms = arms_mod.Arms(Child("cand"), Child("base"), task, 1e12, base_is_reference=False)  # a baseline source
    runner_side._bench_shape(arms, Child("ref"), "small", 0, {}, lambda *a: None, True, Ctx())
    assert dropped == [] and not arms.reference_gone and ("runner", "PLAN hand_over=False") in asked
    assert not any(who == "base" for who, _ in asked), "a baseline source is never asked for the reference's outputs"


@pytest.mark.parametrize(("in_mb", "out_mb", "on_host"), [(50, 980, True), (2000, 2000, False), (100, 300, False)])
def test_a_capped_shapes_checks_take_the_references_outputs_to_the_host_where_a_device_copy_passes_the_cap(
        monkeypatch, in_mb, out_mb, on_host):
    """A shape of 1-2 GB whose outputs are most of its bytes (a convolution's: 50 MB in, 980 MB out): the reference's
    outputs for every post-timing check arrive in host memory and are judged there block by block, so the runner never
    holds them beside the candidate's on the device (54_conv_standard_3D's runner held 3.3 GB beyond its context at
    the checks on an H100), and the candidate's outputs and each check's inputs wait on the host while the reference
    runs its forward. A shape whose two output copies fit its cap, or a small one, keeps the device copy. A big
    shape's every check judges in lean blocks (the probe check's default blocks were 1 GiB of float64)."""
    import torch

    from evokernel_mcp.benchmark import runner_side
    from evokernel_mcp.runtime.devplan import BenchPlan
    from evokernel_mcp.verify import runner_side as verify_side
    from evokernel_mcp.verify.memory import LEAN_CHUNK

    asked: list[tuple[str, str]] = []
    case = {"inputs": [torch.empty(in_mb << 18, device="meta")], "native": torch.empty(out_mb << 18, device="meta"),
            "init_inputs": [], "state": {}}
    judged: list[bool] = []

    class Ctx:
        class spares:  # noqa: N801 - a stand-in's attribute
            drop_reference = retire = staticmethod(lambda child, big=False: None)
            wait_retired = staticmethod(lambda: None)

    def room(*_a, **_kw):
        return BenchPlan(parts={}, needed_bytes=0, free_bytes=1, control=False, refill_sets=0, sample_size=0)

    monkeypatch.setattr(runner_side, "interleave", lambda *a, **kw: {"rounds": {}, "runner_bound": None, "samples": []})
    monkeypatch.setattr(runner_side, "room_for_arms", room)
    monkeypatch.setattr(runner_side, "_probe_bar", lambda *a, **kw: None)
    staged: list = []  # what waits on the host (the stand-in's tensors are meta: recorded, not copied)
    monkeypatch.setattr(runner_side, "on_host", lambda x: staged.append("got") or x)
    monkeypatch.setattr(arms_mod, "on_host", lambda x: staged.append("inputs") or x)
    chunks: list = []
    monkeypatch.setattr(runner_side, "_check", lambda *a, **kw: chunks.append(kw.get("chunk")) or
                        judged.append(kw.get("ref_in_place")) or {"passed": 1})
    monkeypatch.setattr(verify_side, "within_cap", lambda *a, **kw: None)
    task = load_task("vector_add")
    arms = arms_mod.Arms(_ShapeChild("cand", asked, case), _ShapeChild("base", asked, case), task, 1e12)
    runner_side._bench_shape(arms, _ShapeChild("ref", asked, case), "small", 0, {}, lambda *a: None, True, Ctx())
    where = [op for _, op in asked if op.startswith("expected to")]
    assert len(where) == 3 and len(judged) == 3, "refill, fresh and probe checks"
    assert set(where) == {"expected to cpu" if on_host else "expected to None"} and set(judged) == {on_host}
    big = in_mb + out_mb > 1000
    # runner_side's: the case's inputs (before the refill pool is made) and the two checks' outputs
    assert (staged.count("got"), staged.count("inputs")) == ((3, 3) if on_host else (0, 0)), \
        "a host shape is staged too: the candidate's outputs of a check wait on the host while the reference runs"
    assert set(chunks) == {LEAN_CHUNK if big else None}, "a big shape's every check judges in lean blocks (probe too)"
