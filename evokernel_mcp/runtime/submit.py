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

from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from evokernel_mcp.models import ErrorInfo, Model, Provenance
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
    """A job's state and, once finished, its result (the same model the submitting tool returns)."""

    job_id: str
    state: str
    finished: bool
    result: dict[str, Any] | None = Field(default=None, description="The tool's result (e.g. a VerifyResult) when done.")
    error: ErrorInfo | None = None
    status: JobStatus
    message: str | None = None
    provenance: list[Provenance] = Field(default_factory=lambda: [Provenance(
        field="result", source="evokernel job manager", detail="the result carries its own provenance")])


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
    keeps running (abandoning this call does not stop it: use cancel_job)."""
    mgr = _jobs(None)
    outcome = await wait_job(job_id, wait_s, ctx=ctx, cancel_on_abort=False, jobs=mgr)
    result = outcome.result.model_dump(mode="json") if outcome.result is not None else None
    msg = None if outcome.finished else f"still {outcome.state}; call job_result('{job_id}', wait_s) again"
    return JobResult(job_id=job_id, state=outcome.state, finished=outcome.finished, result=result,
                     error=outcome.error, status=mgr.status(job_id), message=msg)


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
