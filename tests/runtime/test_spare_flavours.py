"""Spares come in two flavours on a GPU (spares.py): the profiler warm (for a benchmark's timed arms) or cold
(for a verify). These tests drive the Spares logic with stand-in children (no process is started)."""

from __future__ import annotations

import pytest
from spare_stubs import Kid as _Kid
from spare_stubs import RealThread
from spare_stubs import make_pool as _pool

from evokernel_mcp.runtime import spares
from evokernel_mcp.runtime.child_proc import ChildFailed


def test_take_gives_a_bench_a_warm_child_and_a_verify_a_cold_one(monkeypatch):
    cold, warm = _Kid(False), _Kid(True)
    pool, _ = _pool(monkeypatch, ready=[cold, warm])
    assert pool.take("verify") is cold and not cold.warmed
    assert pool.take("bench") is warm and not warm.warmed


def test_a_bench_handed_a_cold_child_warms_it_before_use(monkeypatch):
    cold = _Kid(False)
    pool, _ = _pool(monkeypatch, ready=[cold])
    assert pool.take("bench") is cold and cold.warmed and cold.warm


def test_a_child_whose_warm_up_fails_is_discarded_and_the_failure_raised(monkeypatch):
    bad = _Kid(False, fail_warm=True)
    pool, _ = _pool(monkeypatch, ready=[bad])
    with pytest.raises(ChildFailed):
        pool.take("bench")
    assert bad.discarded


def test_replacements_follow_the_flavours_recent_takes_asked_for(monkeypatch):
    pool, started = _pool(monkeypatch, n=4, ready=[_Kid(False) for _ in range(4)])
    pool.replenish()
    assert started == []  # full: nothing to start
    for _ in range(4):  # a run of benchmarks: every take wants a warm child (the cold ones are warmed)
        pool.take("bench")
    assert sum(started) == len(started) == 4  # and every replacement is started warm
    started.clear()
    for _ in range(8):  # then a run of verifies: the replacements turn cold once the demand has
        pool.take("verify")
    assert len(started) == 8 and started[-4:] == [False] * 4


def test_before_any_take_half_the_spares_start_warm(monkeypatch):
    pool, started = _pool(monkeypatch, n=4)
    pool.replenish()
    assert sorted(started) == [False, False, True, True]


def test_a_cpu_pool_never_starts_warm_children_nor_warms_one(monkeypatch):
    kid = _Kid(False)
    pool, started = _pool(monkeypatch, device="cpu", n=2, ready=[kid])
    assert pool.take("bench") is kid and not kid.warmed
    assert started == [False, False]


def test_idle_cold_spares_are_warmed_in_the_background_when_benchmarks_want_warm_ones(monkeypatch):
    kids = [_Kid(False) for _ in range(4)]
    pool, started = _pool(monkeypatch, n=4, ready=kids)
    pool._demand.extend([True] * 3 + [False])  # three of four recent takes were timed arms
    pool.replenish()
    assert started == []  # the pool is full: no start, the idle cold ones are converted instead
    assert sum(k.warmed for k in kids) == 3 and pool._warming == 0
    assert sorted(k.warm for k in pool._ready) == [False, True, True, True]


def test_no_spare_is_warmed_while_arms_are_timed(monkeypatch):
    kids = [_Kid(False) for _ in range(4)]
    pool, _ = _pool(monkeypatch, n=4, ready=kids)
    pool._demand.extend([True] * 4)
    with pool.quiet(wait=False):
        pool.replenish()
        assert not any(k.warmed for k in kids)
    assert all(k.warmed for k in kids)  # once the timed section ends


def test_a_spare_boots_niced_and_the_job_that_takes_it_gets_it_at_nice_0(tmp_path, monkeypatch):
    """Real children (CPU path): a spare's start yields the CPU to the runner and to the children serving
    jobs; the child a job takes runs at nice 0 again, its whole sandboxed tree (where the host allows)."""
    import os
    import time

    from evokernel_mcp.runtime import sandbox

    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path))
    pool = spares.Spares("cpu", n=2)
    try:
        pool.replenish()
        deadline = time.monotonic() + 120
        while len(pool._ready) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(pool._ready) == 2
        idle = pool._ready[-1]
        tree = [idle.proc.pid, *sandbox.descendants(idle.proc.pid)]
        assert len(tree) >= 2 and {os.getpriority(os.PRIO_PROCESS, p) for p in tree} == {spares.SPARE_NICE}
        kid = pool.take("verify")
        tree = [kid.proc.pid, *sandbox.descendants(kid.proc.pid)]
        want = {0} if os.geteuid() == 0 else {spares.SPARE_NICE}  # lowering a nice value needs privilege
        assert {os.getpriority(os.PRIO_PROCESS, p) for p in tree} == want
        kid.discard()
    finally:
        pool.close()


def test_quiet_waits_for_device_work_of_spares_in_flight(monkeypatch):
    import time

    pool, _ = _pool(monkeypatch, n=0)
    done = pool._gpu_phase()  # a spare's device start under way
    finished = []

    def finish():
        time.sleep(0.3)
        finished.append(True)
        done()

    RealThread(target=finish).start()
    with pool.quiet(wait=False):
        assert finished == [True]  # timing begins only once the device work in flight has ended
        assert pool._gpu_busy == 0


def test_device_phase_of_a_spare_waits_for_the_end_of_the_timed_section(monkeypatch):
    import time

    pool, _ = _pool(monkeypatch, n=0)
    entered = []

    def spare():
        done = pool._gpu_phase()
        entered.append(time.monotonic())
        done()

    with pool.quiet(wait=False):
        t = RealThread(target=spare)
        t.start()
        time.sleep(0.3)
        assert entered == []  # held back while arms are timed
        left = time.monotonic()
    t.join(10)
    assert entered and entered[0] >= left


def test_a_take_inside_a_timed_section_does_not_wait_for_held_back_spares(monkeypatch):
    pool, _ = _pool(monkeypatch, n=0)
    pool._starting, pool._warming = 1, 1  # both would wait for the quiet section to end
    made = _Kid(True)
    monkeypatch.setattr(pool, "_start_one", lambda *a, **k: made)
    got = []
    with pool.quiet(wait=False):
        t = RealThread(target=lambda: got.append(pool.take("bench")))
        t.start()
        t.join(5)
    assert got == [made]


def test_a_gated_child_says_gate_and_waits_for_the_go_ahead(tmp_path, monkeypatch):
    """The protocol for real (a CPU child asked to gate): the runner's gate function runs between the
    child's CPU-only start and its device start, and its end function once the child is ready."""
    from evokernel_mcp.runtime import sandbox
    from evokernel_mcp.runtime.child_proc import Child

    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path))
    calls = []

    def gate():
        calls.append("gate")
        return lambda: calls.append("done")

    kid = Child("cpu", sandbox.level_candidates()[0], warm=False, gated=True)
    try:
        info = kid.wait_ready(gate=gate)
        assert calls == ["gate", "done"] and "gate" in info["boot_s"]
    finally:
        kid.discard()


def test_a_quiet_section_that_waits_for_starts_lets_them_through_the_device_gate(monkeypatch, use_settings):
    """A GPU host of few cores waits for starts in flight before its job; those starts must still pass
    the device gate (it holds them back only while arms are timed), or the wait would never end."""
    import time

    pool, _ = _pool(monkeypatch, n=0)
    use_settings(start_timeout_s=3600.0)  # the wait can end only by the start finishing
    pool._profiles = True
    pool._starting = 1

    def start_in_flight():
        time.sleep(0.2)
        done = pool._gpu_phase()  # reaches its device phase while the job waits for it
        time.sleep(0.1)
        done()
        with pool._lock:
            pool._starting -= 1
            pool._lock.notify_all()

    entered = []

    def job():
        with pool.quiet(wait=True):
            entered.append(pool._starting)

    RealThread(target=start_in_flight).start()
    j = RealThread(target=job)
    j.start()
    j.join(120)  # a hang guard: with the start held at the gate the job would wait the hour
    assert entered == [0]  # it went on because the start in flight passed the gate and finished


def test_a_retired_child_is_killed_at_once_and_ends_off_the_jobs_clock(tmp_path, monkeypatch):
    """spares.retire: the job's child is SIGKILLed (its whole tree) before retire returns; waiting for the
    processes to be gone, the Triton cache and the scratch dir happen in the background, counted as device
    work (a benchmark's timing waits for them), and wait_retired waits for them."""
    import signal
    import threading
    import time

    from evokernel_mcp.runtime import sandbox
    from evokernel_mcp.runtime.spares import Spares

    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path))
    pool = Spares("cpu", n=0)
    kid = pool.take("any")  # none spare: started now
    pids = [kid.proc.pid] + sandbox.descendants(kid.proc.pid)
    assert len(pids) >= 2  # bwrap and the interpreter (or the interpreter and nothing at the process level)
    finish_gate = threading.Event()
    real_stop = kid.stop

    def slow_stop():
        finish = real_stop()
        return lambda: (finish_gate.wait(10), finish())
    kid.stop = slow_stop
    pool.retire(kid)
    assert kid.dead and pool._retiring == 1 and pool._gpu_busy == 1  # its end is still in flight

    def state(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"
    deadline = time.time() + 60  # a hang guard: SIGKILL was sent before retire returned
    while time.time() < deadline and any(state(p) not in ("Z", "X", "gone") for p in pids):
        time.sleep(0.02)
    assert all(state(p) in ("Z", "X", "gone") for p in pids), [state(p) for p in pids]
    assert kid.scratch.exists()  # not yet: the background half has not run
    finish_gate.set()
    pool.wait_retired(timeout_s=120)  # returns when the background half is done (120 s: a hang guard)
    assert pool._retiring == 0 and pool._gpu_busy == 0 and not kid.scratch.exists()
    assert kid.proc.returncode == -signal.SIGKILL  # killed, not left to exit on its own when its pipes closed
    pool.close()


def test_spares_device_phases_are_not_limited_outside_timed_sections(monkeypatch):
    """No limit on spares' device phases in flight: on one H200 a limit of 2 spread them over more of the
    benchmarks' timed sections."""
    pool, _ = _pool(monkeypatch, n=0)
    ends = [pool._gpu_phase() for _ in range(5)]  # none blocks
    assert pool._gpu_busy == 5
    for end in ends:
        end()
    assert pool._gpu_busy == 0


@pytest.mark.parametrize(("cpus", "want"), [(1, 1), (2, 2), (5, 2), (16, 8), (64, 8)])
def test_spares_are_counted_on_the_cpus_the_runner_may_run_on(monkeypatch, cpus, want):
    """Half the CPUs of the runner's share, 2 to 8; one on a single CPU, where a second spare's start would take
    the CPU from the next job."""
    monkeypatch.setattr(spares.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert spares.default_spares() == want


@pytest.mark.parametrize(("cpus", "want"), [(1, 1), (2, 2), (16, 3), (64, 3)])
def test_a_gpu_keeps_at_most_three_spares_whatever_its_cores(monkeypatch, cpus, want):
    """Each idle GPU spare holds a device context: on a 16-core H100 host eight of them, with the runner and the
    cached references, were over 4 GiB idle, 4x a 1 GB problem's own bytes before its plan could give them back."""
    monkeypatch.setattr(spares.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert spares.default_spares("cuda:0") == spares.default_spares("rocm:1") == want


def test_a_job_starts_after_a_big_jobs_retired_children_are_gone_and_overlaps_a_small_jobs():
    """retiring.wait_retired_if_tight: a child retired from a job planned within its memory cap (retire(big=True))
    is waited for at the next job's start even with the device mostly free (a benchmark's arms hold gigabytes
    until they are gone); a small job's retired child is not (its end overlaps the next job's loads) unless the
    device is tight; once the big one is gone, nothing is waited for."""
    import threading

    from evokernel_mcp.runtime.retiring import Retiring

    class Pool(Retiring):
        device = "cuda"

        def __init__(self):
            self._lock, self._gpu_busy, self._retiring, self._retiring_big = threading.Condition(), 0, 0, 0
            self.free = (70 << 30, 80 << 30)
            self.waited = 0

        def _free_memory(self):
            return self.free

        def wait_retired(self, timeout_s: float = 30.0) -> float:
            self.waited += 1
            return super().wait_retired(timeout_s)

    gates = []

    class Kid:
        def stop(self):
            gate = threading.Event()
            gates.append(gate)
            return lambda: gate.wait(60)

    pool = Pool()
    pool.retire(Kid())  # a small job's child, still ending
    assert pool.wait_retired_if_tight() == 0.0 and pool.waited == 0
    pool.free = (10 << 30, 80 << 30)  # tight: waited for
    threading.Timer(0.05, gates[0].set).start()
    pool.wait_retired_if_tight()
    assert pool.waited == 1 and pool._retiring == 0
    pool.free = (70 << 30, 80 << 30)
    pool.retire(Kid(), big=True)
    assert pool._retiring_big == 1
    threading.Timer(0.05, gates[1].set).start()
    pool.wait_retired_if_tight()
    assert pool.waited == 2 and pool._retiring == 0 and pool._retiring_big == 0
    pool.retire(Kid())
    assert pool.wait_retired_if_tight() == 0.0 and pool.waited == 2
    gates[2].set()
    pool.wait_retired()
