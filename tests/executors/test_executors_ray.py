"""The batch executors' acceptance test on the CPU path: 6 candidates of vector_add (at CI sizes) through the
cascade, two right ones, one wrong on every size (fails verify_small), one wrong only past 1000 elements (fails
verify), one hanging (its stage times out), one slow; first on the local pool through the MCP tool, then on the
Ray executor against a local Ray instance (CPU resources only): the same ranked table. Then cancelling a Ray
batch stops the stages running inside the actors."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from evokernel_mcp.batch import api, cascade
from evokernel_mcp.batch.models import BatchCandidate
from evokernel_mcp.runtime.jobs import JobManager
from evokernel_mcp.tasks import load_task

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.two_cpus]  # a Ray instance of 2 CPUs, two stages at once

TASK = str(Path(__file__).resolve().parent / "vector_add_tiny")  # vector_add at N = 256 (tiny) and 4096 (small)
SOURCES = {
    "plus": "def run(x, y):\n    return x + y\n",
    "torch_add": "import torch\n\ndef run(x, y):\n    return torch.add(x, y)\n",
    "slow": "import time\n\ndef run(x, y):\n    time.sleep(0.02)\n    return x + y\n",
    "minus": "def run(x, y):\n    return x - y\n",
    "short": "def run(x, y):\n    out = x + y\n    out[1000:] = 0\n    return out\n",  # right only up to 1000
    "hang": "def run(x, y):\n    while True:\n        pass\n",
}
ARGS = {"shapes": None, "timeout_s": 12.0, "max_time_s": 0.2}
EXPECTED_FAILED = [("short", False, "verify"), ("hang", False, "verify_small"), ("minus", False, "verify_small")]


def _cands() -> list[BatchCandidate]:
    return [BatchCandidate(name=k, source=v) for k, v in SOURCES.items()]


def _table(rows) -> list[tuple]:
    return [(r["name"], r["valid"], r.get("failed_stage")) for r in rows]


def _check(rows) -> None:
    table = _table(rows)
    assert table[3:] == EXPECTED_FAILED, table
    assert sorted(table[:3]) == sorted((n, True, None) for n in ("plus", "torch_add", "slow"))
    assert table[2][0] == "slow", table  # 20 ms of sleep per call ranks last of the valid ones
    by = {r["name"]: r for r in rows}
    assert by["hang"]["reason"].startswith("timeout")
    assert by["minus"]["reason"].startswith("wrong_output") and by["short"]["reason"].startswith("wrong_output")
    assert all(r["speedup"] > 0 and r["median_ms"] > 0 for r in rows[:3])


@pytest.fixture(scope="module")
def local_rows():
    from evokernel_mcp.server import build_server

    async def main():
        async with Client(build_server()) as c:
            res = await c.call_tool("evaluate_batch", {"task": TASK, "wait_s": 600, **{
                k: v for k, v in ARGS.items() if v is not None}, "candidates": [c.model_dump() for c in _cands()]})
            return res

    res = anyio.run(main)
    assert not res.is_error, res.content
    sc = res.structured_content
    assert sc["state"] == "done" and sc["stages"] == ["verify_small", "verify", "benchmark"], sc
    assert sc["executor"].startswith("local") and sc["slots"] == 1
    return sc["ranked"]


@pytest.fixture(scope="module")
def ray_executor():
    from evokernel_mcp.executors.ray_executor import RayExecutor

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ex = RayExecutor(address=None)
    try:
        yield ex
    finally:
        anyio.run(ex.aclose)
        ray.shutdown()


def _run_on(ex, cands, *, cancel_when=None, timeout_s=ARGS["timeout_s"]):
    mgr = JobManager(devices=["cpu"])
    plan = cascade.make_plan(load_task(TASK), stages=None, overrides=None, compile=None,
                             **{**ARGS, "timeout_s": timeout_s})

    async def main():
        job = await api.submit_batch(plan, cands, jobs=mgr, executor=ex)
        if cancel_when is not None:
            await cancel_when()
            return await mgr.cancel(job)
        return await mgr.wait(job, 900)

    try:
        return anyio.run(main)
    finally:
        anyio.run(mgr.aclose)


def test_local_pool_ranks_the_batch(local_rows):
    _check(local_rows)


def test_ray_executor_gives_the_same_table_as_the_local_pool(ray_executor, local_rows):
    out = _run_on(ray_executor, _cands())
    assert out.state == "done", out.error
    res = out.result
    assert res.slots == 2 and res.executor.startswith("ray") and "cpu@" in res.executor
    rows = [r.model_dump() for r in res.ranked]
    _check(rows)
    assert _table(rows)[2:] == _table(local_rows)[2:]
    assert sorted(_table(rows)) == sorted(_table(local_rows))
    assert {r["device"].split("@")[0] for r in rows} == {"cpu"}
    infos = ray_executor.actor_infos()
    assert len({i["pid"] for i in infos.values()}) == 2  # two actors, two runners: the batch ran on both


def test_cancelling_a_ray_batch_stops_the_stages_in_the_actors(ray_executor):
    hangs = [BatchCandidate(name=f"hang{i}", source=SOURCES["hang"]) for i in range(3)]

    async def both_busy():
        with anyio.fail_after(120):
            while True:
                infos = await anyio.to_thread.run_sync(ray_executor.actor_infos)
                if all(i["in_flight"] == 1 for i in infos.values()):
                    return
                await anyio.sleep(0.2)

    st = _run_on(ray_executor, hangs, cancel_when=both_busy, timeout_s=300)
    assert st.state == "cancelled"

    async def idle():  # far within the 300 s stage limit: the cancel, not the time limit, ended the calls
        with anyio.fail_after(60):
            while any(i["in_flight"] for i in (await anyio.to_thread.run_sync(ray_executor.actor_infos)).values()):
                await anyio.sleep(0.1)

    anyio.run(idle)
