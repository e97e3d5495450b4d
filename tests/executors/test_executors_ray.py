"""The batch executors' acceptance cases (batch_cases.py) on the Ray executor against a local Ray instance (CPU
resources only): the same ranked table as the local pool (test_executors_local.py). Then cancelling a Ray batch
stops the stages running inside the actors."""

from __future__ import annotations

import anyio
import pytest
from batch_cases import ARGS, SOURCES, TASK, cands, check

from evokernel_mcp.batch import api, cascade
from evokernel_mcp.batch.models import BatchCandidate
from evokernel_mcp.runtime.jobs import JobManager
from evokernel_mcp.tasks import load_task

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.two_cpus]  # a Ray instance of 2 CPUs, two stages at once


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


def _run_on(ex, candidates, *, cancel_when=None, timeout_s=ARGS["timeout_s"]):
    mgr = JobManager(devices=["cpu"])
    plan = cascade.make_plan(load_task(TASK), stages=None, overrides=None, compile=None,
                             **{**ARGS, "timeout_s": timeout_s})

    async def main():
        job = await api.submit_batch(plan, candidates, jobs=mgr, executor=ex)
        if cancel_when is not None:
            await cancel_when()
            return await mgr.cancel(job)
        return await mgr.wait(job, 900)

    try:
        return anyio.run(main)
    finally:
        anyio.run(mgr.aclose)


# the stage limit here: this pass has the host to itself (the two_cpus mark), and the hanging candidate sleeps
RAY_TIMEOUT_S = 15.0


def test_ray_executor_gives_the_same_table_as_the_local_pool(ray_executor):
    out = _run_on(ray_executor, cands(), timeout_s=RAY_TIMEOUT_S)
    assert out.state == "done", out.error
    res = out.result
    assert res.slots == 2 and res.executor.startswith("ray") and "cpu@" in res.executor
    rows = [r.model_dump() for r in res.ranked]
    check(rows)  # the table test_executors_local.py asserts for the local pool
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
