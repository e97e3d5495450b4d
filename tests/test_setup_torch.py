"""tools/setup.sh's torch step on a host without a GPU: the CPU wheel index when it answers, pip's configured
indexes when it does not, the build it installed said either way, and its bytecode compiled after it. The venv's
python is a stand-in that records the pip calls (no download); the index is a real HTTP server on loopback, or a
closed port."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None or os.path.exists("/dev/kfd"),
                                reason="the CPU-host path of tools/setup.sh (this host has a GPU)")

# `import torch` fails until a `pip install` ran; the build probe then answers as a CPU wheel would.
STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/calls"
case "$*" in
  "-m pip install"*) touch "$(dirname "$0")/installed"; exit 0 ;;
  "-m compileall"*) exit 0 ;;
  "-c import sysconfig"*) echo "$(dirname "$0")/site"; exit 0 ;;
  "-W ignore -c"*) echo "2.13.0+cpu (CPU only: no CUDA, no HIP)"; exit 0 ;;
  "-c import torch"*) [ -e "$(dirname "$0")/installed" ]; exit $? ;;
esac
exit 3
"""


def _venv(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(STAND_IN)
    (bin_dir / "python").chmod(0o755)
    return tmp_path / "venv"


def _run(venv: Path, index: str) -> tuple[str, list[str]]:
    env = {**os.environ, "VENV": str(venv), "PYTHON": sys.executable, "TORCH_CPU_INDEX": index}
    env.pop("TORCH_SPEC", None)
    out = subprocess.run(["bash", str(REPO / "tools" / "setup.sh"), "--torch-only"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stderr, (venv / "bin" / "calls").read_text().splitlines()


@pytest.fixture
def cpu_index(tmp_path):
    (tmp_path / "index" / "torch").mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "index"))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cpu_index_used_when_it_answers(tmp_path, cpu_index):
    stderr, calls = _run(_venv(tmp_path), cpu_index)
    assert f"-m pip install -q --no-compile torch==2.13.0 --index-url {cpu_index}" in calls, calls
    assert calls[-1].startswith("-m compileall -q -j 0 "), "pip writes no bytecode: the step compiles it after"
    assert "installing the CPU build of torch==2.13.0" in stderr
    assert "installed torch 2.13.0+cpu (CPU only: no CUDA, no HIP)" in stderr


def test_configured_indexes_when_the_cpu_index_is_unreachable(tmp_path):
    index = f"http://127.0.0.1:{_closed_port()}/whl/cpu"
    stderr, calls = _run(_venv(tmp_path), index)
    pip = [c for c in calls if c.startswith("-m pip install")]
    assert pip == ["-m pip install -q --no-compile torch==2.13.0"], calls
    assert f"{index} is not reachable" in stderr and "CUDA build" in stderr
    assert "installed torch 2.13.0+cpu" in stderr


def test_installed_torch_is_left_alone_and_named(tmp_path):
    venv = _venv(tmp_path)
    (venv / "bin" / "installed").touch()
    stderr, calls = _run(venv, "http://127.0.0.1:9/")
    assert not [c for c in calls if c.startswith("-m pip")], calls
    assert "torch already installed: 2.13.0+cpu" in stderr
