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
from evokernel_mcp.runtime.zygote import STATUS_FIELDS, _servable
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
    assert _servable(FACTS, hello) == ""
    odd = {**FACTS, "status": {**FACTS["status"], field: value}}
    assert why in _servable(odd, hello)
    assert "user namespace" in _servable({**FACTS, "ns": {"user": "user:[1]"}}, hello)
    assert "OMP_NUM_THREADS" in _servable(FACTS, hello.model_copy(update={"env": {**env, "OMP_NUM_THREADS": "7"}}))
    assert _servable(FACTS, hello.model_copy(update={"env": {**env, "HOME": "/elsewhere"}})) == ""
    assert "descriptors" in _servable(FACTS, hello.model_copy(update={"fds": [1, 2]}))


def test_doctor_says_how_cpu_children_start(use_settings, capsys):
    import json

    from evokernel_mcp import cli

    assert cli._doctor(as_json=True) == 0
    assert "forked from the zygote" in json.loads(capsys.readouterr().out)["isolation"]["cpu_children"]
    use_settings(zygote="off")
    assert cli._doctor(as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["isolation"]["cpu_children"] == "each starts its own interpreter"
