"""A sandboxed child's start is off every job's clock but not free: each candidate needs three of them, and on
a busy GPU host their CPU time is what limits a batch. The child must not import the MCP SDK (errors.py builds
on its ToolError, and verify/__init__ on its Context): that cost ~0.5 s of each start. The harness sides it
serves later are imported while it is a spare."""

from __future__ import annotations

import subprocess
import sys

from evokernel_mcp.runtime import sandbox


def test_child_start_imports_no_mcp_sdk_and_warms_both_harness_sides(tmp_path):
    env = sandbox.base_env({"HOME": str(tmp_path)})
    # as the runner starts it (-m), with stdin at EOF: it starts, says ready, reads EOF and exits
    with open(tmp_path / "stdout.txt", "wb") as out, open(tmp_path / "stderr.txt", "wb") as err:
        fds = (out.fileno(), err.fileno())
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "evokernel_mcp.runtime.child", "--device", "cpu",
                            "--capture-fds", ",".join(map(str, fds))], pass_fds=fds,
                           cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert b'"event"' in p.stdout and b"ready" in p.stdout  # the protocol's ready frame (its private stdout)
    # the child points fd 2 at the capture file it was given early on: importtime lines land in both places
    text = p.stderr.decode() + (tmp_path / "stderr.txt").read_text()
    modules = {line.rsplit("|", 1)[1].strip() for line in text.splitlines() if line.startswith("import time:")}
    assert "torch" in modules and "evokernel_mcp.candidate" in modules  # the log is complete enough to judge
    assert {"evokernel_mcp.verify.sides", "evokernel_mcp.benchmark.sides"} <= modules
    sdk = sorted(m for m in modules if m == "mcp" or m.startswith(("mcp.", "mcp_types", "starlette")))
    assert not sdk, f"the child imported the MCP SDK: {sdk[:8]}"


def test_the_zygote_imports_what_a_child_does_and_no_mcp_sdk(tmp_path):
    """The zygote's modules become every CPU child's it forks (runtime/zygote.py): the same rule holds there."""
    import socket

    from evokernel_mcp.runtime.child_env import child_env
    from evokernel_mcp.runtime.zygote_models import ZygoteReady

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with open(tmp_path / "stderr.txt", "wb") as err:
        p = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "evokernel_mcp.runtime.zygote", "--ctl",
                              str(theirs.fileno())], pass_fds=(theirs.fileno(),), cwd=tmp_path,
                             env=child_env("cpu", tmp_path, "bwrap+uid"), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=err)
    theirs.close()
    ours.settimeout(120)  # a hang guard
    ready = ZygoteReady.model_validate_json(ours.recv(1 << 16))
    ours.close()  # the zygote ends at the end of its requests
    p.wait(timeout=60)
    text = (tmp_path / "stderr.txt").read_text()
    assert ready.ok and p.returncode == 0, (ready, text[-2000:])
    modules = {line.rsplit("|", 1)[1].strip() for line in text.splitlines() if line.startswith("import time:")}
    assert {"torch", "evokernel_mcp.verify.sides", "evokernel_mcp.benchmark.sides"} <= modules
    sdk = sorted(m for m in modules if m == "mcp" or m.startswith(("mcp.", "mcp_types", "starlette")))
    assert not sdk, f"the zygote imported the MCP SDK: {sdk[:8]}"


def test_errors_stay_tool_errors_in_the_server():
    from mcp.server.mcpserver.exceptions import ToolError

    from evokernel_mcp.errors import BadInput, NotFound

    assert issubclass(BadInput, ToolError) and issubclass(NotFound, ToolError)


def test_renice_tree_reaches_every_thread_of_the_process(tmp_path):
    """On Linux the nice value is per thread: a spare's CUDA and profiler threads started at its boot value
    and must follow when the job that takes it renices the tree."""
    import os
    import time

    code = ("import os, threading, time\nos.nice(5)\nev = threading.Event()\n"
            "threading.Thread(target=ev.wait, daemon=True).start()\nprint('up', flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"up"
        tids = os.listdir(f"/proc/{p.pid}/task")
        assert len(tids) == 2
        assert sandbox.renice_tree(p.pid, 12)  # raising it needs no privilege

        def nice(tid: str) -> int:
            with open(f"/proc/{p.pid}/task/{tid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[16])

        deadline = time.time() + 60  # a hang guard, not a speed requirement
        while time.time() < deadline and any(nice(t) != 12 for t in tids):
            time.sleep(0.05)
        assert [nice(t) for t in tids] == [12, 12]
    finally:
        p.kill()
        p.wait()


def test_a_spare_given_tritons_key_skips_hashing_and_every_holder_of_the_function_returns_it():
    code = ("import os, sys\nfrom evokernel_mcp.runtime.child import _triton_key\n"
            "real = _triton_key()\nos.environ['_EVOKERNEL_TRITON_KEY'] = real\n"
            "import triton.runtime.cache as c\nimport triton.runtime.autotuner as a\n"
            "before = c.triton_key\nassert _triton_key() == real and '_EVOKERNEL_TRITON_KEY' not in os.environ\n"
            "assert c.triton_key is not before and c.triton_key() == real\n"
            "assert getattr(a, 'triton_key', c.triton_key)() == real\n"
            "from triton.runtime.cache import triton_key\nassert triton_key() == real\n"  # imported afterwards too
            "print(len(real))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert int(p.stdout.split()[-1]) > 64  # the real key: a version and many hashes


def test_the_runner_and_its_ops_import_no_mcp_sdk():
    """The runner's errors go over the wire as {kind, message} (errors.WIRE_ONLY): its start and the modules of
    its ops do without the SDK (1.4 s of CPU at every runner start)."""
    code = ("import importlib, importlib.machinery, sys\n"
            "sys.modules['__main__'].__spec__ = importlib.machinery.ModuleSpec('evokernel_mcp.runtime.runner', None)\n"
            "import evokernel_mcp.runtime.runner\n"
            "from evokernel_mcp.runtime.ops import OPS\n"
            "for spec in OPS.values():\n"
            "    importlib.import_module(spec.target.partition(':')[0])\n"
            "from evokernel_mcp.errors import EvoError\n"
            "sdk = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types', 'starlette')))\n"
            "assert not sdk, sdk[:8]\n"
            "assert EvoError.__mro__[1] is Exception\n"
            "print(len(OPS))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**sandbox.base_env({}), "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 0, p.stderr[-2000:]
    assert int(p.stdout.strip()) >= 5
