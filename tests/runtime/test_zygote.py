"""The zygote (runtime/zygote.py): a CPU child forked into a sandbox bubblewrap made for it is that sandbox's
process as the kernel sees it (uid, capabilities, no_new_privs, namespaces, cgroups, rlimits, descriptors),
exactly as the process bwrap itself starts; it dies with its sandbox and ends the sandbox the way it ended;
a zygote that cannot serve leaves the child to start itself."""

from __future__ import annotations

import os
import signal
import time

import pytest

from evokernel_mcp.runtime import child_proc, proctree, sandbox, zygote_link
from evokernel_mcp.runtime.zygote_facts import STATUS_FIELDS, servable
from evokernel_mcp.runtime.zygote_models import StubHello

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or "bwrap+uid" not in sandbox.level_candidates(),
                                reason="the zygote serves the bwrap+uid level (a root server with bubblewrap)")


def _kernel_view(pid: int) -> dict:
    status = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in STATUS_FIELDS:
            status[k] = " ".join(v.split())
    return {"status": status,
            "ns": {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in ("mnt", "uts", "ipc", "net", "cgroup", "pid", "user")},
            "cgroup": open(f"/proc/{pid}/cgroup").read(),
            "limits": open(f"/proc/{pid}/limits").read(),
            "fds": sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")),
            "cwd": os.readlink(f"/proc/{pid}/cwd")}


def _serving(child) -> int:
    """The host pid of the process that serves the child's sandbox: the forked one, or the one bwrap started."""
    return child.info.get("zygote_pid") or proctree.descendants(child.proc.pid)[-1]


@pytest.fixture
def level():
    yield "bwrap+uid"
    zygote_link.stop()


def test_a_forked_child_is_its_sandbox_s_process_exactly_as_one_bwrap_starts(level, use_settings):
    forked = child_proc.Child("cpu", level)
    forked.wait_ready(120)
    use_settings(zygote="off")
    plain = child_proc.Child("cpu", level)
    plain.wait_ready(120)
    try:
        assert forked.info.get("zygote_pid") and "zygote_pid" not in plain.info, (forked.info, plain.info)
        f, p = _kernel_view(_serving(forked)), _kernel_view(_serving(plain))
        assert f["status"] == p["status"] and f["status"]["Uid"] == "65534 65534 65534 65534", (f, p)
        assert f["status"]["CapEff"] == f["status"]["CapBnd"] == "0000000000000000" and f["status"]["NoNewPrivs"] == "1"
        # the same descriptors (their numbers past 2 are those the runner had free when it started each)
        assert f["limits"] == p["limits"] and len(f["fds"]) == len(p["fds"]) and f["fds"][:3] == [0, 1, 2], (f, p)
        # its own sandbox: not the zygote's namespaces, not the other child's; the user namespace is the host's
        zyg = _kernel_view(zygote_link._ZYGOTE.proc.pid)
        for n in ("mnt", "uts", "ipc", "net", "pid"):
            assert f["ns"][n] != zyg["ns"][n] and f["ns"][n] != p["ns"][n], n
        stub = proctree.descendants(forked.proc.pid)
        stub = [s for s in stub if s != forked.info["zygote_pid"]][-1]
        assert f["ns"] == _kernel_view(stub)["ns"] and f["cgroup"] == _kernel_view(stub)["cgroup"]
        assert f["cwd"] == str(forked.scratch)
    finally:
        forked.discard()
        plain.discard()


def test_the_forked_child_dies_with_its_sandbox_and_the_sandbox_ends_as_the_child_did(level, use_settings):
    ends = {}
    for zygote in ("auto", "off"):
        use_settings(zygote=zygote)
        c = child_proc.Child("cpu", level)
        c.wait_ready(120)
        os.kill(_serving(c), signal.SIGKILL)  # as the cgroup's OOM killer or a CPU-time limit would
        ends[zygote] = c.proc.wait(timeout=30)
        c.discard()
    assert ends["auto"] == ends["off"] == 128 + signal.SIGKILL, ends  # bwrap's status for a child killed so
    use_settings(zygote="auto")
    c = child_proc.Child("cpu", level)  # the zygote serves the next one
    c.wait_ready(120)
    served = c.info["zygote_pid"]
    c.discard()  # kills bwrap's tree, which the forked process is attached to
    time.sleep(0.2)
    assert not proctree.running([served]), served


def test_a_zygote_that_cannot_serve_leaves_the_child_to_start_itself(level, monkeypatch):
    c = child_proc.Child("cpu", level)
    c.wait_ready(120)
    c.discard()
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # reaches children, not the zygote that started without it
    c = child_proc.Child("cpu", level)
    try:
        c.wait_ready(120)
        assert "zygote_pid" not in c.info and "TRITON_INTERPRET" in c.info["zygote_refused"], c.info
        assert c.request({"op": "warm_profiler"}, timeout_s=60, max_bytes=1 << 20) == {}  # it serves
    finally:
        c.discard()


FACTS = {"status": {"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": "",
                    "CapInh": "0" * 16, "CapPrm": "0" * 16, "CapEff": "0" * 16, "CapBnd": "0" * 16,
                    "CapAmb": "0" * 16, "NoNewPrivs": "1", "Seccomp": "0"},
         "ns": {"user": os.readlink("/proc/self/ns/user")}}


@pytest.mark.parametrize("field,value,why", [
    ("Uid", "0 0 0 0", "unprivileged"), ("Uid", "65534 0 65534 65534", "unprivileged"),
    ("CapBnd", "0000000000000400", "capabilities"), ("CapEff", "0000000000200000", "capabilities"),
    ("NoNewPrivs", "0", "no_new_privs"), ("Seccomp", "2", "seccomp"), ("Groups", "0", "groups")])
def test_the_zygote_serves_only_an_unprivileged_stub_with_the_zygote_s_environment(field, value, why):
    env = dict(os.environ)
    hello = StubHello(argv=[], env=env, cwd="/", fds=[0, 1, 2], start=1)
    assert servable(FACTS, hello) == ""
    odd = {**FACTS, "status": {**FACTS["status"], field: value}}
    assert why in servable(odd, hello)
    assert "user namespace" in servable({**FACTS, "ns": {"user": "user:[1]"}}, hello)
    assert "OMP_NUM_THREADS" in servable(FACTS, hello.model_copy(update={"env": {**env, "OMP_NUM_THREADS": "7"}}))
    assert servable(FACTS, hello.model_copy(update={"env": {**env, "HOME": "/elsewhere"}})) == ""
    assert "descriptors" in servable(FACTS, hello.model_copy(update={"fds": [1, 2]}))


def test_doctor_says_how_cpu_children_start(use_settings, capsys):
    import json

    from evokernel_mcp import cli

    assert cli._doctor(as_json=True) == 0
    assert "forked from the zygote" in json.loads(capsys.readouterr().out)["isolation"]["cpu_children"]
    use_settings(zygote="off")
    assert cli._doctor(as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["isolation"]["cpu_children"] == "each starts its own interpreter"


def test_a_served_process_that_ended_is_not_walked_and_its_number_is_never_signalled(level):
    """The runner walks the served process through a pidfd: once it has ended, a process that takes its number
    (here made to, through ns_last_pid) is neither in the sandbox's tree nor killed with it."""
    import subprocess

    c = child_proc.Child("cpu", level)
    c.wait_ready(120)
    served = c.info["zygote_pid"]
    os.kill(served, signal.SIGKILL)
    c.proc.wait(timeout=30)  # the stub ends as the served process did, and bwrap with it
    deadline = time.monotonic() + 30  # a hang guard: the zygote's fork reaps it at once
    while os.path.exists(f"/proc/{served}") and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = None
    for _ in range(50):  # another process may take the number between the write and the fork: try again
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(served - 1))
        p = subprocess.Popen(["sleep", "60"])
        if p.pid == served:
            victim = p
            break
        p.kill()
        p.wait()
    assert victim is not None, "no process took the number"
    try:
        assert served not in proctree.descendants(c.proc.pid)
        c.kill()
        time.sleep(0.3)
        assert victim.poll() is None, "the runner killed a process that took the served process's number"
    finally:
        victim.kill()
        victim.wait()


def test_a_stopped_zygote_ends_no_running_child_and_the_stub_is_not_dumpable(level):
    c = child_proc.Child("cpu", level)
    try:
        c.wait_ready(120)
        stub = [s for s in proctree.descendants(c.proc.pid) if s != c.info["zygote_pid"]][-1]
        # a non-dumpable process's /proc files are root's: agent code of the sandbox's uid cannot ptrace the stub
        assert os.stat(f"/proc/{stub}/environ").st_uid == os.stat(f"/proc/{stub}/mem").st_uid == 0
        zygote_link.stop()
        assert c.request({"op": "warm_profiler"}, timeout_s=60, max_bytes=1 << 20) == {}  # it still serves
    finally:
        c.discard()
