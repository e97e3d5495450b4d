"""Helpers of the fault suite: tool calls through the real client, and the checks after each fault."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

SECRET = "evk-planted-secret-7f3a9c"
GOOD = "def run(x, y):\n    return x + y\n"
WRONG = "def run(x, y):\n    return x - y\n"


def call(srv, tool: str, args: dict):
    """One tool call through the SDK's real client; returns the CallToolResult."""
    from mcp import Client

    async def main():
        async with Client(srv) as c:
            return await c.call_tool(tool, args)

    return anyio.run(main)


def verify(srv, candidate: str, **kw):
    args = {"task": "vector_add", "candidate": candidate, "shapes": ["small"], "seeds": 1, "wait_s": 120,
            "timeout_s": 60, **kw}
    return call(srv, "verify_vs_pytorch", args)


def runner_pids() -> list[int]:
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and "evokernel_mcp.runtime.runner" in cmd:
            out.append(int(name))
    return out


def _settled(probe, settle_s: float):
    """probe() once it is empty, or what it still finds after settle_s (what a killed job left must go). settle_s
    is a hang guard, not a speed requirement: a clean host returns at once, a loaded one may take seconds."""
    import time

    deadline = time.monotonic() + settle_s
    while (found := probe()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def stray_processes(settle_s: float = 30.0) -> list[str]:
    """Descendants of the runner that are not our own sandboxed children (spares, cached references), and
    that stay so past settle_s: a killed child's orphans die, and are collected by the runner, within it."""
    return _settled(_strays_now, settle_s)


def _strays_now() -> list[str]:
    from evokernel_mcp.runtime.sandbox import _children_map

    kids = _children_map()
    strays, todo = [], runner_pids()
    while todo:
        for c in kids.get(todo.pop(), []):
            todo.append(c)
            try:
                cmd = Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state == "Z" or not any(ours in cmd for ours in ("evokernel_mcp.runtime.child", "evokernel_mcp.runtime.zygote")):
                strays.append(f"{c} [{state}] {cmd[:120]}")
    return strays


def zombies_of_runner(settle_s: float = 30.0) -> list[int]:
    """Zombies whose parent is the runner and that stay so past settle_s (the runner collects the orphans
    of killed children every half second)."""
    return _settled(_zombies_now, settle_s)


def _zombies_now() -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            f = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if f[0] == "Z" and int(f[1]) in runner_pids():
            out.append(int(name))
    return out


def assert_next_jobs_right(srv) -> None:
    """The server answers; a correct candidate passes and a wrong one fails; no process of the job is left."""
    good = verify(srv, GOOD)
    assert not good.is_error and good.structured_content["passed"] is True, good.structured_content
    wrong = verify(srv, WRONG)
    assert not wrong.is_error and wrong.structured_content["passed"] is False, wrong.structured_content
    strays = stray_processes()
    assert strays == [], strays
