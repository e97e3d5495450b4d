"""evaluate_batch: many candidates through the cascade (cascade.py) as ONE job, concurrently across the
executor's slots (executors/: the local device pool, or Ray), ranked.

Back-pressure: one candidate in flight per slot (a slot is one device; while a candidate times, nothing
else runs there); candidates of batches not finished yet count against a queue limit of
max(MAX_CANDIDATES, QUEUE_PER_SLOT x slots): past it the call is refused with a 'busy' error naming the
batch to wait for. Cancelling the job (cancel_job, the request, the session) stops every stage in flight
and runs no more.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import Field

from evokernel_mcp.batch import cascade
from evokernel_mcp.batch.models import BatchCandidate, BatchResult, CompileSpec, StageName
from evokernel_mcp.errors import BadInput, EvoError
from evokernel_mcp.executors import Executor, executor_for
from evokernel_mcp.journal import ExperimentArg
from evokernel_mcp.models import Provenance
from evokernel_mcp.runtime.jobs import JobContext, JobManager

log = logging.getLogger(__name__)

MAX_CANDIDATES = 256
QUEUE_PER_SLOT = 64
IN_FLIGHT_PER_SLOT = 1  # a slot is one device: one candidate at a time (exclusive while timing)
START_ALLOWANCE_S = 300.0
_pending: dict[object, tuple[int, list[str]]] = {}  # batch token -> (candidates not finished, [job_id])


def check_capacity(n: int, slots: int) -> None:
    """Refuse (a 'busy' error with what to wait for) when the unfinished batches plus this one pass the limit."""
    limit = max(MAX_CANDIDATES, QUEUE_PER_SLOT * slots)
    queued = sum(left for left, _ in _pending.values())
    if queued + n <= limit:
        return
    ids = [ids[0] for _, ids in _pending.values() if ids]
    nxt = f"job_result(job_id='{ids[0]}', wait_s=50)" if ids else "list_jobs()"
    raise EvoError(f"busy: {queued} candidates of earlier batches are queued or running on {slots} device(s); "
                   f"{n} more would pass the queue limit of {limit}. Retry when that work has finished (wait for "
                   f"the batch {ids[0] if ids else 'in list_jobs'}), or send fewer candidates.",
                   kind="failed", next_call=nxt)


def _record(o: cascade.Outcome, cand: BatchCandidate, plan: cascade.Plan, job_id: str, experiment: str | None,
            task: str | None, reference: str | None) -> None:
    """Store the candidate's full stage results as an artifact; record its last stage in the journal."""
    from evokernel_mcp import artifacts
    from evokernel_mcp.journal import check_label, record_call

    body = {"name": o.name, "valid": o.valid, "failed_stage": o.failed_stage, "reason": o.reason,
            "batch_job": job_id, "stages": o.results}
    aid = artifacts.put("batch_candidate", {"result.json": json.dumps(body, indent=1, default=str),
                                            "source.py": cand.source},
                        detail=f"evaluate_batch {job_id}: candidate {o.name}")
    o.result_id = aid
    if experiment is None or o.last is None:
        return
    label = f"{experiment}/{o.name}"
    try:
        check_label(label)
    except ValueError:
        label = f"{experiment}/c{o.index}"
    tool, res = o.last
    args = {"via": "evaluate_batch", "batch_job": job_id, "candidate": o.name, "stage": o.failed_stage or "all",
            "artifact_id": aid, "task": task, "reference": reference, "overrides": plan.overrides}
    rid = record_call(tool, experiment=label, task=task, source=cand.source, arguments=args, result=res)
    o.result_id = rid or aid


async def run_batch(jctx: JobContext, ex: Executor, plan: cascade.Plan, cands: list[BatchCandidate], *,
                    experiment: str | None = None, task: str | None = None, reference: str | None = None,
                    token: object | None = None) -> BatchResult:
    """Inside the job: one loop per slot takes the next candidate and runs its cascade there."""
    t0 = time.monotonic()
    slots = await ex.slots()
    plans: dict[str, cascade.Plan] = {}

    def plan_of(slot: str) -> cascade.Plan:  # without `shapes`: the default of the slot's device
        if slot not in plans:
            plans[slot] = plan.for_device(slot_device(ex, slot))
        return plans[slot]

    first = plan_of(slots[0]) if slots else plan
    rules = list(dict.fromkeys(f"{slot_device(ex, s)}: {(plan_of(s).choice or first.verify_choice()).rule}"
                               for s in slots))
    todo = list(enumerate(cands))
    todo.reverse()
    done: list[cascade.Outcome] = []
    n = len(cands)

    async def slot_loop(slot: str) -> None:
        while todo:
            if slot not in await ex.slots():
                return  # the slot was lost (its Ray actor's host went away and it could not be replaced)
            i, cand = todo.pop()
            p = plan_of(slot)
            try:
                o = await cascade.run_candidate(ex, slot, i, cand, p)
            except Exception as e:  # noqa: BLE001 - a harness bug on one candidate must not sink the batch
                log.exception("evaluate_batch: candidate %s failed in the harness", cand.name)
                o = cascade.Outcome(index=i, name=cand.name, device=slot).fail(
                    p.stages[0], f"internal: {type(e).__name__}: {e} (a harness error; report it)")
            await anyio.to_thread.run_sync(_record, o, cand, p, jctx.job_id, experiment, task, reference)
            done.append(o)
            if token in _pending:
                left, ids = _pending[token]
                _pending[token] = (left - 1, ids)
            await jctx.progress(len(done), n, f"{cand.name}: " + ("valid" if o.valid else f"failed {o.failed_stage}"))

    async with anyio.create_task_group() as tg:
        for slot in slots:
            for _ in range(IN_FLIGHT_PER_SLOT):
                tg.start_soon(slot_loop, slot)
    for i, cand in todo:  # every slot was lost
        done.append(cascade.Outcome(index=i, name=cand.name).fail(plan.stages[0], "not_run: no executor slot left"))
    ranked = cascade.rank(done)
    return BatchResult(
        ranked=[o.row() for o in ranked], task=first.task.name, stages=first.stages,
        small_shapes=first.small_shapes or None, small_overrides=first.small_overrides,
        verify_shapes=first.verify_shapes, benchmark_shape=first.bench_shape if "benchmark" in first.stages else None,
        shapes_skipped=first.verify_choice().skipped, shape_rule="; ".join(rules) or None,
        overrides=first.overrides, counts=cascade.counts(done), executor=ex.describe(), slots=len(slots),
        wall_s=round(time.monotonic() - t0, 3),
        provenance=[Provenance(field="ranked", source="measured", detail=f"{ex.describe()}; each stage is the runner "
                               "op of verify_vs_pytorch / benchmark (same payloads and verdicts), one candidate per "
                               "device at a time; rows link their full results (result_id)")])


def slot_device(ex: Executor, slot: str) -> str:
    """The device behind an executor slot: the slot itself for the local pool ('cpu', 'cuda:0'), the device
    a Ray actor reported ('cuda:0' of 'cuda:0@host') for a Ray slot."""
    hosts = getattr(ex, "hosts", None)
    where = hosts.get(slot) if isinstance(hosts, dict) else None
    return str(where).split("@")[0] if where else slot


def _load_plan(task: str | None, reference: str | None, stages, shapes, overrides, compile, timeout_s, max_time_s):
    from evokernel_mcp.verify.api import _load

    t = _load(task, reference)
    return cascade.make_plan(t, stages=stages, shapes=shapes, overrides=overrides, compile=compile,
                             timeout_s=timeout_s, max_time_s=max_time_s)


def _job_timeout(n: int, slots: int, plan: cascade.Plan) -> float:
    rounds = math.ceil(n / max(1, slots))
    per = len(plan.stages) * (plan.timeout_s + 30.0)
    return min(7 * 86400.0, rounds * per + START_ALLOWANCE_S)


async def submit_batch(plan: cascade.Plan, cands: list[BatchCandidate], *, experiment: str | None = None,
                       task: str | None = None, reference: str | None = None, executor: Executor | None = None,
                       jobs: JobManager | None = None) -> str:
    """Check capacity, then start the batch as one job; returns its id."""
    from evokernel_mcp.runtime.submit import _jobs

    mgr = _jobs(jobs)
    if not 1 <= len(cands) <= MAX_CANDIDATES:
        raise BadInput(f"candidates: give 1 to {MAX_CANDIDATES} [{{name, source}}] per batch, got {len(cands)}")
    names = [c.name for c in cands]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise BadInput(f"candidate names must be unique in a batch; repeated: {', '.join(dup[:5])}")
    hint = max(1, (executor or executor_for(mgr.pool)).capacity_hint())
    check_capacity(len(cands), hint)
    token = object()
    _pending[token] = (len(cands), [])

    async def fn(jctx: JobContext) -> BatchResult:
        try:
            ex = executor if executor is not None else executor_for(jctx.pool)
            return await run_batch(jctx, ex, plan, cands, experiment=experiment, task=task, reference=reference,
                                   token=token)
        finally:
            _pending.pop(token, None)

    try:
        job_id = await mgr.submit(kind="evaluate_batch", device=None, fn=fn,
                                  timeout_s=_job_timeout(len(cands), hint, plan))
    except BaseException:
        _pending.pop(token, None)
        raise
    if token in _pending:
        _pending[token][1].append(job_id)
    return job_id


async def evaluate_batch(
    candidates: list[BatchCandidate],  # 1..MAX_CANDIDATES, checked in submit_batch (limits cost tools/list space)
    task: Annotated[str | None, Field(description="Shipped task name (list_tasks), task folder, or KernelBench .py "
                                      "path.")] = None,
    reference: Annotated[str | None, Field(description="KernelBench-form reference source (instead of task).")] = None,
    stages: Annotated[list[StageName] | None, Field(
        description="Subset of compile, verify_small, verify, benchmark (run in that order); default all "
        "(compile only with compile).")] = None,
    shapes: Annotated[list[str] | None, Field(description="Shape sets to verify (default: the device's, all on a GPU, "
                                              "the small ones on the CPU path); verify_small uses the first, "
                                              "benchmark the last.")] = None,
    overrides: Annotated[dict[str, Any] | None, Field(description="KernelBench reference constant -> value, applied "
                                                      "before get_inputs (e.g. {'batch_size': 8}).")] = None,
    compile: Annotated[CompileSpec | None, Field(description="compile_kernel's arguments but source "
                                                 "({language, kernel, target, signature, constexprs, options}): "
                                                 "adds the compile stage.")] = None,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="Hard limit of each stage of each candidate, "
                                      "seconds (a hang fails its stage after this).")] = 300,
    max_time_s: Annotated[float, Field(gt=0, le=120, description="Benchmark: seconds of timing per measured "
                                       "series.")] = 1.0,
    experiment: ExperimentArg = None,
    wait_s: Annotated[float, Field(ge=0, le=600, description="Return a job_id if not done by then, seconds.")] = 50,
    ctx: Context | None = None,
) -> BatchResult:
    """Verify, benchmark and rank many candidates; each stops at its first failed stage.

    Per candidate: compile (with `compile`) -> verify on the first shape set (or shrunk sizes) -> verify
    on all chosen (default: the device's, every set on a GPU, the small ones on the CPU path) -> benchmark
    against PyTorch on the last of them. Candidates run concurrently, one per device
    (this host's GPUs, or a Ray cluster's with `serve --executor ray`). Returns ranked[] {name, valid,
    failed_stage, reason, median_ms, speedup, speedup_ci, result_id}, valid first by speedup. Runs as one
    job with progress per finished candidate; if not done within wait_s, returns job_id."""
    plan = await anyio.to_thread.run_sync(_load_plan, task, reference, stages, shapes, overrides, compile,
                                          timeout_s, max_time_s)
    return await submit_and_wait(plan, candidates, experiment=experiment, task=task, reference=reference,
                                 wait_s=wait_s, ctx=ctx)


async def submit_and_wait(plan: cascade.Plan, cands: list[BatchCandidate], *, experiment: str | None,
                          task: str | None, reference: str | None, wait_s: float, ctx: Any) -> BatchResult:
    """Start the batch as one job and wait up to wait_s: the ranked table, the job's failure, or its handle."""
    from evokernel_mcp.runtime.submit import wait_job

    job_id = await submit_batch(plan, cands, experiment=experiment, task=task, reference=reference)
    outcome = await wait_job(job_id, wait_s, ctx=ctx)
    if outcome.state == "done" and outcome.result is not None:
        return outcome.result  # type: ignore[return-value]
    if outcome.finished:
        return BatchResult(state=outcome.state, task=plan.task.name, stages=plan.stages, error=outcome.error)
    return BatchResult(state=outcome.state, task=plan.task.name, stages=plan.stages, job_id=outcome.job_id,
                       message=f"Not finished within wait_s={wait_s:g} s. Call job_result('{outcome.job_id}', wait_s) "
                       "to fetch the result, job_status to look, cancel_job to stop it.")
