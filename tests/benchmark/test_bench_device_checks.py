"""The GPU path's check of every timed repetition, with a fake device (no GPU): each repetition's output is
reduced to chunk sums behind a separator after its end event, the activity clock leaves those reductions out
of every repetition's span, the runner knows each repetition's input content from the refills between blocks,
and a candidate that skips work on the repetitions it guesses are unchecked fails."""

from __future__ import annotations

import sys

import pytest
import torch
from fakegpu import FakeGPU

from evokernel_mcp.benchmark import activity, probes, settle, timing
from evokernel_mcp.benchmark.blocks import BlockTimer
from evokernel_mcp.tasks import load_task

TASK = load_task("vector_add")
STREAM = 7


@pytest.fixture
def dev(monkeypatch):
    d = FakeGPU(flush_ms=2.0, sleep_ms=0.001, stream=STREAM, nbytes=1 << 20).install(monkeypatch)
    take = probes.Prober.take

    def take_on_device(self, out, g):  # the harness's reduction: device work on the timed stream
        d.run("reduce_kernel<sum>", 1.0)  # a float32 sum: the flush's kernel name
        take(self, out, g)
    monkeypatch.setattr(probes.Prober, "take", take_on_device)
    end = probes.Prober.end

    def end_on_device(self):  # gathering the block's rows: a stack and a copy to the host, as on a GPU
        d.run("CatArrayBatchedCopy", 0.01)
        d.run("Memcpy DtoH (Device -> Pageable)", 0.01)
        return end(self)
    monkeypatch.setattr(probes.Prober, "end", end_on_device)
    return d


def _skipping(dev: FakeGPU):
    """Reads the timing loop's position off the stack and computes a quarter of the output on every repetition
    but a block's last; full work outside the loop (as bench/candidates_ab/campaign's forge does)."""
    def fn(a, b):
        f, skip = sys._getframe(1), False
        while f is not None:
            if f.f_code.co_name == "timed_batch":
                i, n = f.f_locals.get("i"), f.f_locals.get("n")
                skip = isinstance(i, int) and isinstance(n, int) and i < n - 1
                break
            f = f.f_back
        dev.run("add_kernel", 0.1 if skip else 0.5)
        if not skip:
            return a + b
        out = torch.zeros_like(a)
        out[: a.numel() // 4] = a[: a.numel() // 4] + b[: a.numel() // 4]
        return out
    return fn


def _honest(dev: FakeGPU):
    def fn(a, b):
        dev.run("add_kernel", 0.5)
        return a + b
    return fn


def _stale(dev: FakeGPU):
    """Computes a quarter of the rows into fresh memory and leaves the rest as the memory held: the previous
    repetition's output where the allocator hands the freed block back (as on a GPU), on every repetition but a
    block's last. Right whenever two repetitions in a row see the same input values."""
    held = {}

    def fn(a, b):
        f, skip = sys._getframe(1), False
        while f is not None:
            if f.f_code.co_name == "timed_batch":
                skip = f.f_locals.get("i", 0) < f.f_locals.get("n", 0) - 1
                break
            f = f.f_back
        dev.run("add_kernel", 0.1 if skip else 0.5)
        if not skip or "out" not in held:
            held["out"] = (a + b).clone()
            return held["out"].clone()
        out = held["out"].clone()  # the freed block's old values
        q = a.numel() // 4
        out[:q] = a[:q] + b[:q]
        return out
    return fn


def _run(dev, fn, timer="auto", blocks=(3, 5, 4), n_sets=2):
    g = torch.Generator().manual_seed(0)
    contents = [[torch.randn(2000, generator=g), torch.randn(2000, generator=g)] for _ in range(3)]
    expected = ({"native": a + b, "hi": a.double() + b.double(), "arg_reductions": {}} for a, b in contents)
    bar = probes.ProbeBar(TASK, expected, None)
    sets = [[t.clone() for t in contents[0]] for _ in range(n_sets)]
    bt = BlockTimer(fn, sets, timing.TimingOptions(max_time_s=0.1, timer=timer), gpu=True,
                    refill_pool=contents[1:], sample_size=0, flusher=dev, probe_chunks=bar.chunks)
    bt.warm_up()
    checks, times, first = [], [], 0
    for b, k in enumerate(blocks):
        times += bt.time_block(k)
        contents_of = [probes.gpu_content_of(first + i, b, len(sets), 2) for i in range(k)]
        if bt.block_probes is not None:  # as the runner: rows judged when the arm sent them
            checks.append(bar.check(bt.block_probes, first, len(sets), contents_of))
        first += k
    return bt, checks, times


@pytest.mark.parametrize("timer", ["auto", "events"])
def test_every_timed_repetition_is_checked_and_the_checks_are_in_no_repetition_time(dev, timer):
    bt, checks, times = _run(dev, _honest(dev), timer)
    assert all(c["passed"] for c in checks) and [c["checked"] for c in checks] == [3, 5, 4], checks
    assert bt.timer == ("activity" if timer == "auto" else "events") and not bt.marks
    assert times == pytest.approx([0.5] * 12, abs=1e-6)  # the 1 ms reductions after each repetition are not in it
    rep = bt.report()
    assert rep["probes"] and rep["probes_unreadable"] is None


@pytest.mark.parametrize("timer", ["auto", "events"])
def test_a_candidate_skipping_work_on_all_but_a_blocks_last_repetition_fails(dev, timer):
    _, checks, _ = _run(dev, _skipping(dev), timer)
    bad = [c for c in checks if not c["passed"]]
    assert bad and "chunk sum" in bad[0]["note"] and bad[0]["rep"] == 0, checks


@pytest.mark.parametrize("timer", ["auto", "events"])
def test_an_output_left_in_freed_memory_is_wrong_because_every_repetition_has_new_inputs(dev, timer):
    """One input set (a big input): every repetition still gets other values than the one before it, so the
    previous repetition's output, handed back by the allocator, is the answer to other inputs."""
    _, checks, _ = _run(dev, _stale(dev), timer, n_sets=1)
    bad = [c for c in checks if not c["passed"]]
    assert bad and "chunk sum" in bad[0]["note"], checks
    _, honest, _ = _run(dev, _honest(dev), timer, n_sets=1)
    assert all(c["passed"] for c in honest) and sum(c["checked"] for c in honest) == 12, honest


def test_each_repetition_of_a_gpu_block_holds_the_content_the_runner_expects(dev):
    seen = []

    def fn(a, b):
        dev.run("add_kernel", 0.5)
        seen.append(float(a[0]))
        return a + b
    bt, checks, _ = _run(dev, fn, "auto", n_sets=1)
    assert all(c["passed"] for c in checks)
    g = torch.Generator().manual_seed(0)  # the contents _run made: content c's first input starts with firsts[c]
    firsts = [float([torch.randn(2000, generator=g), torch.randn(2000, generator=g)][0][0]) for _ in range(3)]
    timed = seen[-12:]
    assert timed == [firsts[probes.gpu_content_of(r, 0, 1, 2)] for r in range(12)]
    assert all(x != y for x, y in zip(timed, timed[1:]))  # never the same values twice in a row


def test_without_stream_ids_the_activity_clock_keeps_no_checks_and_says_why(dev):
    dev.stream = None
    bt, checks, _ = _run(dev, _honest(dev), "auto")
    rep = bt.report()
    assert not checks and not rep["probes"] and "stream ids" in rep["probes_unreadable"]


def test_device_contents_follow_the_refills_between_blocks():
    n_sets, contents = 3, [[torch.full((4,), float(c))] for c in range(3)]
    sets = [[t.clone() for t in contents[0]] for _ in range(n_sets)]
    g = 0
    for block, k in enumerate((2, 5, 3, 7, 4)):
        if block:
            settle.refill_inputs(sets, contents[1:], block)
        for _ in range(k):
            c = probes.device_content_of(g, block, n_sets, 2)
            assert torch.equal(sets[g % n_sets][0], contents[c][0]), (block, g, c)
            g += 1
    assert probes.device_content_of(5, 3, 3, 0) == 0


def _us(name, s, e, stream=STREAM):
    return (name, int(s * 1000), int(e * 1000), stream)


def test_spans_leave_out_the_harness_work_behind_a_separator_and_nothing_else():
    plan = activity.Plan(frozenset({"flush"}), 1, frozenset({"spin"}), 1, timed_streams=frozenset({STREAM}))
    acts = [_us("spin", 0, 50), _us("flush", 50, 120), _us("k", 121, 125), _us("spin", 126, 127),
            _us("copy", 127, 135), _us("flush", 135, 140), _us("spin", 140, 141), _us("flush", 141, 200),
            _us("k", 201, 208), _us("spin", 209, 210), _us("copy", 210, 230), _us("spin", 230, 231)]
    assert activity.spans_ms(acts, plan, 2, checks=True) == [0.004, 0.007]  # a check's kernel named like the flush
    assert "outside any repetition" in activity.spans_ms(acts, plan, 2)
    late = acts[:-1] + [_us("k_side", 225, 240, stream=9), acts[-1]]  # the call's work on another stream
    out = activity.spans_ms(late, plan, 2, checks=True)
    assert isinstance(out, activity.CutFailure) and out.kind == "outside_window"
    no_ids = activity.Plan(frozenset({"flush"}), 1, frozenset({"spin"}), 1)
    assert "stream ids" in activity.spans_ms(acts, no_ids, 2, checks=True)


def test_without_a_probe_bar_every_gpu_repetition_still_gets_new_inputs(dev):
    """No chunk sums to take (the runner had no bar): the refills between repetitions still run, unchecked."""
    g = torch.Generator().manual_seed(0)
    contents = [[torch.randn(2000, generator=g), torch.randn(2000, generator=g)] for _ in range(3)]
    seen = []

    def fn(a, b):
        dev.run("add_kernel", 0.5)
        seen.append(float(a[0]))
        return a + b
    bt = BlockTimer(fn, [[t.clone() for t in contents[0]]], timing.TimingOptions(max_time_s=0.1), gpu=True,
                    refill_pool=contents[1:], sample_size=0, flusher=dev)
    bt.warm_up()
    times = bt.time_block(6)
    assert len(times) == 6 and bt.block_probes is None and bt.timer == "activity"
    assert seen[-6:] == [float(contents[probes.gpu_content_of(r, 0, 1, 2)][0][0]) for r in range(6)]
