"""Long calls: a job handle within wait_s, strictly increasing progress, list_jobs, and the job cancelled
when its caller's connection closes unless it was started with detach=true.

A stand-in long tool (registered on a fresh server, like any tool added later) submits a plain job to the
real JobManager: it reports the same progress figure repeatedly, then sleeps until cancelled."""

from __future__ import annotations

import time
from typing import Annotated

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field
from surface_samples import minimal

from evokernel_mcp.server import build_server


class SlowResult(BaseModel):
    state: str = "done"
    job_id: str | None = None
    value: int | None = None


async def slow_tool(
    seconds: Annotated[float, Field(description="How long the job runs.")] = 30,
    wait_s: Annotated[float, Field(description="Seconds to wait.")] = 50,
    ctx: Context | None = None,
) -> SlowResult:
    """A long tool for tests."""
    from evokernel_mcp.app import get_app
    from evokernel_mcp.runtime.submit import wait_job

    async def fn(jctx):
        for i in range(int(seconds * 20)):
            await jctx.progress(1 if i < 5 else i, 1000, f"step {i}")  # the first figure repeats
            await anyio.sleep(0.05)
        return SlowResult(value=7)

    mgr = get_app().jobs
    job_id = await mgr.submit(kind="slow", device=None, fn=fn, timeout_s=600)
    out = await wait_job(job_id, wait_s, ctx=ctx, jobs=mgr)
    if out.state == "done":
        return out.result
    return SlowResult(state=out.state, job_id=job_id)


def _server():
    # lifespan=None: the job manager outlives each client session, as under HTTP (one lifespan, many
    # sessions); with stdio or an in-memory client the lifespan's end stops every job anyway.
    s = build_server(lifespan=None)
    s.add_tool(slow_tool, name="slow_tool")
    return s


@pytest.fixture(autouse=True)
def _close_app():
    yield
    from evokernel_mcp.app import close_app

    anyio.run(close_app)


def _state(job_id: str) -> str:
    from evokernel_mcp.app import get_app

    return get_app().jobs.status(job_id).state


def _wait_state(job_id: str, want: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _state(job_id) != want:
        time.sleep(0.05)
    return _state(job_id)


def test_handle_progress_list_and_cancel_when_caller_goes_away():
    """A handshake-era session (stdio, stateful HTTP; mode='legacy' here): its jobs end with it."""
    seen: list[float] = []

    async def progress(p, total, message):
        seen.append(p)

    async def main():
        async with Client(_server(), mode="legacy") as c:
            r = await c.call_tool("slow_tool", {"seconds": 30, "wait_s": 3.0}, progress_callback=progress)
            sc = r.structured_content
            listed = (await c.call_tool("list_jobs", {})).structured_content["jobs"]
            again = await c.call_tool("job_result", {"job_id": sc["job"]["job_id"], "wait_s": 0.3})
            return r, sc, listed, again
    r, sc, listed, again = anyio.run(main)
    assert not r.is_error
    job = sc["job"]
    assert job["state"] == "running" and job["tool"] == "slow_tool" and sc["job_id"] == job["job_id"]
    assert job["next_call"].startswith("job_result(") and "job_result" in r.content[0].text
    assert [j["job_id"] for j in listed] == [job["job_id"]]
    assert listed[0]["tool"] == "slow_tool" and "slow_tool(seconds=30" in listed[0]["summary"]
    assert listed[0]["state"] == "running" and listed[0]["age_s"] >= 0
    assert not again.structured_content["finished"]
    assert len(seen) >= 3 and all(b > a for a, b in zip(seen, seen[1:])), seen  # strictly increasing
    # the client is gone: the job it left behind is cancelled
    assert _wait_state(job["job_id"], "cancelled") == "cancelled"


def test_detached_job_outlives_its_caller_and_is_listed_for_all_callers():
    async def first():
        async with Client(_server(), mode="legacy") as c:
            r = await c.call_tool("slow_tool", {"seconds": 3, "wait_s": 0.2, "detach": True})
            return r.structured_content["job"]

    job = anyio.run(first)
    assert job["detached"] is True
    time.sleep(0.5)
    assert _state(job["job_id"]) in ("running", "done")  # not cancelled with its caller (done: a slow host)

    async def second():
        async with Client(_server(), mode="legacy") as c:
            mine = (await c.call_tool("list_jobs", {})).structured_content["jobs"]
            everyone = (await c.call_tool("list_jobs", {"all_callers": True})).structured_content["jobs"]
            res = await c.call_tool("job_result", {"job_id": job["job_id"], "wait_s": 20})
            return mine, everyone, res.structured_content
    mine, everyone, res = anyio.run(second)
    assert job["job_id"] not in [j["job_id"] for j in mine]
    assert job["job_id"] in [j["job_id"] for j in everyone]
    assert res["finished"] and res["value"] == 7 and res["status"]["tool"] == "slow_tool"


def test_request_cancelled_cancels_the_job():
    job_ids: list[str] = []

    async def main():
        async with Client(_server()) as c:
            with anyio.move_on_after(1.0):
                await c.call_tool("slow_tool", {"seconds": 30, "wait_s": 40})
            jobs = (await c.call_tool("list_jobs", {})).structured_content["jobs"]
            job_ids.extend(j["job_id"] for j in jobs)
            with anyio.fail_after(60):  # a hang guard: the 30 s job ends 'done' if the cancel never comes
                while (jobs := (await c.call_tool("list_jobs", {})).structured_content["jobs"]) \
                        and jobs[0]["state"] in ("queued", "running"):
                    await anyio.sleep(0.05)
            return jobs
    jobs = anyio.run(main)
    assert job_ids and jobs[0]["state"] == "cancelled", jobs


def test_detach_must_be_boolean():
    async def main():
        async with Client(_server()) as c:
            return await c.call_tool("slow_tool", {"seconds": 1, "detach": "yes"})
    r = anyio.run(main)
    assert r.is_error and r.structured_content["error"]["kind"] == "bad_argument"


def test_stateless_requests_share_the_clients_jobs():
    """2026-07-28 requests have no session: list_jobs shows the client's jobs across requests, and a job
    that returned a handle keeps running after its request (job_result / cancel_job finish it)."""
    async def main():
        async with Client(_server()) as c:
            r = await c.call_tool("slow_tool", {"seconds": 30, "wait_s": 0.2})
            job_id = r.structured_content["job"]["job_id"]
            await anyio.sleep(0.3)
            listed = (await c.call_tool("list_jobs", {})).structured_content["jobs"]
            cancelled = (await c.call_tool("cancel_job", {"job_id": job_id})).structured_content
            return job_id, listed, cancelled
    job_id, listed, cancelled = anyio.run(main)
    assert [j["job_id"] for j in listed] == [job_id] and listed[0]["state"] in ("queued", "running")
    assert cancelled["state"] == "cancelled"


def _long_tool_results():
    """(tool, a result of its own model) for every long tool: required fields, plus a failed verdict."""
    from typing import get_type_hints

    from evokernel_mcp.surface import registry

    out = []
    for t in build_server()._tool_manager.list_tools():
        if not registry.is_long(t.fn):
            continue
        model = get_type_hints(t.fn)["return"]
        schema = model.model_json_schema()
        data = minimal(schema, schema)
        if "error" in schema["properties"]:
            data["error"] = {"kind": "crash", "message": "the candidate died"}
        data["provenance"] = [{"field": "x", "source": "test"}]
        out.append((t.name, model.model_validate(data)))
    return out


def test_every_long_tool_answers_in_one_shape_directly_and_through_job_result():
    """A result has the same top-level fields (and values) whether the tool answered within wait_s or the
    agent fetched it with job_result; job_result adds `finished`, `status` (the job), and job_id and state
    where the tool has none."""
    from evokernel_mcp.app import get_app
    from evokernel_mcp.surface.server import EvoServer

    results = _long_tool_results()
    assert {"verify_vs_pytorch", "benchmark", "profile_pmc", "thread_trace", "measure_ceilings",
            "evaluate_batch"} <= {name for name, _ in results}

    async def main():
        got = {}
        async with Client(_server()) as c:
            for name, res in results:
                async def fn(jctx, res=res):
                    return res
                job_id = await get_app().jobs.submit(kind=name, device=None, fn=fn, timeout_s=60)
                got[name] = (job_id, await c.call_tool("job_result", {"job_id": job_id, "wait_s": 20}))
        return got

    got = anyio.run(main)
    for name, res in results:
        job_id, r = got[name]
        direct = EvoServer._result(None, name, res.model_dump(mode="json")).structured_content
        via = r.structured_content
        assert not r.is_error and via["finished"] and via["job_id"] == job_id, (name, via)
        assert via["status"]["job_id"] == job_id and "result" not in via, name
        for key, value in direct.items():
            if key != "job_id":
                assert via.get(key) == value, (name, key, via.get(key), value)
        assert set(via) - set(direct) <= {"finished", "status", "job_id", "state"}, (name, set(via) - set(direct))
