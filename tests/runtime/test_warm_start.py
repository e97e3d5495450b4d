"""The server warms its first device's runner (and with it the spare children) at start-up where warm_start
says so: auto on a GPU, never on the CPU path unless asked; a close while it starts leaves no runner behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from evokernel_mcp.runtime.jobs import JobManager
from evokernel_mcp.runtime.pool import RunnerPool


def _warm_calls(monkeypatch, devices: list[str], policy: str, use_settings) -> list[str]:
    use_settings(warm_start=policy)
    seen: list[str] = []

    async def fake_warm(self, device=None):
        seen.append(device)
        return True
    monkeypatch.setattr(RunnerPool, "warm", fake_warm)
    m = JobManager(devices=devices)
    try:
        got = m.warm_soon()
        for _ in range(200):  # the portal runs it soon, in its own thread
            if seen or got is None:
                break
            time.sleep(0.01)
    finally:
        anyio.run(m.aclose)
    assert seen == ([got] if got else [])
    return seen


@pytest.mark.parametrize("devices, policy, warmed", [
    (["cuda:0", "cuda:1"], "auto", ["cuda:0"]),  # the default on a GPU host: the first device only
    (["cpu"], "auto", []),                        # the CPU path does not start a runner nobody asked for
    (["cpu"], "on", ["cpu"]),
    (["rocm:0"], "off", []),
])
def test_warm_start_policy(monkeypatch, use_settings, devices, policy, warmed):
    assert _warm_calls(monkeypatch, devices, policy, use_settings) == warmed


def test_the_default_is_auto_and_serve_sets_it():
    from evokernel_mcp import cli, settings

    assert settings.load().warm_start == "auto"
    ns = cli.build_parser().parse_args(["serve", "--warm-start", "off"])
    assert cli._configure(ns) is None and settings.get().warm_start == "off"


def _runners_of_this_process() -> list[int]:
    """Runner processes this test process started (not other users' on a shared host)."""
    me, found = os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and b"evokernel_mcp.runtime.runner" in cmd:
            found.append(int(d.name))
    return found


def test_a_warmed_runner_serves_the_first_call_and_a_close_mid_start_leaves_none(use_settings):
    """warm(): the runner is up before any call, and the first call uses it (no second start); a close while a
    warm is still starting its runner ends that runner too."""
    use_settings(warm_start="on")
    others = set(_runners_of_this_process())  # runners of other tests' fixtures, kept for their session
    m = JobManager(devices=["cpu"])
    try:
        assert m.warm_soon() == "cpu"
        pool = m.pool
        deadline = time.monotonic() + 240
        while "cpu" not in pool._runners and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "cpu" in pool._runners, "the runner did not start at start-up"
        pid = pool._runners["cpu"].pid
        from evokernel_mcp.runtime.submit import run_worker_job

        out = anyio.run(lambda: run_worker_job(kind="test", op="ping", payload={}, timeout_s=60, wait_s=120, jobs=m))
        assert out.state == "done" and out.result.result["pid"] == pid and pool.restarts.get("cpu", 0) == 0
    finally:
        anyio.run(m.aclose)
    assert set(_runners_of_this_process()) <= others
    m = JobManager(devices=["cpu"])
    m.warm_soon()
    time.sleep(0.5)  # the runner's process is spawned, not ready
    anyio.run(m.aclose)
    assert set(_runners_of_this_process()) <= others
