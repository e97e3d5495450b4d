"""What a big shape's benchmark leaves on the device beside the running arm: an idle lean arm gives its cold-cache
flush buffer back with its cache; the runner keeps no cached block of inputs it staged on the host; and where its
device copy of an unstaged shape's inputs beside one turn of lean arms is over the job's cap, that copy goes to the
host before the last arm gets its own; a staged shape's refill-check inputs are made before any arm holds
inputs. Fake children and a CPU flush buffer here; the memory itself is measured on
the GPU by bench/kernelbench_sweep.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fakearms import ArmChild as _Child

from evokernel_mcp.benchmark import arms as arms_mod
from evokernel_mcp.benchmark import flush, sides, timing
from evokernel_mcp.benchmark.blocks import BlockTimer


class _Flusher:
    def __init__(self, log: list):
        self.log, self.buf = log, object()

    def release(self):
        self.log.append("release")
        self.buf = None

    def restore(self):
        self.log.append("restore")
        self.buf = self.buf or object()

    def flush(self):
        assert self.buf is not None, "a flush with no buffer"


def test_a_lean_arm_gives_its_flush_buffer_back_after_each_block_and_makes_it_again_before_the_next(monkeypatch):
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    log: list = []

    def fn(x):
        log.append("call")
        return x + 1

    bt = BlockTimer(fn, [(torch.randn(64),)], timing.TimingOptions(max_time_s=0.1), gpu=False, sample_size=0,
                    flusher=_Flusher(log))
    bt.lean = True
    loaded = SimpleNamespace(arms={"candidate": bt})
    bt.give_back()
    assert log == ["release"] and bt.flusher.buf is None, "an idle lean arm holds no flush buffer"
    log.clear()
    sides.arm_ready(loaded, {"name": "candidate"})
    assert log == ["restore", "call"], "the buffer is made again before the untimed call, off the block"
    sides.arm_block(loaded, {"name": "candidate", "k": 2, "defer": True})
    sides.arm_times(loaded, {"name": "candidate"})
    assert log[-1] == "release" and bt.flusher.buf is None, "gone again once the block's times are out"
    bt.ready()
    bt.park()
    assert log[-1] == "release", "a parked arm holds none either"
    log.clear()
    bt.lean = False
    bt.ready()
    bt.give_back()
    assert "release" not in log, "an arm that is not lean keeps its buffer"


def test_a_released_flush_buffer_comes_back_at_its_size_and_flushes(monkeypatch):
    monkeypatch.setattr(flush, "cache_bytes", lambda device: (1 << 20, 0, "test"))
    f = flush.CacheFlusher("cpu")
    n = f.nbytes
    assert f.buf is not None and f.buf.numel() * 4 == n == flush.MIN_FLUSH_BYTES
    f.release()
    assert f.buf is None
    f.restore()
    assert f.buf is not None and f.buf.numel() * 4 == n and float(f.sink) == n // 4
    kept = f.buf
    f.restore()
    assert f.buf is kept, "restore makes a buffer only where there is none"


def test_a_lean_arms_flush_buffer_is_twice_the_caches_without_the_floor():
    mib = 1 << 20
    assert flush.lean_flush_bytes(50 * mib, 0) == 100 * mib < flush.MIN_FLUSH_BYTES, "an H100's 50 MB L2"
    assert flush.lean_flush_bytes(4 * mib, 256 * mib) == 520 * mib, "an MI300X: L2 and Infinity Cache"
    assert flush.lean_flush_bytes(0, 0) is None, "sizes unknown: the floor stays"


def _interleave(monkeypatch, *, staged: bool, last_from_host: bool):
    log: list = []
    monkeypatch.setattr(arms_mod, "on_host", lambda x: log.append(("runner", "on_host", None)) or
                        [t.clone() for t in x])
    monkeypatch.setattr(arms_mod, "release_cached", lambda *a: log.append(("runner", "release_cached", None)))
    arms = arms_mod.Arms(_Child("candidate", log), _Child("baseline", log), task=None, deadline=1e12, dev="cpu")
    x = torch.randn(1024)
    case = {"inputs": [x], "native": [x.clone()], "init_inputs": [], "state": None}
    opt = {"min_reps": 2, "max_reps": 8, "max_time_s": 0.05}
    arms_mod.interleave(arms, case, [], 0, opt, lambda *a: None, True, None, sample=0, release_inputs=True,
                        staged=staged, last_from_host=last_from_host)
    steps = [(n, op) for n, op, _ in log if op in ("arm_init", "on_host", "release_cached")]
    inits = [r for _, op, r in log if op == "arm_init"]
    return steps, inits, x


def test_an_unstaged_big_shapes_last_arm_gets_its_inputs_from_the_host_after_the_runner_let_its_copy_go(monkeypatch):
    steps, inits, x = _interleave(monkeypatch, staged=False, last_from_host=True)
    assert steps[:4] == [("baseline", "arm_init"), ("runner", "on_host"), ("runner", "release_cached"),
                         ("candidate", "arm_init")], steps
    assert inits[0]["inputs"][0] is x and inits[1]["inputs"][0] is not x, "the first arm's copy device to device"
    steps, inits, x = _interleave(monkeypatch, staged=False, last_from_host=False)
    assert steps[:2] == [("baseline", "arm_init"), ("candidate", "arm_init")], "elsewhere both device to device"
    assert all(r["inputs"][0] is x for r in inits)


def test_a_staged_shape_leaves_no_cached_block_of_the_inputs_in_the_runner(monkeypatch):
    steps, inits, x = _interleave(monkeypatch, staged=True, last_from_host=True)
    assert steps[:4] == [("runner", "on_host"), ("runner", "release_cached"), ("baseline", "arm_init"),
                         ("candidate", "arm_init")], "staged once, before every arm: not again before the last"
    emptied = []
    monkeypatch.setattr(arms_mod, "release_cached", lambda *a: emptied.append(a))

    class Ref:
        courier = None

        def request(self, req, timeout_s, max_bytes, device=None):
            return {"inputs": [torch.zeros(2)]}

    arms = arms_mod.Arms(Ref(), Ref(), task=None, deadline=1e12, dev="cpu")
    arms.inputs(Ref(), {"shape": "s", "seed": 1}, staged=True)
    assert emptied == [()], "a check's staged inputs: the whole cache given back, not trimmed to 512 MiB"


def test_the_runner_moves_its_copy_to_the_host_only_where_one_turn_of_lean_arms_with_it_is_over_the_cap():
    from evokernel_mcp.runtime.devplan import data_cap, last_arm_from_host

    gib = 2**30
    # 41_Max_Pooling_1D: 3 GiB in, 3 GiB out, about 6 GiB of the forward's working memory
    cap = data_cap(6 * gib, 3, 4)
    assert last_arm_from_host(3 * gib, 3 * gib, 2, 6 * gib, cap)
    # an activation: 6 GiB in and out, no working memory: one turn with the runner's copy is within its cap
    assert not last_arm_from_host(6 * gib, 6 * gib, 2, 0, data_cap(12 * gib, 3, 4))
    assert not last_arm_from_host(3 * gib, 3 * gib, 2, 6 * gib, None), "no cap (a shape of 1 GB or less)"


def test_a_checks_inputs_count_beside_the_references_forward_where_the_runner_would_hold_them():
    """41_Max_Pooling_1D's checks: the runner's 3 GiB of inputs and the candidate's 3 GiB of outputs beside a
    forward of 3 + 3 + 6 GiB are over its cap, so its checks go through the host (host and staged); an
    activation's (6 GiB in and out, no working memory) stay on the device."""
    from evokernel_mcp.benchmark.runner_side import _on_host

    gib = 2**30
    assert _on_host(True, 3 * gib, 3 * gib, {"workspace_bytes": 6 * gib}) == (True, True)
    assert _on_host(True, 6 * gib, 6 * gib, {"workspace_bytes": 0}) == (False, False)
    assert _on_host(False, 3 * gib, 3 * gib, {"workspace_bytes": 6 * gib}) == (False, False), "a small shape"


def test_a_staged_shapes_refill_check_inputs_are_made_before_any_arm_holds_its_inputs(monkeypatch):
    """Made after timing, the reference's export of them (a second device copy while it sends) came beside the
    candidate's timed storage: 3.2x a reduction's own bytes on an H100. Meta tensors stand for the 8 GiB."""
    from evokernel_mcp.benchmark import runner_side as rs

    log: list = []
    big = [torch.empty(128, 4096, 4095, device="meta")]  # 8 GiB of inputs, a 2 MiB output: staged
    out = torch.empty(128, 4095, device="meta")

    class Arms:
        task, dev, cand, base_is_reference = SimpleNamespace(), "cuda", "cand", True

        def ask(self, child, req, max_bytes=0, handed=False, device=None):
            log.append((child, req["op"], req.get("seed")))
            if req["op"] == "bench_checks":
                log.append(("handed", "refill" if "refill" in req else "fresh", handed))
            if req["op"] == "case" and not req.get("inputs_only"):
                return {"inputs": big, "native": out, "init_inputs": [], "state": {}, "work": None}
            if req["op"] == "case":
                return {"inputs": big}
            if req["op"] == "expected":
                return {"native": out, "hi": None, "arg_reductions": {}}
            return {"refill": out, "fresh": out, "output_dtype": "float32"}

        def inputs(self, ref, req, staged):
            log.append(("inputs", req["seed"], staged))
            return big

    def interleave(*a, **kw):
        log.append(("interleave",))
        return {"rounds": {}, "samples": []}
    monkeypatch.setattr(rs, "interleave", interleave)
    monkeypatch.setattr(rs, "_check", lambda *a, **kw: {"passed": True})
    monkeypatch.setattr(rs, "_probe_bar", lambda *a, **kw: None)
    monkeypatch.setattr(rs, "on_host", lambda x: (log.append(("on_host", x is big)), x)[1])
    rs._bench_shape(Arms(), "ref", "s", 5, {}, lambda *a: None, True, None)
    # the runner's copy of the case's inputs goes to the host before the refill pool is made (beside it, the pool's
    # copy and its export in the reference were three copies of 8 GiB), and the pool's waits there too
    pool = ("inputs", 6, True)
    assert pool in log and log.index(("on_host", True)) < log.index(pool), log
    made = [e for e in log if e[0] == "inputs"]
    refill = ("inputs", 5 + rs.REFILL_SEED_OFFSET, True)
    assert made.count(refill) == 1 and log.index(refill) < log.index(("interleave",)), log
    assert ("inputs", 5 + rs.CHECK_SEED_OFFSET, True) in log[log.index(("interleave",)):], "fresh inputs after timing"
    # an 8 GiB reduction's refill values are handed over (as device copies: within its cap, and faster)
    assert [e for e in log if e[0] == "handed"][:2] == [("handed", "refill", True), ("handed", "fresh", True)]


def test_a_staged_shapes_refill_values_go_in_host_memory_where_a_device_copy_would_be_over_its_cap(monkeypatch):
    """6_Matmul_with_large_K_dimension_ (1 GiB of inputs, a 256 KiB output): a device copy of its refill values beside
    the candidate's 1 GiB of timed storage took it to 3.0x its own bytes on an H100. They go in host memory, which the
    candidate copies into that storage in place; the fresh inputs, which need a device copy of their own, are handed
    over. Meta tensors stand for the tensors."""
    from evokernel_mcp.benchmark import runner_side as rs

    log: list = []
    a, b = torch.empty(256, 524288, device="meta"), torch.empty(524288, 256, device="meta")
    out = torch.empty(256, 256, device="meta")

    class Arms:
        task, dev, cand, base_is_reference = SimpleNamespace(), "cuda", "cand", True

        def ask(self, child, req, max_bytes=0, handed=False, device=None):
            if req["op"] == "bench_checks":
                log.append(("refill" if "refill" in req else "fresh", handed))
            if req["op"] == "case":
                return {"inputs": [a, b], "native": out, "init_inputs": [], "state": {}, "work": None}
            if req["op"] == "expected":
                return {"native": out, "hi": None, "arg_reductions": {}}
            return {"refill": out, "fresh": out, "output_dtype": "float32"}

        def inputs(self, ref, req, staged):
            return [a, b]

    monkeypatch.setattr(rs, "interleave", lambda *a, **kw: {"rounds": {}, "samples": []})
    monkeypatch.setattr(rs, "_check", lambda *a, **kw: {"passed": True})
    monkeypatch.setattr(rs, "_probe_bar", lambda *a, **kw: None)
    monkeypatch.setattr(rs, "on_host", lambda x: x)
    rs._bench_shape(Arms(), "ref", "s", 5, {}, lambda *a: None, True, None)
    assert log[:2] == [("refill", False), ("fresh", True)], log


def test_refill_values_are_copied_into_the_timed_storage_one_tensor_at_a_time():
    """The candidate's refill check: each value copied into its timed input tensor in place (same storage), and let
    go once copied; a value of another shape leaves its tensor as it was."""
    from evokernel_mcp.benchmark.sides import _refill_in_place

    target = [torch.zeros(4, 3), torch.zeros(2), 7]
    ptrs = [t.data_ptr() for t in target[:2]]
    values = [torch.ones(4, 3), torch.ones(5), 8]
    _refill_in_place(target, values)
    assert values == [None, None, None]
    assert torch.equal(target[0], torch.ones(4, 3)) and torch.equal(target[1], torch.zeros(2)) and target[2] == 7
    assert [t.data_ptr() for t in target[:2]] == ptrs


def test_where_every_shape_is_capped_the_first_case_is_made_before_any_arm_process_and_no_control_starts(monkeypatch):
    """Beside two idle arms and a control arm being stopped, a 1-2 GB shape's case took 3.3-3.9x its own bytes on an
    H100 (their contexts 0.8x of it): then the arms' processes are taken after it. Elsewhere the order stays."""
    import contextlib

    from evokernel_mcp.benchmark import clocks
    from evokernel_mcp.benchmark import runner_side as rs
    from evokernel_mcp.benchmark.messages import BenchmarkRequest

    log: list = []

    class Kid:
        def output(self):
            return "", ""

    class Spares:
        def reference(self, task, timeout_s):
            return "ref"

        def take(self, purpose):
            log.append("take")
            return Kid()

        def retire(self, c, big=False):
            pass

        def isolation(self):
            return {}

        def wait_retired_if_tight(self):
            return 0.0

        def wait_retired(self):
            return 0.0

        def quiet(self, wait=True):
            return contextlib.nullcontext()

    class Clocks:
        def __init__(self, *a):
            pass

        def before(self):
            return None

        after = final = stale = before

    import evokernel_mcp.benchmark.worker_info as wi

    monkeypatch.setattr(wi, "device_info", lambda: {"backend": "cuda"})
    monkeypatch.setattr(wi, "ceilings_for", lambda *a: None)
    monkeypatch.setattr(clocks, "ShapeClocks", Clocks)
    monkeypatch.setattr(rs, "tensor_device", lambda ctx: "cuda")
    monkeypatch.setattr(rs, "load_candidate", lambda *a: log.append("load"))
    monkeypatch.setattr(rs, "_baseline_child", lambda *a: (log.append("baseline"), Kid())[1])
    given = []  # the plan each early case was made with: the one every_shape_capped asked, not asked again
    monkeypatch.setattr(rs, "make_case", lambda *a: (log.append("case"), given.append(a[-1]),
                                                     {"case": {}, "room": {}, "via_host": False})[2])
    monkeypatch.setattr(rs, "_bench_shape", lambda arms, *a: (log.append(("shape", a[-1] is not None,
                                                                          arms.ctrl is not None)), {})[1])
    monkeypatch.setattr(rs, "release_host", lambda: None)
    ctx = SimpleNamespace(spares=Spares())
    req = BenchmarkRequest.model_construct(task=SimpleNamespace(), candidate="c", baseline="pytorch", control=True,
                                           shapes=["full"], seed=1, options={}, budget_s=60, ceilings=False,
                                           confirm=False)
    for capped, want in ((True, ["case", "take", "load", "baseline", ("shape", True, False)]),
                         (False, ["take", "load", "baseline", "baseline", ("shape", False, True)])):
        log.clear()
        monkeypatch.setattr(rs, "every_shape_capped", lambda *a, c=capped: [{"cap_bytes": 1}] if c else None)
        out = rs._benchmark(ctx, req, lambda *a: None)
        assert log == want and "error" not in out, (capped, log, out.get("error"))
    assert given == [{"cap_bytes": 1}]


@pytest.mark.parametrize("beside", [False, True])
def test_the_probe_checks_expected_outputs_wait_on_the_host_where_the_candidates_reply_beside_them_passes_the_cap(
        beside, monkeypatch):
    """benchmark/runner_side._probe_check asks the reference first, then the candidate: where the candidate's reply
    (its outputs and their export) beside the runner's device copy of the expected outputs would pass the job's cap
    (devplan.outputs_on_host with reply_beside), that copy goes to the host before the candidate is asked; elsewhere
    it stays on the device."""
    from evokernel_mcp.benchmark import runner_side as rs

    order, asked_beside = [], []
    monkeypatch.setattr(rs, "outputs_on_host", lambda i, o, f, w, reply_beside: asked_beside.append(reply_beside)
                        or beside)
    monkeypatch.setattr(rs, "on_host", lambda t: order.append("to host") or t)
    monkeypatch.setattr(rs, "release_cached", lambda: None)
    monkeypatch.setattr(rs, "expected", lambda *a: order.append("expected") or {"native": torch.ones(4)})
    monkeypatch.setattr(rs, "_check", lambda *a, **kw: {"passed": True})

    class Arms:
        dev, task, cand = "cuda", None, object()

        def inputs(self, ref, req, staged):
            return [torch.zeros(4)]

        def ask(self, child, req, **kw):
            order.append("candidate")
            return {"fresh": torch.ones(4)}

    out = rs._probe_check(Arms(), None, "full", 1, {"init_inputs": [], "state": {}}, False, 1 << 20)
    assert out == {"passed": True} and asked_beside == [True]
    assert order == (["expected", "to host", "candidate"] if beside else ["expected", "candidate"])


@pytest.mark.parametrize("shape", ["tall", "activation"])
def test_a_checks_first_reply_waits_on_the_host_where_the_second_beside_it_would_pass_the_cap(shape, monkeypatch):
    """7_Matmul_with_small_K_dimension_ (8 MiB of inputs, 4 GiB of outputs): in its refill and fresh checks the
    candidate's outputs went beside the reference's reply and its export (three copies of 4 GiB, 3.4x its own bytes
    on an H200), so they wait on the host before the reference is asked; in its probe check the reference's expected
    outputs wait there before the candidate is asked. An activation's 6 GiB in and out keep the device path. Meta
    tensors stand for the tensors."""
    from evokernel_mcp.benchmark import runner_side as rs

    log: list = []
    if shape == "tall":
        ins, out = [torch.empty(32768, 64, device="meta"), torch.empty(64, 32768, device="meta")], \
            torch.empty(32768, 32768, device="meta")
    else:
        ins, out = [torch.empty(16, 100663296, device="meta")], torch.empty(16, 100663296, device="meta")

    class Arms:
        task, dev, cand, base_is_reference = SimpleNamespace(), "cuda", "cand", True

        def ask(self, child, req, max_bytes=0, handed=False, device=None):
            if req["op"] in ("bench_checks", "expected"):
                log.append((child, req["op"]))
            if req["op"] == "case":
                return {"inputs": ins, "native": out, "init_inputs": [], "state": {}, "work": None}
            if req["op"] == "expected":
                return {"native": out, "hi": None, "arg_reductions": {}}
            return {"refill": out, "fresh": out, "output_dtype": "float32"}

        def inputs(self, ref, req, staged):
            return ins

    monkeypatch.setattr(rs, "interleave", lambda *a, **kw: {"rounds": {}, "samples": []})
    monkeypatch.setattr(rs, "_check", lambda *a, **kw: {"passed": True})
    monkeypatch.setattr(rs, "_probe_bar", lambda *a, **kw: None)
    monkeypatch.setattr(rs, "on_host", lambda x: (log.append("on_host"), x)[1])
    rs._bench_shape(Arms(), "ref", "s", 5, {}, lambda *a: None, True, None)
    checks = [("cand", "bench_checks"), ("ref", "expected")]
    if shape == "tall":  # refill, fresh: candidate, host, reference; probe: reference, host, candidate
        assert log == [checks[0], "on_host", checks[1]] * 2 + [checks[1], "on_host", checks[0]], log
    else:
        assert log == checks * 2 + checks[::-1], log
