"""JobManager: every long operation (verify, benchmark, profile, trace) is a job with an id, a time
limit, progress, cancel, and a `wait_s` after which the tool call returns the id and the job goes on.

Design choice (robust under stdio, streamable HTTP and the in-memory test client alike): the manager
owns a *runtime loop* — an anyio event loop in a background thread (an anyio BlockingPortal) — where
the jobs and the RunnerPool live. Jobs therefore outlive the tool call (and even the client session)
that submitted them, whatever loop or task group the transport runs the call in. The public async
methods (submit/wait/status/cancel) may be awaited from any event loop: they hand work to the runtime
loop thread-safely and wait by polling (a few ms), so they need no cross-loop primitives.

Jobs on the same device run one at a time, in submission order (a FIFO lock per device): this is how
a benchmark gets the device exclusively and a profiler child process gets the GPU alone.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.from_thread
from pydantic import BaseModel

from evokernel_mcp.errors import NotFound
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.paths import prune_old_dirs, sub_state_dir
from evokernel_mcp.runtime.jobmodels import (
    CALL_SCOPE,
    FINAL,
    JobOutcome,
    JobProgress,
    JobState,
    JobStatus,
    JobSummary,
)
from evokernel_mcp.runtime.pool import RunnerPool

log = logging.getLogger(__name__)

KEEP_SCRATCH_DIRS = 64  # newest job scratch dirs kept on disk (older ones are removed)
MAX_KEPT_JOBS = 256
ProgressCb = Callable[[float, float, str], Awaitable[None]]
HEARTBEAT_S = 5.0  # a waiting call reports progress at least this often, even when the job says nothing


@dataclass
class JobContext:
    """Handed to a job's fn: its id/device, a scratch dir, progress, and the runner pool.
    `pool` must be used from inside the job (it lives in the runtime loop)."""

    job_id: str
    device: str
    scratch_dir: Path
    pool: RunnerPool
    _job: "_Job"
    timeout_s: float = 0.0

    async def progress(self, done: float, total: float, message: str = "") -> None:
        self._job.progress = JobProgress(done=float(done), total=float(total), message=message)
        self._job.progress_seq += 1


@dataclass
class _Job:
    job_id: str
    kind: str
    device: str
    timeout_s: float
    fn: Callable[[JobContext], Awaitable[BaseModel]]
    created_at: float = field(default_factory=time.time)
    state: JobState = "queued"
    started_at: float | None = None
    finished_at: float | None = None
    result: BaseModel | None = None
    error: ErrorInfo | None = None
    progress: JobProgress | None = None
    progress_seq: int = 0
    scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    tool: str = ""
    owner: str | None = None
    detached: bool = False
    summary: str = ""


class JobManager:
    """One per server process (evokernel_mcp.app.get_app().jobs). See the module doc for the design."""

    def __init__(self, devices: list[str] | None = None):
        self._devices = devices
        self._pool: RunnerPool | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._portal_cm: contextlib.AbstractContextManager | None = None
        self._start_lock = threading.Lock()
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._locks: dict[str, anyio.Lock] = {}
        self._queued: dict[str, list[str]] = {}

    # ---- runtime loop -------------------------------------------------------------------------
    def _ensure_portal(self) -> anyio.from_thread.BlockingPortal:
        with self._start_lock:
            if self._portal is None:
                self._portal_cm = anyio.from_thread.start_blocking_portal(name="evokernel-runtime")
                self._portal = self._portal_cm.__enter__()
                self._pool = RunnerPool(self._devices)
            return self._portal

    @property
    def pool(self) -> RunnerPool:
        self._ensure_portal()
        assert self._pool is not None
        return self._pool

    def warm_soon(self) -> str | None:
        """Start the first device's runner in the background where settings.warm_start says so (auto: where
        that device is a GPU); the device warmed, or None. Never raises: warming is an extra."""
        from evokernel_mcp import settings

        try:
            policy = settings.get().warm_start
            if policy == "off":
                return None
            portal = self._ensure_portal()
            device = self.pool.default_device
            if policy == "auto" and device == "cpu":
                return None
            portal.start_task_soon(self.pool.warm, device, name=f"warm {device}")
            return device
        except Exception:  # noqa: BLE001
            log.exception("could not warm the runner at start-up")
            return None

    @property
    def devices(self) -> list[str]:
        return self.pool.devices

    def default_device(self) -> str:
        return self.pool.default_device

    # ---- public API -------------------------------------------------------------------------
    async def submit(self, *, kind: str, device: str | None, fn: Callable[[JobContext], Awaitable[BaseModel]],
                     timeout_s: float) -> str:
        """Queue `fn(ctx)` on `device` (None: the default device) and return its job id at once.
        fn runs in the runtime loop, alone on its device, and is cancelled after timeout_s (then the
        job fails with kind "timeout"). Raises BadInput for an unknown device."""
        portal = self._ensure_portal()
        dev = self.pool.check_device(device)
        job = _Job(job_id="job-" + secrets.token_hex(6), kind=kind, device=dev, timeout_s=float(timeout_s), fn=fn)
        scope = CALL_SCOPE.get()
        if scope is not None:
            job.tool, job.owner, job.detached, job.summary = scope.tool, scope.owner, scope.detached, scope.summary
            scope.job_ids.append(job.job_id)
        self._jobs[job.job_id] = job
        self._queued.setdefault(dev, []).append(job.job_id)
        self._trim()
        portal.start_task_soon(self._run, job, name=f"job {job.job_id}")
        return job.job_id

    async def wait(self, job_id: str, wait_s: float, on_progress: ProgressCb | None = None,
                   heartbeat_s: float = HEARTBEAT_S) -> JobOutcome:
        """Wait up to wait_s for the job; return its outcome (a non-final state if still going: the job
        keeps running). on_progress is awaited with each new progress report seen while waiting, and at
        least every heartbeat_s (the last figures again, with the state and elapsed time)."""
        job = self._get(job_id)
        deadline = time.monotonic() + max(0.0, wait_s)
        seen, delay, last_sent = -1, 0.002, time.monotonic()
        while True:
            now = time.monotonic()
            fresh = job.progress is not None and job.progress_seq != seen
            if on_progress is not None and job.state not in FINAL and (fresh or now - last_sent >= heartbeat_s):
                seen, last_sent = job.progress_seq, now
                p = job.progress or JobProgress(done=0.0, total=1.0)
                msg = p.message if fresh else f"{job.state} {self._age(job):.0f} s" + (f"; {p.message}" if p.message
                                                                                      else "")
                with contextlib.suppress(Exception):
                    await on_progress(p.done, p.total, msg)
            if job.state in FINAL or time.monotonic() >= deadline:
                return self._outcome(job)
            await anyio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.05)

    def status(self, job_id: str) -> JobStatus:
        job = self._get(job_id)
        now = time.time()
        qpos = None
        if job.state == "queued":
            q = self._queued.get(job.device, [])
            qpos = q.index(job_id) if job_id in q else None
        return JobStatus(
            job_id=job.job_id, kind=job.kind, tool=job.tool or None, device=job.device, state=job.state,
            detached=job.detached, created_at=job.created_at,
            started_at=job.started_at, finished_at=job.finished_at, timeout_s=job.timeout_s,
            elapsed_s=round(((job.finished_at or now) - job.started_at) if job.started_at else 0.0, 3),
            queue_position=qpos, progress=job.progress, error=job.error)

    async def cancel(self, job_id: str) -> JobStatus:
        """Cancel a queued or running job (a running op is killed; its runner is replaced).
        Returns the status once the job has stopped (or after 15 s)."""
        job = self._get(job_id)
        if job.state not in FINAL:
            job.cancel_requested = True
            self._ensure_portal().start_task_soon(self._cancel_in_loop, job)
            await self.wait(job_id, 15.0)
        return self.status(job_id)

    def is_detached(self, job_id: str) -> bool:
        job = self._jobs.get(job_id)
        return bool(job and job.detached)

    def summaries(self, owner: str | None = None, include_finished: bool = True) -> list[JobSummary]:
        """Jobs of `owner` (None: every job), newest first."""
        out = []
        for job in reversed(self._jobs.values()):
            if owner is not None and job.owner != owner:
                continue
            if not include_finished and job.state in FINAL:
                continue
            out.append(JobSummary(job_id=job.job_id, tool=job.tool or job.kind, state=job.state,
                                  age_s=round(self._age(job), 1), summary=self._summary(job),
                                  detached=job.detached))
        return out

    def cancel_owner_soon(self, owner: str) -> list[str]:
        """Ask every unfinished, not detached job of `owner` to stop (its caller went away); returns their
        ids at once (the jobs stop in the background)."""
        ids = []
        for job in list(self._jobs.values()):
            if job.owner == owner and not job.detached and job.state not in FINAL:
                job.cancel_requested = True
                ids.append(job.job_id)
                if self._portal is not None:
                    with contextlib.suppress(Exception):
                        self._portal.start_task_soon(self._cancel_in_loop, job)
        if ids:
            log.info("caller went away: cancelling %d job(s): %s", len(ids), ", ".join(ids))
        return ids

    async def aclose(self) -> None:
        """Cancel every job, stop the runners and the runtime loop."""
        if self._portal is None:
            return
        portal, cm, pool = self._portal, self._portal_cm, self._pool
        self._portal = self._portal_cm = None

        async def shutdown() -> None:
            for job in list(self._jobs.values()):
                if job.state not in FINAL and job.scope is not None:
                    job.cancel_requested = True
                    job.scope.cancel()
            await anyio.sleep(0)
            if pool is not None:
                await pool.aclose()

        def close() -> None:
            with contextlib.suppress(Exception):
                portal.call(shutdown)
            assert cm is not None
            cm.__exit__(None, None, None)

        await anyio.to_thread.run_sync(close)

    # ---- inside the runtime loop --------------------------------------------------------------
    async def _cancel_in_loop(self, job: _Job) -> None:
        if job.scope is not None:
            job.scope.cancel()

    async def _run(self, job: _Job) -> None:
        assert self._pool is not None
        job.scope = anyio.CancelScope()
        if job.cancel_requested:
            job.scope.cancel()
        with job.scope:
            async with self._locks.setdefault(job.device, anyio.Lock()):
                self._dequeue(job)
                job.state, job.started_at = "running", time.time()
                ctx = JobContext(job_id=job.job_id, device=job.device, pool=self._pool, _job=job,
                                 scratch_dir=sub_state_dir("jobs") / job.job_id, timeout_s=job.timeout_s)
                ctx.scratch_dir.mkdir(parents=True, exist_ok=True)
                prune_old_dirs(ctx.scratch_dir.parent, keep=KEEP_SCRATCH_DIRS)
                try:
                    with anyio.fail_after(job.timeout_s):
                        job.result = await job.fn(ctx)
                    job.state = "done"
                except TimeoutError:
                    self._fail(job, ErrorInfo(kind="timeout", message=f"job {job.job_id} did not finish within "
                                              f"its time limit of {job.timeout_s:g} s and was stopped"))
                except Exception as e:  # noqa: BLE001 - a job's failure is data for the agent
                    log.exception("job %s failed", job.job_id)
                    self._fail(job, _error_of(e))
        if job.state not in FINAL:  # the scope was cancelled (cancel_job, request cancelled, shutdown)
            self._dequeue(job)
            job.state, job.error = "cancelled", ErrorInfo(kind="cancelled", message=f"job {job.job_id} was cancelled")
        job.finished_at = time.time()

    # ---- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _age(job: _Job) -> float:
        return (job.finished_at or time.time()) - job.created_at

    @staticmethod
    def _summary(job: _Job) -> str:
        what = job.summary or job.kind
        if job.state == "running" and job.progress is not None:
            p = job.progress
            return f"{what}; {p.done:g}/{p.total:g} {p.message}".strip()[:200]
        if job.state in ("failed", "cancelled") and job.error is not None:
            return f"{what}; {job.error.kind}: {job.error.message}"[:200]
        return what[:200]

    def _fail(self, job: _Job, err: ErrorInfo) -> None:
        job.state, job.error = "failed", err

    def _dequeue(self, job: _Job) -> None:
        q = self._queued.get(job.device, [])
        if job.job_id in q:
            q.remove(job.job_id)

    def _get(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r} on this server (ids look like 'job-1a2b3c4d5e6f'; jobs are kept "
                           f"for the server's lifetime, the last {MAX_KEPT_JOBS}).")
        return job

    def _outcome(self, job: _Job) -> JobOutcome:
        return JobOutcome(job_id=job.job_id, kind=job.kind, device=job.device, state=job.state,
                          result=job.result, error=job.error)

    def _trim(self) -> None:
        while len(self._jobs) > MAX_KEPT_JOBS:
            oldest = next((k for k, j in self._jobs.items() if j.state in FINAL), None)
            if oldest is None:
                return
            del self._jobs[oldest]


def _error_of(e: Exception) -> ErrorInfo:
    from evokernel_mcp.errors import EvoError

    if isinstance(e, EvoError):
        return ErrorInfo(kind="bad_candidate" if "candidate" in str(e).lower() else "internal", message=str(e))
    return ErrorInfo(kind="internal", message=f"{type(e).__name__}: {e}")
