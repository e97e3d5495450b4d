"""Which CPUs runners and timed arms run on (runtime/cpus.py): a GPU's share of the host (the cpu_split setting),
one CPU for a host-timed benchmark's arms, on every thread of a process tree."""

from __future__ import annotations

import os

import pytest

from evokernel_mcp import settings
from evokernel_mcp.runtime import cpus, sandbox
from evokernel_mcp.runtime.child_proc import Child


def test_parse_list():
    assert cpus.parse_list("0-3,8, 10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert cpus.parse_list("5") == {5}
    for bad in ("3-1", "a", "-1"):
        with pytest.raises(ValueError):
            cpus.parse_list(bad)


def _affinity(pid: int) -> list[frozenset[int]]:
    return [frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")]


@pytest.mark.two_cpus
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_release_tree_reaches_threads_started_before_it():
    import subprocess
    import sys

    allowed = frozenset(os.sched_getaffinity(0))
    code = ("import os, threading, time\nos.sched_setaffinity(0, {%d})\n"
            "threading.Thread(target=threading.Event().wait, daemon=True).start()\nprint('up', flush=True)\n"
            "time.sleep(60)\n" % min(allowed))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"up"
        assert _affinity(p.pid) == [frozenset({min(allowed)})] * 2
        assert cpus.release_tree(p.pid)
        assert _affinity(p.pid) == [allowed] * 2
    finally:
        p.kill()
        p.wait()


def test_even_split_gives_each_gpu_whole_cores_in_order(monkeypatch):
    monkeypatch.setattr(cpus, "_core_of", lambda c: frozenset({c % 16, c % 16 + 16}))
    host = frozenset(range(32))
    a, b = cpus.device_share(0, 2, host), cpus.device_share(1, 2, host)
    assert a == frozenset(range(8)) | frozenset(range(16, 24)) and b == host - a  # siblings stay together
    assert [len(cpus.device_share(i, 3, host)) for i in range(3)] == [10, 12, 10]  # 5, 6, 5 cores
    assert cpus.device_share(0, 1, host) == host and cpus.device_share(3, 2, host) == host
    assert cpus.device_share(1, 4, frozenset({0, 1})) == {0, 1}  # fewer cores than GPUs: no split
    assert cpus.format_list(a) == "0-7,16-23" and cpus.format_list(frozenset({3})) == "3"
    assert cpus.parse_list(cpus.format_list(b)) == b


def test_pool_gives_each_gpu_runner_its_share_on_a_big_host_or_when_asked(monkeypatch, use_settings):
    from evokernel_mcp.runtime.pool import RunnerPool

    monkeypatch.setattr(cpus, "_core_of", lambda c: frozenset({c}))
    monkeypatch.setattr(cpus, "allowed", lambda: frozenset(range(8)))
    pool = RunnerPool(["cuda:0", "cuda:1"])
    use_settings(cpu_split="auto")  # auto: 4 CPUs a GPU is too few to split
    assert pool._cpu_share("cuda:0") is None
    use_settings(cpu_split="even")
    assert (pool._cpu_share("cuda:0"), pool._cpu_share("cuda:1")) == ("0-3", "4-7")
    monkeypatch.setattr(cpus, "allowed", lambda: frozenset(range(32)))
    for setting, want in (("auto", "16-31"), ("off", None)):
        use_settings(cpu_split=setting)
        assert pool._cpu_share("cuda:1") == want, setting
    assert settings.Settings().cpu_split == "auto"
    use_settings(cpu_split="auto")
    assert pool._cpu_share("cuda:0") == "0-15"  # the default on a 2-GPU host of 32 CPUs
    assert RunnerPool(["cuda:0"])._cpu_share("cuda:0") is None  # one GPU: the whole host
    assert RunnerPool(["cpu"])._cpu_share("cpu") is None


@pytest.mark.two_cpus
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_runner_keeps_to_its_share_and_its_children_inherit_it():
    import subprocess
    import sys

    first = min(os.sched_getaffinity(0))
    code = ("import os\nfrom evokernel_mcp.runtime.cpus import apply_runner_cpus\napply_runner_cpus()\n"
            "import subprocess, sys\nprint(sorted(os.sched_getaffinity(0)), subprocess.run([sys.executable, '-c', "
            "'import os; print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True).stdout.strip())")
    env = {**os.environ, cpus.RUNNER_CPUS: str(first)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [f"[{first}]", f"[{first}]"], out


def test_arms_are_pinned_to_one_of_our_cpus_from_the_last(monkeypatch):
    every = frozenset(os.sched_getaffinity(0))
    assert cpus.arm_cpus() == (sorted(every, reverse=True) if len(every) >= 2 else [])
    monkeypatch.setattr(cpus, "allowed", lambda: frozenset({3, 0, 7}))
    assert cpus.arm_cpus() == [7, 3, 0]
    monkeypatch.setattr(cpus, "allowed", lambda: frozenset({5}))
    assert cpus.arm_cpus() == []  # one CPU: every arm is on it anyway


def test_jobs_timing_at_once_claim_different_cpus_across_processes(monkeypatch, tmp_path):
    import subprocess
    import sys

    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path))
    monkeypatch.setattr(cpus, "arm_cpus", lambda: [7, 3])
    with cpus.claim_arm_cpu() as a:
        # another runner's process, with the same state dir, while this claim lasts
        code = ("from evokernel_mcp.runtime import cpus; "
                "cpus.arm_cpus = lambda: [7, 3]\nwith cpus.claim_arm_cpu() as b:\n"
                "    with cpus.claim_arm_cpu() as c: print(b, c)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert (a, out.stdout.split()) == (7, ["3", "None"])  # the next free CPU; then none left: not pinned
    with cpus.claim_arm_cpu() as again:
        assert again == 7  # released with the job


@pytest.mark.two_cpus
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_pin_tree_reaches_every_thread_of_a_sandboxed_child():
    cpu = max(os.sched_getaffinity(0))
    child = Child("cpu", sandbox.tool_level())
    try:
        child.wait_ready(timeout_s=120)
        child.unnice()
        tree = [child.proc.pid, *sandbox.descendants(child.proc.pid)]
        assert any(a != {cpu} for p in tree for a in _affinity(p))  # the control: not pinned before
        assert cpus.pin_tree(child.proc.pid, cpu)
        assert all(a == {cpu} for p in tree for a in _affinity(p))
    finally:
        child.discard()
