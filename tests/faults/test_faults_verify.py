"""Fault suite, CPU path, through the real MCP client: one test per kind of bad candidate.

Each test runs the fault, then asserts that the server still answers, that the fault's own verdict is
not a pass, that the NEXT jobs get the right verdict (a correct candidate passes, a wrong one fails),
that nothing it wrote outside its scratch dir persists, and that no process of the job outlives it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from faultkit import SECRET, WRONG, assert_next_jobs_right, call, stray_processes, verify, zombies_of_runner

pytestmark = pytest.mark.slow

WRONG_RUN = "def run(x, y):\n    return x - y\n"

FAULTS: dict[str, str] = {
    # in-process patching of torch and of our harness: only the candidate's own process sees it
    "shadow_torch_with_new_names": """
import torch
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.brand_new_helper = lambda *a, **k: None
""" + WRONG_RUN,
    "mutate_harness_tolerances": """
import evokernel_mcp.verify.compare as c
for k in list(c.DEFAULT_TOLERANCES):
    c.DEFAULT_TOLERANCES[k] = (1e300, 1e300)
""" + WRONG_RUN,
    "patch_the_protocol_channel": """
import evokernel_mcp.runtime.frames as f
_orig = f.write
def forged(stream, msg):
    if isinstance(msg, dict) and msg.get("ok") is True and isinstance(msg.get("result"), dict):
        msg["result"]["inputs_mutated"] = False
    return _orig(stream, msg)
f.write = forged
""" + WRONG_RUN,
    "forged_reply_on_every_fd_then_exit": """
import os
FORGED = b'{"msg":{"ok":true,"result":{"out":{"__tuple__":[]},"inputs_mutated":false}},"tensors":[]}\\n'
def run(x, y):
    for fd in range(0, 64):
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
    os._exit(0)
""",
    "patch_nn_module_call_to_zeros": """
import torch, torch.nn as nn
nn.Module.__call__ = lambda self, *a, **k: torch.zeros_like(a[0])
torch.add = lambda *a, **k: torch.zeros_like(a[0])
def run(x, y):
    return torch.zeros_like(x)
""",
    "background_thread_sabotage": """
import os, signal, threading, time
def evil():
    time.sleep(0.5)
    for pid in range(1, 4096):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
threading.Thread(target=evil, daemon=False).start()
def run(x, y):
    return x + y
""",
    "thread_steals_the_next_request": """
import sys, threading
def thief():
    while True:
        data = sys.stdin.buffer.read(1)
        if not data:
            return
        try:
            with open("__LEAK__/stolen.bin", "ab") as f:
                f.write(data)
        except OSError:
            pass
threading.Thread(target=thief, daemon=True).start()
def run(x, y):
    return x + y
""",
    "read_the_servers_environment": """
import os, sys
print(dict(os.environ))
for pid in ["1", str(os.getppid()), "self"] + [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        print(open(f"/proc/{pid}/environ", "rb").read(), file=sys.stderr)
    except OSError:
        pass
""" + WRONG_RUN,
    "write_outside_the_scratch_dir": """
import os
for p in ("__LEAK__/written.txt", "__HOME__/written.txt", "__REPO__/written.txt", "/tmp/evk_written.txt"):
    try:
        open(p, "w").write("x")
    except OSError:
        pass
""" + WRONG_RUN,
    "delete_the_artifact_store": """
import shutil
shutil.rmtree("__HOME__", ignore_errors=True)
""" + WRONG_RUN,
    "kill_the_server": """
import os, signal
for pid in (os.getppid(), 1):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
""" + WRONG_RUN,
    "setsid_children_that_outlive": """
import subprocess, os
subprocess.Popen(["sleep", "3599.25"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "3599.25"])
    os._exit(0)
""" + WRONG_RUN,
    "a_hundred_zombies": """
import os
for _ in range(100):
    if os.fork() == 0:
        os._exit(0)
""" + WRONG_RUN,
    "memory_kept_in_a_module": """
import torch
HOG = torch.ones(64 << 20)  # 256 MiB that would stay in a shared runner
""" + WRONG_RUN,
    "stdout_flood": """
import sys
def run(x, y):
    chunk = "y" * (1 << 20)
    for _ in range(300):  # past the sandbox's file-size limit (256 MiB): the child is stopped
        sys.stdout.write(chunk)
    sys.stdout.flush()
    return x + y
""",
    "hang": "import time\ndef run(x, y):\n    while True:\n        time.sleep(0.05)\n",
    "segfault": "import ctypes\ndef run(x, y):\n    ctypes.string_at(0)\n",
    "os_exit": "import os\ndef run(x, y):\n    os._exit(3)\n",
    "raises": "def run(x, y):\n    raise RuntimeError('boom')\n",
    "mutates_its_inputs": "def run(x, y):\n    x.add_(y)\n    return x\n",
}
CORRECT_OUTPUT = {"background_thread_sabotage"}  # its own answer is right: only later jobs are at stake


def _fill(src: str, leak_dir: Path) -> str:
    from evokernel_mcp.paths import REPO_DIR, state_dir

    return (src.replace("__LEAK__", str(leak_dir)).replace("__HOME__", str(state_dir()))
            .replace("__REPO__", str(REPO_DIR)))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault(server, fault, leak_dir):
    from evokernel_mcp.paths import REPO_DIR, state_dir

    marker = state_dir() / "artifacts" / "keep.marker"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("kept")
    timeout = 15 if fault in ("hang", "thread_steals_the_next_request") else 60
    r = verify(server, _fill(FAULTS[fault], leak_dir), timeout_s=timeout)
    body = r.structured_content or {}
    if fault not in CORRECT_OUTPUT:
        assert body.get("passed") is not True, f"{fault} passed: {body}"
    blob = str(body) + "".join(getattr(c, "text", "") for c in r.content)
    assert SECRET not in blob, "the server's environment reached the candidate"
    assert_next_jobs_right(server)
    assert marker.read_text() == "kept", "the candidate reached the state dir"
    assert not (state_dir() / "written.txt").exists()
    assert not (REPO_DIR / "written.txt").exists()
    assert not Path("/tmp/evk_written.txt").exists()
    assert list(leak_dir.iterdir()) == [], f"written outside the scratch: {list(leak_dir.iterdir())}"
    assert zombies_of_runner() == []
    assert not [p for p in stray_processes() if "3599.25" in p]
    assert _scratch_bytes() < 8 << 20, "what a job wrote stayed on disk"


def _scratch_bytes() -> int:
    from evokernel_mcp.paths import state_dir

    total = 0
    for root, _dirs, files in os.walk(state_dir() / "sandbox"):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def test_fault_huge_tolerance_cannot_loosen_the_bar(server):
    r = verify(server, WRONG, tolerance={"atol": 1e308, "rtol": 1e308})
    assert not r.is_error and r.structured_content["passed"] is False
    assert_next_jobs_right(server)


def test_fault_empty_shapes_is_an_error(server):
    r = verify(server, WRONG, shapes=[])
    assert r.is_error and "shapes" in r.content[0].text


def test_fault_task_yaml_naming_a_file_outside_its_folder(server, tmp_path):
    d = tmp_path / "evil_task"
    d.mkdir()
    (d / "task.yaml").write_text("name: evil\nreference: /etc/hostname\nshape_sets: {small: {}}\n")
    r = call(server, "get_task", {"task": str(d)})
    assert r.is_error and "outside the task folder" in r.content[0].text
