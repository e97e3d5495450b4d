"""Children that never host a timed arm get one hardware queue on an NVIDIA GPU (spares.untimed_queues:
CUDA_DEVICE_MAX_CONNECTIONS=1 halves what their context costs the driver), and a timed arm never gets such a
child. Stand-in children drive the Spares logic; the environment is read off the Popen a real Child makes."""

from __future__ import annotations

import pytest
from spare_stubs import Kid as _Kid
from spare_stubs import RealThread, make_pool

from evokernel_mcp.runtime import child_proc, spares


def _pool(monkeypatch, ready=(), n=4, device="cuda:0"):
    return make_pool(monkeypatch, device=device, n=n, ready=ready, refill=False)


@pytest.mark.parametrize("device,want", [("cuda:0", 1), ("cuda:1", 1), ("rocm:0", None), ("cpu", None)])
def test_one_queue_for_untimed_children_on_nvidia_only(device, want):
    assert spares.untimed_queues(device) == want


def test_a_timed_arm_never_gets_a_child_made_for_untimed_work(monkeypatch):
    lean = _Kid(False, timeable=False)
    pool, _ = _pool(monkeypatch, ready=[lean])
    made = _Kid(True)
    monkeypatch.setattr(pool, "_start_one", lambda warm=True, background=False: made)
    assert pool.take("bench") is made  # started now rather than the lean one warmed
    assert not lean.warmed and lean in pool._ready
    assert pool.take("verify") is lean


def test_a_verify_takes_a_timed_arms_child_when_no_lean_one_is_ready(monkeypatch):
    warm = _Kid(True)
    pool, _ = _pool(monkeypatch, ready=[warm])
    assert pool.take("verify") is warm


def test_lean_spares_are_not_warmed_and_two_warm_ones_are_kept_for_a_benchmark(monkeypatch):
    lean = [_Kid(False, timeable=False) for _ in range(3)]
    pool, started = _pool(monkeypatch, ready=list(lean), n=4)
    pool._demand.extend([False] * 8)  # only verifies lately
    pool.replenish()
    assert not any(k.warmed for k in lean) and pool._warming == 0
    assert started == [True]  # the one missing spare starts warm: a benchmark's two arms stay in reach
    pool._ready.append(_Kid(True))
    pool.take("verify")  # a lean one goes; its replacement: one warm is still short of two
    assert started == [True, True]


def test_a_benchmark_waits_for_a_warm_start_in_flight_rather_than_taking_a_lean_child(monkeypatch):
    import time

    lean = _Kid(False, timeable=False)
    pool, _ = _pool(monkeypatch, ready=[lean])
    monkeypatch.setattr(pool, "replenish", lambda **_kw: None)
    pool._starting, pool._starting_warm = 1, 1
    warm = _Kid(True)

    def arrive():
        time.sleep(0.3)
        with pool._lock:
            pool._starting -= 1
            pool._starting_warm -= 1
            pool._ready.append(warm)
            pool._lock.notify_all()
    RealThread(target=arrive).start()
    assert pool.take("bench") is warm


class _Stop(Exception):
    pass


def _env_of_child(monkeypatch, tmp_path, **kw) -> dict[str, str]:
    """The environment a Child would start its sandboxed process with (the Popen is stopped there)."""
    seen: dict[str, str] = {}

    def popen(*a, env=None, **k):
        seen.update(env or {})
        raise _Stop()
    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path))
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4")  # the server's own setting never reaches a child
    monkeypatch.setattr(child_proc.subprocess, "Popen", popen)
    with pytest.raises(_Stop):
        child_proc.Child("cuda:0", spares.sandbox.level_candidates()[0], **kw)
    return seen


def test_a_lean_child_starts_with_one_hardware_queue_and_a_timed_arms_with_the_default(monkeypatch, tmp_path):
    env = _env_of_child(monkeypatch, tmp_path, warm=False, queues=1)
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    env = _env_of_child(monkeypatch, tmp_path, warm=True)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in env


def test_spares_start_cold_children_lean_and_warm_ones_not(monkeypatch):
    made: list[dict] = []

    class Rec:
        def __init__(self, device, level, **kw):
            made.append(kw)
            raise OSError("stand-in: not started")
    monkeypatch.setattr(spares.sandbox, "level_candidates", lambda: ["none"])
    monkeypatch.setattr(spares, "Child", Rec)
    pool = spares.Spares("cuda:0", n=0)
    for warm in (False, True):
        with pytest.raises(OSError):
            pool._start_one(warm)
    assert [m["queues"] for m in made] == [1, None]
