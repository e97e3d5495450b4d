"""The CUDA stack limit setting (runtime/cuda_stack.py) reaches every sandboxed CUDA child's start, and nothing
else: a CPU child never gets it, and 0 leaves the driver's default. The argv is read off the Popen a real Child
makes (the start is stopped there)."""

from __future__ import annotations

import pytest

from evokernel_mcp import settings
from evokernel_mcp.runtime import child_proc, sandbox
from evokernel_mcp.runtime.cuda_stack import limit_stack


class _Stop(Exception):
    pass


def _argv_of_child(monkeypatch, tmp_path, device: str, stack: str | None) -> list[str]:
    seen: list[str] = []

    def popen(argv, *a, **k):
        seen.extend(argv)
        raise _Stop()
    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path))
    if stack is not None:
        monkeypatch.setattr(settings, "get", lambda: settings.load(cuda_stack_bytes=int(stack)))
    monkeypatch.setattr(child_proc.subprocess, "Popen", popen)
    with pytest.raises(_Stop):
        child_proc.Child(device, sandbox.level_candidates()[0], warm=False)
    return seen


def _flag(argv: list[str]) -> str | None:
    return argv[argv.index("--cuda-stack") + 1] if "--cuda-stack" in argv else None


def test_a_cuda_child_starts_with_the_stack_setting_and_a_cpu_child_without(monkeypatch, tmp_path):
    assert settings.load().cuda_stack_bytes == 256  # the default
    assert _flag(_argv_of_child(monkeypatch, tmp_path, "cuda:0", None)) == "256"
    assert _flag(_argv_of_child(monkeypatch, tmp_path, "cpu", None)) is None


def test_a_stack_setting_of_zero_leaves_the_drivers_default(monkeypatch, tmp_path):
    assert _flag(_argv_of_child(monkeypatch, tmp_path, "cuda:0", "0")) is None
    assert _flag(_argv_of_child(monkeypatch, tmp_path, "cuda:0", "512")) == "512"


def test_no_limit_is_set_without_a_cuda_device_and_nothing_fails():
    assert limit_stack(0) is None
    if not __import__("torch").cuda.is_available():
        assert limit_stack(256) is None


def test_the_setting_refuses_a_negative_stack():
    with pytest.raises(ValueError):
        settings.load(cuda_stack_bytes=-1)
