"""Cancelling the MCP request that waits on a job kills the job, and the next verify still works."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
from mcp import Client

from evokernel_mcp.app import get_app
from evokernel_mcp.server import build_server

CANDIDATES = Path(__file__).resolve().parent / "candidates"


def test_cancelled_request_cancels_its_job_and_next_verify_passes():
    hang = (CANDIDATES / "hang.py").read_text()
    good = (CANDIDATES / "vadd_triton.py").read_text()

    async def main():
        async with Client(build_server()) as c:
            before = set(get_app().jobs._jobs)
            with anyio.move_on_after(6):  # the client gives up: its request is cancelled
                await c.call_tool("verify_vs_pytorch", {"task": "vector_add", "candidate": hang, "shapes": ["small"],
                                                        "seeds": 1, "timeout_s": 120, "wait_s": 100})
            new = [j for j in get_app().jobs._jobs if j not in before]
            assert len(new) == 1, "one verify job was submitted"
            deadline = time.monotonic() + 30
            state = None
            while time.monotonic() < deadline:
                state = get_app().jobs.status(new[0]).state
                if state == "cancelled":
                    break
                await anyio.sleep(0.2)
            assert state == "cancelled", f"job still {state} after its request was cancelled"
            r = await c.call_tool("verify_vs_pytorch", {"task": "vector_add", "candidate": good, "shapes": ["small"],
                                                        "seeds": 1, "wait_s": 120})
            assert not r.is_error and r.structured_content["passed"] is True

    anyio.run(main)
