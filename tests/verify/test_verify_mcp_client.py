"""The verify/task/job tools through the SDK's in-memory Client."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp import Client

from evokernel_mcp.server import build_server

VADD = (Path(__file__).parent / "candidates" / "vadd_triton.py").read_text()


def test_tools_through_in_memory_client():
    async def main():
        progress = []

        async def on_progress(done, total, message):
            progress.append((done, total, message))

        async with Client(build_server()) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"list_tasks", "get_task", "verify_vs_pytorch", "job_status", "job_result", "cancel_job"} <= names
            r = await c.call_tool("get_task", {"task": "conv3d_depthwise"})
            assert not r.is_error and r.structured_content["shape_sets"][-1]["flops"] == 16312320000.0
            r = await c.call_tool("verify_vs_pytorch", {"task": "vector_add", "candidate": VADD, "shapes": ["small"],
                                                        "seeds": 2, "wait_s": 0})
            assert not r.is_error and r.structured_content["job_id"] and r.structured_content.get("passed") is None \
                and r.structured_content["job"]["job_id"] == r.structured_content["job_id"]
            job_id = r.structured_content["job_id"]
            r = await c.call_tool("job_status", {"job_id": job_id})
            assert not r.is_error and r.structured_content["state"] in ("queued", "running", "done")
            r = await c.call_tool("job_result", {"job_id": job_id, "wait_s": 120}, progress_callback=on_progress)
            sc = r.structured_content
            assert not r.is_error and sc["finished"] and sc["passed"] is True, sc
            r = await c.call_tool("verify_vs_pytorch", {"task": "vector_add", "candidate": VADD, "shapes": ["small"],
                                                        "seeds": 1, "wait_s": 120}, progress_callback=on_progress)
            assert not r.is_error and r.structured_content["passed"] is True
            assert progress, "progress notifications were forwarded while waiting"
            r = await c.call_tool("verify_vs_pytorch", {"task": "nope", "candidate": VADD})
            assert r.is_error and "list_tasks" in r.content[0].text
            r = await c.call_tool("job_status", {"job_id": "job-000000000000"})
            assert r.is_error

    anyio.run(main)
