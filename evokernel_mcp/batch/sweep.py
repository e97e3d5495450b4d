"""sweep: one kernel's configuration space (block sizes, warps, stages) verified and benchmarked in ONE call,
ranked, through evaluate_batch's cascade (each configuration is a candidate of the batch).

The candidate reads its configuration from module-level names (`BLOCK_M = 64`, `NUM_WARPS = 4`, ... used by
run() at call time); each configuration reassigns those names at the end of the source, so every configuration
is a complete candidate of its own, judged by the same verify and benchmark as any other.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import Field

from evokernel_mcp.batch.models import BatchCandidate, BatchResult, StageName
from evokernel_mcp.errors import BadInput
from evokernel_mcp.journal import ExperimentArg

MAX_CONFIGS = 64
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Scalar = int | float | bool | str


def expand(space: dict[str, list[Scalar]], configs: list[dict[str, Scalar]] | None) -> list[dict[str, Scalar]]:
    """The configurations to run: the given list, else the cartesian product of the space (in order)."""
    if configs:
        out = [dict(c) for c in configs]
    elif space:
        keys = list(space)
        for k in keys:
            if not space[k]:
                raise BadInput(f"space[{k!r}] is empty: give at least one value")
        out = [dict(zip(keys, vals)) for vals in itertools.product(*(space[k] for k in keys))]
    else:
        raise BadInput("give space {NAME: [values]} (every combination) or configs [{NAME: value}, ...]")
    if not 1 <= len(out) <= MAX_CONFIGS:
        raise BadInput(f"{len(out)} configurations: give 1 to {MAX_CONFIGS} (narrow the space)")
    for c in out:
        for k, v in c.items():
            if not _NAME.match(k):
                raise BadInput(f"configuration name {k!r} is not a Python identifier (a module-level name)")
            if not isinstance(v, (int, float, bool, str)):
                raise BadInput(f"configuration value {k}={v!r}: use numbers, booleans or strings")
    seen = set()
    for c in out:
        key = tuple(sorted(c.items()))
        if key in seen:
            raise BadInput(f"configuration {c} appears twice")
        seen.add(key)
    return out


def config_name(cfg: dict[str, Scalar]) -> str:
    return ",".join(f"{k}={v}" for k, v in cfg.items())[:100]


def config_source(source: str, cfg: dict[str, Scalar]) -> str:
    """The candidate with the configuration's names reassigned at the end of the module."""
    lines = "\n".join(f"{k} = {v!r}" for k, v in cfg.items())
    return f"{source.rstrip()}\n\n# configuration set by sweep\n{lines}\n"


def check_names_used(source: str, cfg: dict[str, Scalar]) -> None:
    missing = [k for k in cfg if not re.search(rf"\b{re.escape(k)}\b", source)]
    if missing:
        raise BadInput(f"the candidate never names {missing}: sweep reassigns module-level names that run() reads "
                       "(e.g. BLOCK = 1024 at the top, used in the launch)")


async def sweep(
    candidate: Annotated[str, Field(description="Candidate source whose run() reads its configuration from "
                                    "module-level names (BLOCK_M = 64, NUM_WARPS = 4, ...).")],
    space: Annotated[dict[str, list[Any]] | None, Field(description="NAME -> values; every combination (<= 64) runs.")] = None,
    configs: Annotated[list[dict[str, Any]] | None, Field(description="Instead of space: the configurations "
                                                          "[{NAME: value}, ...].")] = None,
    task: Annotated[str | None, Field(description="Shipped task name (or pass reference).")] = None,
    reference: Annotated[str | None, Field(description="KernelBench-form reference source (instead of task).")] = None,
    stages: Annotated[list[StageName] | None, Field(description="Default verify then benchmark for each "
                                                    "configuration.")] = None,
    shapes: Annotated[list[str] | None, Field(description="Shape sets to verify (the task's default if "
                                              "omitted); the benchmark uses the last.")] = None,
    overrides: Annotated[dict[str, Any] | None, Field(description="KernelBench reference constant -> value.")] = None,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="Hard limit of each stage of each "
                                      "configuration.")] = 300,
    max_time_s: Annotated[float, Field(gt=0, le=120, description="Benchmark: seconds of timing per series.")] = 1.0,
    experiment: ExperimentArg = None,
    wait_s: Annotated[float, Field(ge=0, le=600, description="Return a job_id if not done by then, seconds.")] = 50,
    ctx: Context | None = None,
) -> BatchResult:
    """Verify, benchmark and rank a kernel's configurations in one call.

    Each configuration (block sizes, warps, stages: module-level names run() reads) is a candidate of one batch.
    Call after a correct kernel, before hand-tuning: ranked[].name is the configuration ('BLOCK=512,NUM_WARPS=4');
    failed configurations say their stage and reason."""
    from evokernel_mcp.batch.api import _load_plan, submit_and_wait

    cfgs = expand(space or {}, configs)
    for c in cfgs:
        check_names_used(candidate, c)
    cands = [BatchCandidate(name=config_name(c), source=config_source(candidate, c)) for c in cfgs]
    plan = await anyio.to_thread.run_sync(_load_plan, task, reference, stages or ["verify", "benchmark"], shapes,
                                          overrides, None, timeout_s, max_time_s)
    return await submit_and_wait(plan, cands, experiment=experiment, task=task, reference=reference,
                                 wait_s=wait_s, ctx=ctx)
