"""CLI: --version, tools with arguments, call --args-file with @file values; call follows a job handle to its end
unless --no-wait, which says that the job ends with the command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evokernel_mcp import __version__
from evokernel_mcp.cli import ArgsError, expand_at_files, load_call_args


def test_version():
    out = subprocess.run([sys.executable, "-m", "evokernel_mcp", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"evokernel-mcp {__version__}"


def test_args_file_and_at_values(tmp_path):
    (tmp_path / "cand.py").write_text("def run(x):\n    return x\n")
    f = tmp_path / "args.json"
    f.write_text(json.dumps({"candidate": "@cand.py", "task": "vector_add", "note": "@@literal", "n": 3}))
    args = load_call_args(None, str(f))
    assert args == {"candidate": "def run(x):\n    return x\n", "task": "vector_add", "note": "@literal", "n": 3}
    with pytest.raises(ArgsError, match="cannot read"):
        expand_at_files({"a": ["@missing.py"]}, tmp_path)
    with pytest.raises(ArgsError, match="not both"):
        load_call_args("{}", str(f))
    with pytest.raises(ArgsError, match="JSON object"):
        load_call_args("[1]", None)


def test_tools_lists_arguments():
    out = subprocess.run([sys.executable, "-m", "evokernel_mcp", "tools", "--inproc"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "compile_kernel  [Compile a kernel" in out.stdout
    assert "    target: gfx90a|gfx942|gfx950" in out.stdout and "    source: string (required)" in out.stdout


def _verify_args(tmp_path):
    (tmp_path / "cand.py").write_text("def run(a, b):\n    return a + b\n")
    (tmp_path / "args.json").write_text(json.dumps({"task": "vector_add", "candidate": "@cand.py",
                                                    "shapes": ["small"], "seeds": 1, "wait_s": 0}))
    return str(tmp_path / "args.json")


def test_call_follows_a_job_to_its_end_by_default(tmp_path):
    out = subprocess.run([sys.executable, "-m", "evokernel_mcp", "call", "verify_vs_pytorch", "--args-file",
                          _verify_args(tmp_path)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert "following it to its end" in out.stderr, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["passed"] is True and out.returncode == 0, out.stdout[-2000:]


def test_call_no_wait_says_the_job_ends_with_the_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "evokernel_mcp", "call", "verify_vs_pytorch", "--args-file",
                          _verify_args(tmp_path), "--no-wait"], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["job"]["job_id"] == data["job_id"], out.stdout[-2000:]
    assert f"runs as job {data['job_id']}" in out.stderr
    assert "ends when this command exits, so no later command can fetch its result" in out.stderr
    assert "following it" not in out.stderr
