"""evaluate_batch on the local pool through the MCP tool: the batch cases of batch_cases.py ranked as expected
(Ray gives the same table: test_executors_ray.py)."""

from __future__ import annotations

import anyio
import pytest
from batch_cases import ARGS, TASK, cands, check
from mcp import Client

pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_local_pool_ranks_the_batch():
    from evokernel_mcp.server import build_server

    async def main():
        async with Client(build_server()) as c:
            return await c.call_tool("evaluate_batch", {"task": TASK, "wait_s": 600, **{
                k: v for k, v in ARGS.items() if v is not None}, "candidates": [c.model_dump() for c in cands()]})

    res = anyio.run(main)
    assert not res.is_error, res.content
    sc = res.structured_content
    assert sc["state"] == "done" and sc["stages"] == ["verify_small", "verify", "benchmark"], sc
    assert sc["executor"].startswith("local") and sc["slots"] == 1
    check(sc["ranked"])
