"""run_worker_job: the one helper every GPU tool uses to run a runner op as a job with wait_s.

    outcome = await run_worker_job(kind="verify", op="verify", payload={...}, device=None,
                                   timeout_s=60, wait_s=50, ctx=ctx, build=to_verify_result)

- The op runs on the device's runner under `timeout_s` (the runner's cold start is not counted).
- `build(reply, job_ctx)` turns the WorkerReply into the job's result model (runs in the job, so
  job_result later returns the same model); default: the WorkerReply itself.
- Progress from the runner is forwarded to the MCP request's `ctx.report_progress` while the call waits.
- If the job is not finished after wait_s the outcome has a non-final state: return its job_id to the
  agent (job_status / job_result / cancel_job finish the story).
- If the MCP request is cancelled while waiting, the job is cancelled too (its runner op is killed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict, Field

from evokernel_mcp.models import ErrorInfo, JobHandle, Model, Provenance
from evokernel_mcp.runtime.jobs import JobContext, JobManager, JobOutcome, JobStatus, JobSummary
from evokernel_mcp.runtime.protocol import WorkerReply

# Time a job may spend beyond the op's own limit: queueing is not counted, a runner (re)start is.
START_ALLOWANCE_S = 240.0

Build = Callable[[WorkerReply, JobContext], BaseModel]


def _jobs(jobs: JobManager | None) -> JobManager:
    if jobs is not None:
        return jobs
    from evokernel_mcp.app import get_app

    return get_app().jobs


def progress_forwarder(ctx: Any):
    """An on_progress callback that forwards to an MCP Context (None when there is no ctx).

    The MCP spec says progress MUST increase with each notification; a job may report the same figure
    twice (or go back, e.g. a new phase): then the value sent is nudged just above the last one, and
    total is raised when needed, so every notification the client sees is strictly larger."""
    if ctx is None:
        return None
    last = [float("-inf")]

    async def forward(done: float, total: float, message: str) -> None:
        value = float(done)
        if value <= last[0]:
            value = last[0] + 1e-3 * max(1.0, abs(float(total) or 1.0))
        last[0] = value
        tot = max(float(total), value) if total else None
        await ctx.report_progress(value, tot, message)

    return forward


async def wait_job(job_id: str, wait_s: float, *, ctx: Any = None, cancel_on_abort: bool = True,
                   jobs: JobManager | None = None) -> JobOutcome:
    """Wait up to wait_s, forwarding progress; cancel the job if this waiting call is cancelled
    (cancel_on_abort), unless the job was started with detach=true."""
    mgr = _jobs(jobs)
    try:
        return await mgr.wait(job_id, wait_s, on_progress=progress_forwarder(ctx))
    except BaseException:
        if cancel_on_abort and not mgr.is_detached(job_id):
            with anyio.CancelScope(shield=True), anyio.move_on_after(20):
                await mgr.cancel(job_id)
        raise


async def run_worker_job(*, kind: str, op: str, payload: dict, device: str | None = None, timeout_s: float,
                         wait_s: float, ctx: Any = None, build: Build | None = None,
                         jobs: JobManager | None = None) -> JobOutcome:
    mgr = _jobs(jobs)

    async def fn(jctx: JobContext) -> BaseModel:
        reply = await jctx.pool.call(jctx.device, op, payload, timeout_s=timeout_s, on_progress=jctx.progress,
                                     scratch_dir=jctx.scratch_dir)
        return build(reply, jctx) if build is not None else reply

    job_id = await mgr.submit(kind=kind, device=device, fn=fn, timeout_s=timeout_s + START_ALLOWANCE_S)
    return await wait_job(job_id, wait_s, ctx=ctx, jobs=mgr)


# ---------------------------------------------------------------- the job tools (plain functions)
class JobResult(Model):
    """A job's answer in the shape its tool answers in: once done, the tool's own fields (passed, cases,
    results, ranked ...) at the top level, exactly as when the tool answered within wait_s, with
    `finished` and `status` (the job) beside them; while it runs, the same job handle (`job`) the tool
    returns; failed or cancelled, `error` says why."""

    model_config = ConfigDict(extra="allow")  # the tool's own fields

    job_id: str
    state: str = Field(description="The tool's state once done (as in its own answer), else the job's.")
    finished: bool
    error: ErrorInfo | None = Field(default=None, description="The tool's error, or why the job did not finish.")
    status: JobStatus = Field(description="The job: tool, device, times, progress.")
    message: str | None = None
    job: JobHandle | None = Field(default=None, description="While the job runs: its handle (as the tool's own "
                                  "answer after wait_s).")
    provenance: list[Provenance] = Field(default_factory=lambda: [Provenance(
        field="state", source="evokernel job manager", detail="this server process; times from its clock")])


def job_handle(status: JobStatus, tool: str | None = None) -> JobHandle:
    """The handle of an unfinished job (what a long tool returns after wait_s, and job_result meanwhile)."""
    prog = None
    if status.progress is not None:
        prog = f"{status.progress.done:g}/{status.progress.total:g} {status.progress.message}".strip()
    return JobHandle(job_id=status.job_id, tool=tool or status.tool or status.kind, state=status.state,
                     age_s=round(time.time() - status.created_at, 1), progress=prog, detached=status.detached,
                     next_call=f"job_result(job_id='{status.job_id}', wait_s=50)")


async def job_status(
    job_id: Annotated[str, Field(description="Id returned by a long-running tool (verify_vs_pytorch, benchmark ...).")],
) -> JobStatus:
    """Look at a job without waiting: state (queued/running/done/failed/cancelled), elapsed seconds,
    queue position, latest progress. Call job_result to fetch the result."""
    return _jobs(None).status(job_id)


async def job_result(
    job_id: Annotated[str, Field(description="Id returned by a long-running tool.")],
    wait_s: Annotated[float, Field(ge=0, le=600, description="Seconds to wait for it to finish.")] = 50,
    ctx: Context | None = None,
) -> JobResult:
    """Fetch a job's result, waiting up to wait_s seconds. If still running, call again later; the job
    keeps running (abandoning this call does not stop it: use cancel_job).

    Done, it answers as the tool itself would have within wait_s (passed, cases, results, ranked ... at the
    top level), with `finished` and `status` (the job); still running, with the same `job` handle."""
    mgr = _jobs(None)
    outcome = await wait_job(job_id, wait_s, ctx=ctx, cancel_on_abort=False, jobs=mgr)
    status = mgr.status(job_id)
    if not outcome.finished:
        return JobResult(job_id=job_id, state=outcome.state, finished=False, status=status, job=job_handle(status),
                         message=f"still {outcome.state}; call job_result('{job_id}', wait_s) again")
    own = outcome.result.model_dump(mode="json") if outcome.result is not None else {}
    own = {k: v for k, v in own.items() if v is not None}
    # the envelope's own keys (finished, status) win over a tool field of the same name
    return JobResult(**{"job_id": job_id, "state": outcome.state, "error": outcome.error, **own,
                        "finished": True, "status": status})


async def cancel_job(
    job_id: Annotated[str, Field(description="Id returned by a long-running tool.")],
) -> JobStatus:
    """Stop a queued or running job; a running op is killed and its runner replaced."""
    return await _jobs(None).cancel(job_id)


class JobList(Model):
    """The caller's jobs, newest first."""

    jobs: list[JobSummary] = Field(default_factory=list)
    provenance: list[Provenance] = Field(default_factory=lambda: [Provenance(
        field="jobs", source="evokernel job manager", detail="this server process; ages from its clock")])


def list_jobs_for(owner: str | None, all_callers: bool = False, include_finished: bool = True) -> JobList:
    """list_jobs' logic: the jobs of `owner` (the MCP connection), or every job with all_callers."""
    return JobList(jobs=_jobs(None).summaries(None if all_callers else owner, include_finished))
