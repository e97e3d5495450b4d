"""The hook the tools call to record themselves in the journal (record_call) and its async helpers."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from evokernel_mcp.journal.extract import TOOL_ALIASES, extract
from evokernel_mcp.journal.models import LABEL_HELP, LABEL_PATTERN
from evokernel_mcp.journal.store import get_store, sha256_text

log = logging.getLogger(__name__)

_LABEL = re.compile(LABEL_PATTERN)
INLINE_MAX_CHARS = 256
ARGS_MAX_CHARS = 16_000
_SKIP_ARGS = {"ctx", "context"}
EXPERIMENT_HELP = ("Journal label of this variant (e.g. 'conv3d/step3-lds'): the call and its key results are "
                   "recorded in the experiment journal (list_experiments, distill). Omit to record nothing.")


def check_label(label: str, what: str = "experiment") -> str:
    """ValueError (with the rule) unless `label` is a valid experiment/task label."""
    if not isinstance(label, str) or not _LABEL.match(label):
        raise ValueError(f"{what} {label!r} is not {LABEL_HELP}")
    return label


def task_key(task: str | None, arguments: dict[str, Any]) -> str:
    """The journal's task name: the task as given (a shipped name or path), else 'ref-<sha8>' of a
    KernelBench reference source, else 'adhoc'."""
    if task:
        t = str(task).strip()
        return t if _LABEL.match(t) else "task-" + sha256_text(t)[:12]
    ref = arguments.get("reference")
    if isinstance(ref, str) and ref.strip():
        return "ref-" + sha256_text(ref)[:8]
    return "adhoc"


def _plain_args(arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Arguments as JSON-able values; long texts (sources) replaced by {'sha256', 'chars'} and returned
    separately to be stored once in `sources`."""
    out: dict[str, Any] = {}
    blobs: dict[str, str] = {}
    for k, v in (arguments or {}).items():
        if k in _SKIP_ARGS:
            continue
        if isinstance(v, BaseModel):
            v = v.model_dump(mode="json")
        if isinstance(v, str) and len(v) > INLINE_MAX_CHARS:
            sha = sha256_text(v)
            blobs[sha] = v
            out[k] = {"sha256": sha, "chars": len(v)}
        elif v is None or isinstance(v, (str, int, float, bool, list, dict, tuple)):
            out[k] = v
        else:
            out[k] = repr(v)[:INLINE_MAX_CHARS]
    if len(json.dumps(out, default=str)) > ARGS_MAX_CHARS:
        out = {k: (v if len(json.dumps(v, default=str)) <= 1000 else "<cut: too long>") for k, v in out.items()}
    return out, blobs


def record_call(tool: str, *, experiment: str | None, task: str | None, source: str | None,
                arguments: dict[str, Any], result: BaseModel | dict[str, Any]) -> str | None:
    """Record one tool call in the experiment journal; return its result id ('r-' + 12 hex), or None.

    Contract (for the tools that call it: compile_kernel, verify_vs_pytorch, benchmark, profile_pmc,
    thread_trace, evaluate_batch):
    - tool: the tool's name ('compile_kernel', 'verify_vs_pytorch', 'benchmark', 'profile_pmc',
      'thread_trace'; short forms 'compile', 'verify', 'profile', 'trace' are accepted). Other names are
      recorded with a generic summary.
    - experiment: the agent's label of the variant. None -> nothing is recorded, None is returned.
    - task: the task as the agent named it (shipped name or path). None -> 'ref-<sha8>' of
      arguments['reference'] when given, else 'adhoc'.
    - source: the variant's source (the candidate for verify/benchmark/profile/trace, the kernel source for
      compile). Stored once per sha256 (deduplicated); long strings in `arguments` (reference, baseline
      source ...) are stored the same way and replaced by {'sha256', 'chars'} in the recorded arguments.
    - arguments: the call's arguments (JSON-able values; 'ctx' is dropped).
    - result: the tool's result model (or its model_dump). The key results are extracted per tool, tolerating
      missing fields: compile: ok, resources per kernel (VGPR/AGPR/SGPR or registers, LDS, scratch, spills,
      occupancy and its limiter); verify: passed, worst max_abs/max_rel/rel_l2 errors, failure class and
      evidence; benchmark: per shape median_ms and its CI, baseline median, speedup, speedup_ci, noise, valid /
      invalid_reason (correct_after_timing=false counts as invalid when `valid` is absent), roofline fraction;
      profile: top derived metrics and counters per dispatch, findings; trace: top instruction classes, stall
      reasons, hot instructions. A result still running (state queued/running) is recorded as 'pending'.
    Never raises into the tool: a bad label, an unwritable journal or anything else is logged to stderr and
    None is returned. Safe to call from several threads and processes at once (one short SQLite write
    transaction). Synchronous and fast (one fsync); from async code prefer `await arecord_call(...)`.
    """
    if experiment is None:
        return None
    try:
        check_label(experiment)
        res = result.model_dump(mode="json", by_alias=True) if isinstance(result, BaseModel) else dict(result or {})
        name = TOOL_ALIASES.get(tool, tool)
        summary, verdict, failure_class, device = extract(name, res)
        if name == "benchmark" and (arguments or {}).get("baseline") in ("pytorch", "source"):
            summary["baseline"] = arguments["baseline"]  # what its speedups are against
        args, blobs = _plain_args(arguments)
        return get_store().add_result(
            task=task_key(task, arguments or {}), experiment=experiment, tool=name,
            source=source if isinstance(source, str) and source else None, arguments=args, blobs=blobs,
            summary=summary, verdict=verdict, failure_class=failure_class, device=device)
    except Exception:  # noqa: BLE001 - the journal must never break the tool it records
        log.exception("journal: could not record %s (experiment=%r, task=%r)", tool, experiment, task)
        return None


async def arecord_call(tool: str, *, experiment: str | None, task: str | None, source: str | None,
                       arguments: dict[str, Any], result: BaseModel | dict[str, Any]) -> str | None:
    """record_call in a worker thread (the SQLite write may wait for another writer's lock)."""
    if experiment is None:
        return None
    import anyio

    def go() -> str | None:
        return record_call(tool, experiment=experiment, task=task, source=source, arguments=arguments,
                           result=result)

    try:
        return await anyio.to_thread.run_sync(go)
    except Exception:  # noqa: BLE001
        log.exception("journal: could not record %s", tool)
        return None


def journaled(fn: Callable[[Any], Awaitable[Any]], tool: str, *, experiment: str | None, task: str | None,
              source: str | None, arguments: dict[str, Any]) -> Callable[[Any], Awaitable[Any]]:
    """Wrap a job function (async, one argument: the job context) so its finished result is recorded, also
    when the agent collects it later with job_result. Sets result.result_id when the model has that field."""
    if experiment is None:
        return fn

    async def wrapped(jctx: Any) -> Any:
        res = await fn(jctx)
        rid = await arecord_call(tool, experiment=experiment, task=task, source=source, arguments=arguments,
                                 result=res)
        set_result_id(res, rid)
        return res

    return wrapped


def set_result_id(res: Any, rid: str | None) -> Any:
    """res.result_id = rid on a model that has the field (no-op otherwise)."""
    if rid is not None and isinstance(res, BaseModel) and "result_id" in type(res).model_fields:
        res.result_id = rid
    return res


async def record_result(tool: str, result: Any, *, experiment: str | None, task: str | None, source: str | None,
                        arguments: dict[str, Any]) -> Any:
    """Record a finished result and return it with result_id set (a copy: cached results stay untouched)."""
    if experiment is None:
        return result
    rid = await arecord_call(tool, experiment=experiment, task=task, source=source, arguments=arguments,
                             result=result)
    if rid is not None and isinstance(result, BaseModel) and "result_id" in type(result).model_fields:
        return result.model_copy(update={"result_id": rid})
    return result
