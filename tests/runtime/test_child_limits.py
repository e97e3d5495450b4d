"""Per-job limits on the processes that run agent code (runtime/limits.py), through the real client, runner and
sandbox on the CPU path: a candidate that grabs more host memory than its limit gets `oom` naming the limit and
its role (never a crash or an exit code), the result states the limits, and the next jobs are right."""

from __future__ import annotations

import os

import anyio
import pytest

from evokernel_mcp.runtime import limits

GOOD = "def run(x, y):\n    return x + y\n"
WRONG = "def run(x, y):\n    return x - y\n"
LIMIT = "1G"
GRABS = {
    "python_bytes": "def run(x, y):\n    b = bytearray(3 << 30)\n    return x + y\n",
    "torch_tensor": "import torch\ndef run(x, y):\n    t = torch.ones(3 << 30, dtype=torch.uint8)\n    return x + y\n",
    "at_import": "blob = bytearray(3 << 30)\ndef run(x, y):\n    return x + y\n",
}


@pytest.fixture(scope="module")
def server(_isolated_state):
    os.environ["EVOKERNEL_CHILD_MEMORY"] = LIMIT
    from evokernel_mcp.app import close_app
    from evokernel_mcp.server import build_server

    anyio.run(close_app)  # a fresh runner whose children get the limit above
    yield build_server(lifespan=None)
    anyio.run(close_app)
    os.environ.pop("EVOKERNEL_CHILD_MEMORY", None)


def _verify(srv, candidate: str) -> dict:
    from mcp import Client

    async def main():
        async with Client(srv) as c:
            return await c.call_tool("verify_vs_pytorch", {"task": "vector_add", "candidate": candidate,
                                                           "shapes": ["small"], "seeds": 1, "wait_s": 120,
                                                           "timeout_s": 60})
    r = anyio.run(main)
    assert not r.is_error, r.content
    return r.structured_content


@pytest.mark.parametrize("grab", sorted(GRABS))
def test_memory_grab_over_the_limit_is_oom_naming_limit_and_role_and_the_next_jobs_are_right(server, grab):
    out = _verify(server, GRABS[grab])
    err = out["error"]
    assert out["passed"] is False and err is not None, out
    assert err["kind"] == "oom", err
    assert err["role"] == "candidate" and "1.00 GiB" in err["limit"], err
    assert "candidate" in err["message"] and "memory limit 1.00 GiB" in err["message"], err
    assert "exited with code" not in err["message"] and "crash" not in err["message"], err
    assert out["limits"]["memory_bytes"] == 1 << 30 and out["limits"]["cpu_s"], out["limits"]
    good = _verify(server, GOOD)  # the next job passes
    assert good["passed"] is True and not good.get("error"), good


TMPFS_GRAB = """
def run(x, y):
    chunk = b"\\1" * (200 << 20)  # files in the sandbox's /tmp are memory (tmpfs), out of RLIMIT_DATA's reach
    for i in range(8):
        with open(f"/tmp/fill{i}", "wb") as f:
            f.write(chunk)
    return x + y
"""


def test_memory_taken_past_rlimit_data_is_oom_from_the_cgroup_not_a_crash(server):
    if "cgroup" not in limits.current().memory_scope:
        pytest.skip("no writable memory cgroup here: RLIMIT_DATA alone (tmpfs memory is not counted by it)")
    out = _verify(server, TMPFS_GRAB)
    err = out["error"]
    assert err["kind"] == "oom" and err["role"] == "candidate", err
    assert "out-of-memory killer" in err["message"] and "1.00 GiB" in err["limit"], err
    assert "exited with code" not in err["message"] and "137" not in err["message"], err
    good = _verify(server, GOOD)
    assert good["passed"] is True and not good.get("error"), good


REF_GRAB = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        blob = bytearray(3 << 30)
        return x * 2

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""
REF_OK = REF_GRAB.replace("        blob = bytearray(3 << 30)\n", "")


def _verify_ref(srv, reference: str) -> dict:
    from mcp import Client

    from evokernel_mcp.kb_candidates import same_code

    async def main():
        async with Client(srv) as c:
            return await c.call_tool("verify_vs_pytorch", {"reference": reference, "candidate": same_code(reference),
                                                           "seeds": 1, "wait_s": 120, "timeout_s": 60})
    r = anyio.run(main)
    assert not r.is_error, r.content
    return r.structured_content


def test_a_reference_over_the_limit_is_oom_naming_the_reference_and_the_next_job_passes(server):
    out = _verify_ref(server, REF_GRAB)
    err = out["error"]
    assert out["passed"] is False and err["kind"] == "oom" and err["role"] == "reference", err
    assert "reference" in err["message"] and "1.00 GiB" in err["limit"], err
    assert "exited with code" not in err["message"], err
    good = _verify_ref(server, REF_OK)
    assert good["passed"] is True and not good.get("error"), good


def test_after_the_grabs_a_wrong_candidate_still_fails_on_its_numbers(server):
    wrong = _verify(server, WRONG)
    assert wrong["passed"] is False and not wrong.get("error"), wrong


def test_an_oom_kill_seen_by_the_cgroup_is_oom_not_a_crash():
    class Cg:
        def oom_kills(self):
            return 1

    kind, msg, lim = limits.attribute("crash", "the process running run exited with code 137", role="reference",
                                      limits=limits.Limits(memory_bytes=2 << 30, memory_scope="cgroup"),
                                      cgroup=Cg(), killed_by=limits.killed_by(137))
    assert kind == "oom" and "reference" in msg and "2.00 GiB" in lim
    kind, msg, lim = limits.attribute("crash", "the process running run was killed by SIGXCPU", role="candidate",
                                      limits=limits.Limits(cpu_s=30), cgroup=None, killed_by="SIGXCPU")
    assert kind == "timeout" and "CPU-time limit 30 s" in lim
    assert limits.attribute("crash", "exited with code 1", role="candidate", limits=None, cgroup=None,
                            killed_by=None) == ("crash", "exited with code 1", None)
    kind, msg, lim = limits.attribute("exception", "VmmError: cuMemCreate failed (2)", role="reference", limits=None,
                                      cgroup=None, killed_by=None)
    assert kind == "oom" and "reference" in msg and "device" in lim
    kind, msg, lim = limits.attribute("timeout", "case did not finish within 5 s", role="candidate", limits=None,
                                      cgroup=None, killed_by="SIGKILL")
    assert kind == "timeout" and msg.startswith("the candidate process") and "timeout_s" in lim


def test_sizes_and_switches_parse():
    assert limits.parse_bytes("512M", None) == 512 << 20 and limits.parse_bytes("8g", None) == 8 << 30
    assert limits.parse_bytes("off", 5) is None and limits.parse_bytes("auto", 5) == 5
    with pytest.raises(ValueError):
        limits.parse_bytes("lots", None)


class _Proc:
    def __init__(self, pid):
        self.pid = pid


class _Ref:
    def __init__(self, pid):
        self.proc, self.discarded = _Proc(pid), False

    def discard(self):
        self.discarded = True


def test_cached_reference_processes_over_their_memory_budget_are_stopped_oldest_first(use_settings):
    from collections import OrderedDict

    from evokernel_mcp.runtime import spares

    pool = spares.Spares.__new__(spares.Spares)
    old, new = _Ref(os.getpid()), _Ref(os.getpid())  # each "holds" this test process's resident memory
    pool._refs = OrderedDict([("old", old), ("new", new)])
    one = limits.tree_rss(os.getpid())
    assert one > 0
    use_settings(ref_cache_memory=str(int(one * 1.5)))
    gone = pool.trim_references()
    assert old.discarded and not new.discarded and list(pool._refs) == ["new"]
    assert len(gone) == 1 and "over its budget" in gone[0]
    use_settings(ref_cache_memory="off")
    assert pool.trim_references() == [] and list(pool._refs) == ["new"]


def test_a_child_joins_its_own_cgroup_with_the_caps_where_this_host_has_one(use_settings):
    import subprocess

    use_settings(child_memory="768M", child_pids=77)
    lim, cg = limits.for_child()
    if cg is None:
        assert lim.processes_scope.startswith("uid") and "cgroup" not in lim.memory_scope
        pytest.skip("no writable cgroup hierarchy here: RLIMIT_NPROC per uid, RLIMIT_DATA per process")
    try:
        assert lim.processes == 77 and lim.processes_scope == "job (pids cgroup)"
        out = subprocess.run(["sh", "-c", "cat /proc/self/cgroup; grep -E 'data|processes' /proc/self/limits"],
                             capture_output=True, text=True, preexec_fn=limits.preexec_limits(cg)).stdout
        for d in cg.dirs.values():
            assert d.name in out  # the child is in the job's own cgroup(s)
        assert str(768 << 20) in out  # and under RLIMIT_DATA
        if "pids" in cg.dirs:
            assert (cg.dirs["pids"] / ("pids.max")).read_text().strip() == "77"
        if "memory" in cg.dirs and not cg.v2:
            assert int((cg.dirs["memory"] / "memory.limit_in_bytes").read_text()) == 768 << 20
    finally:
        cg.remove()
    assert not any(d.exists() for d in cg.dirs.values())


def test_the_memory_plan_sees_the_per_process_limit():
    """verify's plan (refplan._host_free) counts RLIMIT_DATA: a case too big for the limit is planned for it (or
    refused as too_big with the sizes) instead of running into the limit."""
    import subprocess
    import sys

    code = ("import resource\nfrom evokernel_mcp.verify import refplan\n"
            "resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, resource.RLIM_INFINITY))\n"
            "print(refplan._host_free())\n")
    free = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0 < free < 1 << 30


class _Gone:
    pid = os.getpid()

    def poll(self):
        return None


def _child_failing_with(kind: str, message: str):
    from evokernel_mcp.runtime.child_proc import Child, ChildFailed

    c = Child.__new__(Child)
    c.dead, c.role, c.limits, c.cgroup, c.proc, c.killed = False, "reference", None, None, _Gone(), []

    def fail(msg, **kw):
        raise ChildFailed(kind, message)

    def kill(close=True):
        c.killed.append(close)
        c.dead = True
    c._request, c.kill = fail, kill
    return c


def test_a_child_out_of_device_memory_is_stopped_so_no_cache_hands_it_to_the_next_job():
    """A process that failed to send its reply by VMM (cuMemCreate: out of memory) ends itself with exit code 0;
    the runner stops it at once and names it, so the next job gets a fresh one instead of 'exited with code 0'."""
    from evokernel_mcp.runtime.child_proc import ChildFailed

    c = _child_failing_with("oom", "VmmError: cuMemCreate failed: CUDA error 2 (out of memory)")
    with pytest.raises(ChildFailed) as ei:
        c.request({"op": "case"}, timeout_s=5, max_bytes=0)
    assert ei.value.kind == "oom" and ei.value.role == "reference" and "device" in ei.value.limit
    assert c.killed and c.dead
    again = ei.value.again("harness", "reference side, seed 0: " + ei.value.message)
    assert again.role == "reference" and again.limit == ei.value.limit and again.info()["role"] == "reference"
    c = _child_failing_with("exception", "ValueError: wrong shape")  # not a memory failure: the process serves on
    with pytest.raises(ChildFailed):
        c.request({"op": "case"}, timeout_s=5, max_bytes=0)
    assert not c.killed


def test_our_own_receive_out_of_device_memory_is_oom_on_the_runners_side_never_the_peers_protocol_violation():
    from evokernel_mcp.runtime.childerr import out_of_device_memory
    from evokernel_mcp.runtime.courier import CourierError
    from evokernel_mcp.runtime.cuda_vmm import VmmError
    from evokernel_mcp.runtime.frames import FrameError

    def chain(*errs):
        for inner, outer in zip(errs, errs[1:]):
            outer.__cause__ = inner
        return errs[-1]

    ours = chain(VmmError("cuMemCreate failed: CUDA error 2 (out of memory)"), CourierError("x"), FrameError("y"))
    assert out_of_device_memory(ours)
    forged = FrameError("tensor dtype 'out of memory' is not allowed")  # text the peer chose
    assert not out_of_device_memory(forged)
    other = chain(VmmError("cuMemMap failed: CUDA error 1 (invalid argument)"), CourierError("x"), FrameError("y"))
    assert not out_of_device_memory(other)
    torch = pytest.importorskip("torch")
    assert out_of_device_memory(torch.OutOfMemoryError("CUDA out of memory"), itself=True)
    assert not out_of_device_memory(RuntimeError("out of memory"), itself=True), "only the allocator's own type"
