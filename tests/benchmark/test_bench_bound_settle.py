"""A stop waits while the runner's bound reads failed (interleave.SETTLE_FACTOR): arms on a virtual clock that
record their blocks as the runner does (arms.interleave), judged by bound.runner_bound. No real timing here."""

from __future__ import annotations

from vclock import Clock

from evokernel_mcp.benchmark import interleave
from evokernel_mcp.benchmark.bound import runner_bound
from evokernel_mcp.benchmark.timing import TimingOptions

OPT = TimingOptions(min_reps=3, max_time_s=1e-6, target_rel_ci=1e-9)  # the budget stop: BUDGET_MIN_ROUNDS rounds
HARNESS_MS, KERNEL_MS, DELAY_MS = 1.5, 0.03, 3.0


def _arms(clock: Clock, blocks: dict, delayed: set[int] = frozenset(), scale: float = 1.0):
    """baseline, control and candidate arms of identical work; the candidate's blocks of the timed rounds in
    `delayed` lose DELAY_MS to the scheduler (outside its timed windows), and it reports `scale` x its times."""
    def arm(name: str):
        def call(k: int) -> list[float]:
            timed = len(blocks[name]) - interleave.WARMUP_MIN_CALLS  # the timed round this block belongs to
            wall = HARNESS_MS + k * KERNEL_MS
            if name == "candidate" and timed in delayed:
                wall += DELAY_MS
            clock.t += wall / 1e3
            times = [KERNEL_MS * (scale if name == "candidate" else 1.0)] * k
            blocks[name].append({"wall_ms": wall, "sum_ms": sum(times), "k": k})
            return times
        return call
    return {n: arm(n) for n in blocks}


def _run(clock: Clock, delayed=frozenset(), scale: float = 1.0, settle: bool = True):
    blocks: dict = {"baseline": [], "control": [], "candidate": []}
    arms = _arms(clock, blocks, set(delayed), scale)
    check = (lambda r: bool((runner_bound(r, blocks) or {"passed": True})["passed"])) if settle else None
    run = interleave.run_interleaved(arms, opt=OPT, rng_seed=0, settle=check)
    return run, runner_bound(run, blocks)


def test_three_delayed_blocks_of_five_fail_the_bound_without_more_rounds(clock):
    run, bound = _run(clock, delayed={0, 1, 2}, settle=False)
    assert len(run.rounds) == interleave.BUDGET_MIN_ROUNDS and bound["passed"] is False
    assert run.settle_from is None


def test_an_honest_candidate_delayed_early_passes_after_more_rounds(clock):
    run, bound = _run(clock, delayed={0, 1, 2})
    assert bound["passed"] is True and run.stop_reason == "max_time_s"
    assert run.settle_from == interleave.BUDGET_MIN_ROUNDS < len(run.rounds)
    assert "so the run went on" in bound["detail"]


def test_a_quiet_run_stops_at_its_budget_with_no_extra_rounds(clock):
    run, bound = _run(clock)
    assert bound["passed"] is True and len(run.rounds) == interleave.BUDGET_MIN_ROUNDS and run.settle_from is None


def test_a_rescaled_timer_still_fails_at_the_cap(clock):
    run, bound = _run(clock, scale=0.35)
    n0 = interleave.BUDGET_MIN_ROUNDS
    assert bound["passed"] is False and run.settle_from == n0
    assert len(run.rounds) == max(interleave.SETTLE_FACTOR * n0, n0 + interleave.SETTLE_MIN_EXTRA)


def test_the_extra_rounds_also_end_when_they_take_too_long():
    run = interleave.InterleavedRun(arms=["a", "b"], rounds=[{}] * 5, budget_s=1.0)
    assert interleave._settled(run, lambda r: False, "max_time_s", 0.0, 3.0) is False and run.settle_from == 5
    run.rounds = [{}] * 6
    assert interleave._settled(run, lambda r: False, "max_time_s", 5.9, 3.0) is False
    assert interleave._settled(run, lambda r: False, "max_time_s", 6.1, 3.0) is True  # 2 x the 3 s before
    assert interleave._settled(run, lambda r: False, "max_reps", 0.0, 3.0) is True  # never put off
    assert interleave._settled(run, lambda r: True, "max_time_s", 0.0, 3.0) is True
    run.rounds = [{}] * 15
    assert interleave._settled(run, lambda r: False, "max_time_s", 0.0, 3.0) is True  # the cap on rounds


def _blocks(n: int, cand_wait_ms: float = 0.0, scale: float = 1.0, forked_at: int | None = None) -> dict:
    """Host-timing block records of n rounds (no warm-up): every arm does HARNESS_MS of harness work and
    KERNEL_MS x 40 of compute on the CPU; the candidate also waits cand_wait_ms for a CPU in each block (on the
    runner's clock, not on its CPU clock) and reports scale x its compute; forked_at: the round in which a
    process joins the candidate's tree."""
    def rec(name: str, i: int) -> dict:
        k, compute = 40, 40 * KERNEL_MS
        wait = cand_wait_ms if name == "candidate" else 0.0
        reported = compute * (scale if name == "candidate" else 1.0)
        tree = ((1, 2), 0)
        after = ((1, 2, 3), 0) if name == "candidate" and i == forked_at else tree
        return {"wall_ms": HARNESS_MS + compute + wait, "cpu_ms": HARNESS_MS + compute, "sum_ms": reported, "k": k,
                "tree": tree, "tree_after": after}
    return {name: [rec(name, i) for i in range(n)] for name in ("baseline", "control", "candidate")}


def _bound(blocks: dict, gpu: bool = False) -> dict:
    run = interleave.InterleavedRun(arms=list(blocks), rounds=[{}] * len(blocks["candidate"]))
    return runner_bound(run, blocks, gpu=gpu)


def test_host_timing_a_candidate_that_waited_for_a_cpu_passes_on_its_trees_cpu_clock():
    b = _bound(_blocks(10, cand_wait_ms=2.0))
    assert b["passed"] is True and b["excess_ms"] > b["allowance_ms"]  # the runner's clock alone reads failed
    assert b["cpu_excess_ms"] <= b["cpu_allowance_ms"] and "waited for a CPU" in b["detail"]


def test_host_timing_a_rescaled_timer_fails_on_both_clocks():
    b = _bound(_blocks(10, scale=0.35))
    assert b["passed"] is False and b["cpu_excess_ms"] > b["cpu_allowance_ms"]
    assert "did work it did not report" in b["detail"]


def test_the_cpu_clocks_are_not_taken_where_the_tree_changed_or_on_a_gpu():
    assert _bound(_blocks(10, cand_wait_ms=2.0, forked_at=4))["passed"] is False
    assert "cpu_excess_ms" not in _bound(_blocks(10, cand_wait_ms=2.0), gpu=True)
    quiet = _bound(_blocks(10))
    assert quiet["passed"] is True and "cpu_excess_ms" not in quiet  # taken only where the wall reads failed


def test_tree_cpu_counts_a_busy_child_and_sees_a_process_join():
    import subprocess
    import sys
    import time

    from evokernel_mcp.runtime.proctree import tree_cpu

    code = "import os, time, sys\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n" \
           "sys.stdout.write('x'); sys.stdout.flush()\nsys.stdin.read(1)\nos.system('sleep 3')\n"
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        a = tree_cpu(p.pid)
        assert p.stdout.read(1) == b"x"
        b = tree_cpu(p.pid)
        assert (b[0] - a[0]) / 1e9 >= 0.1 and a[1] == b[1] == (p.pid,)  # CPU time, whatever the wall
        p.stdin.write(b"g")
        p.stdin.flush()
        for _ in range(100):
            c = tree_cpu(p.pid)
            if len(c[1]) > 1:
                break
            time.sleep(0.05)
        assert len(c[1]) > 1  # the shell that runs sleep joined the tree
    finally:
        subprocess.run(["pkill", "-P", str(p.pid)], check=False)
        p.kill()
        p.wait()


def test_tree_from_children_files_and_from_every_parent_agree(monkeypatch):
    import builtins
    import subprocess

    from evokernel_mcp.runtime import proctree

    p = subprocess.Popen(["sh", "-c", "sleep 3 & sleep 3; wait"])
    try:
        for _ in range(100):
            fast = proctree._tree(p.pid)
            if len(fast) == 3:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        real_open = builtins.open

        def no_children(path, *a, **kw):  # a kernel without CONFIG_PROC_CHILDREN
            if str(path).endswith("/children"):
                raise FileNotFoundError(path)
            return real_open(path, *a, **kw)
        monkeypatch.setattr(builtins, "open", no_children)
        slow = proctree._tree(p.pid)
        monkeypatch.undo()
        assert sorted(fast) == sorted(slow) and len(fast) == 3 and fast[0] == p.pid
        assert proctree._tree(2**22 + 7) is None  # no such process
    finally:
        subprocess.run(["pkill", "-P", str(p.pid)], check=False)
        p.kill()
        p.wait()
