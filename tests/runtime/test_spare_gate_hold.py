"""While a job that gave our idle processes back runs (spares.give_back_idle: a big job's memory plan), spares
start but wait at the device gate with their CPU start done and no device context; a take opens the gate for
them, and the job's end lets them make their contexts (spares.py _gate_shut). Stand-in children, no process."""

from __future__ import annotations

import time

from spare_stubs import Kid, RealThread
from spare_stubs import make_pool as _pool

from evokernel_mcp.runtime import devmem, spares


def _gated_start(pool, entered: list, kid=None):
    """A background start reaching its device phase: records when it passed the gate, then is ready."""
    def run():
        done = pool._gpu_phase(start=True)
        entered.append(time.monotonic())
        done()
        with pool._lock:
            pool._starting -= 1
            if kid is not None:
                pool._ready.append(kid)
            pool._lock.notify_all()
    with pool._lock:
        pool._starting += 1
    t = RealThread(target=run, daemon=True)
    t.start()
    return t


def _until(cond, timeout_s: float = 20.0) -> bool:
    """Poll until cond() holds (a thread reaching the gate may be late on a loaded host): never a fixed sleep."""
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def _hold(pool, monkeypatch):
    monkeypatch.setattr(spares.Spares, "_free_memory", staticmethod(lambda: None))
    monkeypatch.setattr(devmem, "release_cached", lambda: None)
    pool.give_back_idle()


def test_a_spare_starting_during_a_big_job_makes_its_context_only_when_the_job_ends(monkeypatch):
    pool, _ = _pool(monkeypatch, n=0)
    _hold(pool, monkeypatch)
    entered: list = []
    t = _gated_start(pool, entered)
    assert _until(lambda: pool._gated == 1)
    time.sleep(0.2)
    assert entered == [] and pool._gated == 1, "held at the gate while the job that needed the room runs"
    ended = time.monotonic()
    pool.end_hold()
    t.join(10)
    assert entered and entered[0] >= ended and pool._gated == 0


def test_a_take_during_a_big_job_lets_a_held_start_through(monkeypatch):
    pool, _ = _pool(monkeypatch, n=0)
    _hold(pool, monkeypatch)
    kid, entered = Kid(False), []
    _gated_start(pool, entered, kid)
    assert _until(lambda: pool._gated == 1)
    got: list = []
    taker = RealThread(target=lambda: got.append(pool.take("verify")), daemon=True)
    taker.start()
    taker.join(20)  # a hang guard: without the gate opening for a take this waits for the start time-out
    assert got == [kid] and entered


def test_a_big_job_starts_a_few_replacements_at_once_and_its_timing_does_not_wait_for_them(monkeypatch,
                                                                                           use_settings):
    pool, started = _pool(monkeypatch, n=6, refill=False)
    _hold(pool, monkeypatch)
    assert len(started) == spares.AFTER_BIG_SPARES < pool.n, \
        "the replacements start their CPU work during the job (they wait at the device gate)"
    pool._starting = 0  # (the stand-in starts never land)
    use_settings(start_timeout_s=3600.0)
    entered: list = []
    t = _gated_start(pool, entered)
    assert _until(lambda: pool._gated == 1)
    timed: list = []

    def job():
        with pool.quiet(wait=True):  # a host of few cores waits for starts in flight, not for held ones
            timed.append(time.monotonic())
    j = RealThread(target=job, daemon=True)
    j.start()
    j.join(20)
    assert timed and entered == [], "timing went on; the held start still waits"
    pool.end_hold()
    t.join(10)
    assert entered


def test_a_cpu_pool_starts_nothing_during_a_hold(monkeypatch):
    pool, started = _pool(monkeypatch, device="cpu", n=4, refill=False)
    pool._profiles = False
    _hold(pool, monkeypatch)
    assert started == [], "without a device gate a start would make its context inside the job"


def test_a_take_that_finds_a_ready_child_leaves_the_held_starts_at_the_gate(monkeypatch):
    """Opening the gate for a take that needs no start would make contexts the job then stops as they arrive."""
    pool, _ = _pool(monkeypatch, n=0)
    _hold(pool, monkeypatch)
    pool._ready = [Kid(False)]  # (the hold kept one)
    entered: list = []
    t = _gated_start(pool, entered)
    assert _until(lambda: pool._gated == 1)
    pool.take("verify")
    time.sleep(0.3)
    assert entered == [], "still held: the take had a child ready"
    pool.end_hold()
    t.join(10)
    assert entered


def test_a_big_jobs_replacements_start_within_its_timed_section_on_a_host_of_many_cores(monkeypatch):
    """A benchmark gives the room back inside its quiet section: on a host that does not wait for starts there,
    the replacements still do their CPU start during the job (and wait at the gate), not after it."""
    pool, started = _pool(monkeypatch, n=6, refill=False)
    monkeypatch.setattr(spares.Spares, "waits_in_quiet", lambda self: False)
    with pool.quiet(wait=False):
        _hold(pool, monkeypatch)
        assert len(started) == spares.AFTER_BIG_SPARES
    monkeypatch.setattr(spares.Spares, "waits_in_quiet", lambda self: True)
    pool2, started2 = _pool(monkeypatch, n=6, refill=False)
    with pool2.quiet(wait=False):
        _hold(pool2, monkeypatch)
        assert started2 == [], "a host of few cores starts nothing in a timed section"


def test_a_take_during_a_big_job_lets_one_held_start_through_not_every_one(monkeypatch):
    """Each start let through makes a context of 0.4 GiB during the job's peak: one per take that needs it."""
    pool, _ = _pool(monkeypatch, n=0)
    _hold(pool, monkeypatch)
    kids, first, second = [Kid(False), Kid(False)], [], []
    a = _gated_start(pool, first, kids[0])
    b = _gated_start(pool, second, kids[1])
    assert _until(lambda: pool._gated == 2)
    got: list = []
    taker = RealThread(target=lambda: got.append(pool.take("verify")), daemon=True)
    taker.start()
    assert _until(lambda: len(first) + len(second) == 1)
    taker.join(20)
    assert got and got[0] in kids
    time.sleep(0.3)
    assert len(first) + len(second) == 1 and pool._gated == 1, "the other start still waits at the gate"
    pool.end_hold()
    a.join(10)
    b.join(10)
    assert first and second and pool._let_through == 0


def test_a_start_making_its_context_when_a_big_job_gives_the_room_back_is_stopped_then(monkeypatch):
    """A spare's start that passed the device gate before the hold is making a context; the give-back stops it at
    once (not when its start ends, seconds into the job), counts it, and its start ends quietly: no isolation level
    is dropped for it and no spare joins the ready ones."""
    from evokernel_mcp.runtime.child_proc import ChildFailed

    pool, _ = _pool(monkeypatch, n=0)
    monkeypatch.setattr(spares.Spares, "_free_memory", staticmethod(lambda: None))
    monkeypatch.setattr(devmem, "release_cached", lambda: None)
    killed: list[int] = []
    monkeypatch.setattr(spares.sandbox, "kill_once", killed.append)
    from evokernel_mcp.runtime import proctree

    monkeypatch.setattr(proctree, "descendants", lambda pid: [pid + 1])  # its python under the sandbox's process
    monkeypatch.setattr(proctree, "running", lambda pids: [] if killed else list(pids))
    gave: list = []

    class Starting(Kid):
        def __init__(self, *_a, **_kw):
            super().__init__(False)
            self.proc = type("P", (), {"pid": 4242, "poll": lambda s: None})()

        def wait_ready(self, gate=None, timeout_s=None):
            gate()()  # through the device gate: its context is being made
            gave.append(pool.give_back_idle())  # a big job needs the room meanwhile
            raise ChildFailed("crash", "the process was killed at its start")  # what the killed start reads

    monkeypatch.setattr(spares, "spawn", lambda make: Starting())
    levels = (pool.level, list(pool.level_notes))
    try:
        pool._start_one(False, background=True)
        raise AssertionError("the stopped start must not come back as a spare")
    except spares.StoppedForRoom:
        pass
    assert killed == [4242] and gave[0]["processes"] == 1 and gave[0]["holdings"][0]["pid"] == 4242
    assert (pool.level, pool.level_notes) == levels and not pool._past_gate and not pool._stopped_for_room


def test_a_killed_process_reads_as_not_running_once_it_is_a_zombie_or_gone():
    """proctree.running, which the give-back waits on: a process runs until it is killed; its zombie (device memory
    already released by the driver) and its absence both read as not running."""
    import os
    import signal
    import subprocess
    import sys

    from evokernel_mcp.runtime import proctree

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proctree.running([p.pid]) == [p.pid]
        os.kill(p.pid, signal.SIGKILL)
        assert _until(lambda: not proctree.running([p.pid])), "a zombie (not reaped yet) does not run"
    finally:
        p.kill()
        p.wait()
    assert proctree.running([p.pid]) == []
