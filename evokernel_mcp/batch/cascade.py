"""The cascade of one candidate and the ranking of a batch (evaluate_batch's logic, no MCP here).

Per candidate, in order, stopping at the first failed stage:
  compile       compile_kernel on its source (only with a compile spec; runs in the server, like the tool)
  verify_small  verify on the first shape set (or, for a KernelBench reference with one shape set, on
                sizes shrunk by overrides.scaled_overrides), one seed, stop at the first failing case
  verify        verify on every chosen shape set (without `shapes`: the default of the slot's device,
                shape_defaults.py), 3 seeds, stop at the first failing case
  benchmark     the benchmark op on the largest chosen shape set, interleaved against the PyTorch
                baseline; the verdict (valid / invalid_reason) is the benchmark's own
verify_small and verify run as ONE executor stage (runner op verify_steps): the candidate loads once, in one
process, which stops after verify_small when that fails; each still reports as its own stage.
verify and benchmark are runner ops run by an executor (executors/): the same payloads, result models
and verdicts as verify_vs_pytorch and benchmark, so a candidate's row means what those tools would say.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from evokernel_mcp.batch.models import STAGE_ORDER, BatchCandidate, BatchRow, CompileSpec
from evokernel_mcp.benchmark.timing import TimingOptions
from evokernel_mcp.errors import BadInput, EvoError
from evokernel_mcp.executors.base import Executor, Stage
from evokernel_mcp.shape_defaults import ShapeChoice, choose_shapes
from evokernel_mcp.tasks import Task, check_candidate_source, with_overrides

SMALL_SEEDS = 1
VERIFY_SEEDS = 3
BUDGET_MARGIN_S = 5.0  # the runner's own budget ends this much before the stage's hard limit


@dataclass
class Plan:
    """What every candidate of one batch goes through (built once, validated before the job starts)."""

    task: Task
    stages: list[str]
    verify_shapes: list[str]
    small_task: Task | None = None
    small_shapes: list[str] = field(default_factory=list)
    small_overrides: dict[str, Any] | None = None
    bench_shape: str | None = None
    compile: CompileSpec | None = None
    overrides: dict[str, Any] | None = None
    timeout_s: float = 300.0
    timing: TimingOptions = field(default_factory=TimingOptions)
    compute_unit: str = "matrix"
    requested_shapes: list[str] | None = None  # `shapes` as given: None = each device's default
    wanted: list[str] = field(default_factory=list)  # the stages asked for
    choice: ShapeChoice | None = None  # how verify_shapes were chosen, and the shape sets left out

    def for_device(self, device: str | None) -> "Plan":
        """This plan with the shape sets of `device`'s default (shape_defaults.choose_shapes) when none were named."""
        if self.requested_shapes is not None or device is None:
            return self
        plan = dataclasses.replace(self)
        _choose(plan, choose_shapes(self.task, None, device))
        return plan

    def verify_choice(self) -> ShapeChoice:
        return self.choice or ShapeChoice(shapes=self.verify_shapes, rule="as requested (shapes)")


def make_plan(task: Task, *, stages: list[str] | None, shapes: list[str] | None, overrides: dict[str, Any] | None,
              compile: CompileSpec | None, timeout_s: float, max_time_s: float, device: str | None = None) -> Plan:
    """Validate the batch's arguments into a Plan (BadInput for what cannot run). Without `shapes`, the shape
    sets are `device`'s default (every one when None; Plan.for_device picks them per device later)."""

    if stages is not None and not stages:
        raise BadInput("stages=[] runs nothing; omit it for the whole cascade or name some of "
                       f"{', '.join(STAGE_ORDER)}")
    if stages and "compile" in stages and compile is None:
        raise BadInput("stage 'compile' needs compile={language, kernel, ...} (compile_kernel's arguments)")
    wanted = list(stages) if stages else ([*(["compile"] if compile else []), "verify_small", "verify", "benchmark"])
    applied = None
    if overrides:
        task = with_overrides(task, overrides)  # BadInput for a shipped task (its sizes are shape sets)
        applied = task.overrides_applied
    plan = Plan(task=task, stages=[], verify_shapes=[], compile=compile, overrides=applied, timeout_s=timeout_s,
                compute_unit=task.compute_unit or "matrix", wanted=wanted,
                requested_shapes=list(shapes) if shapes is not None else None,
                timing=TimingOptions(min_reps=20, max_time_s=max_time_s, subtract_overhead=True))
    _choose(plan, choose_shapes(task, shapes, device))  # BadInput for shapes=[] or an unknown name
    return plan


def _choose(plan: Plan, choice: ShapeChoice) -> None:
    """Set the plan's shape sets (verify: all chosen; verify_small: the first, or shrunk sizes; benchmark: the
    last) and its stages from `choice`. BadInput when nothing is left to run."""
    from evokernel_mcp.overrides import scaled_overrides

    task, order = plan.task, choice.shapes
    plan.choice, plan.verify_shapes, plan.bench_shape = choice, order, order[-1]
    plan.small_task, plan.small_shapes, plan.small_overrides = None, [], None
    if "verify_small" in plan.wanted:
        if len(order) > 1:
            plan.small_task, plan.small_shapes = task, order[:1]
        elif task.kind == "kernelbench":
            small = scaled_overrides(task.reference_source)
            if small:
                plan.small_task = with_overrides(task, small)
                plan.small_shapes, plan.small_overrides = order, small
        if plan.small_task is None and "verify" not in plan.wanted:  # alone, it is worth running on one set
            plan.small_task, plan.small_shapes = task, order[:1]
    plan.stages = [s for s in STAGE_ORDER if s in plan.wanted
                   and (s != "verify_small" or plan.small_task is not None)]
    if not plan.stages:
        raise BadInput("nothing to run: verify_small needs two shape sets or a KernelBench reference whose sizes "
                       "can shrink; add verify or benchmark to stages")


@dataclass
class Outcome:
    """What happened to one candidate (index = its position in the request)."""

    index: int
    name: str
    valid: bool = False
    failed_stage: str | None = None
    reason: str | None = None
    median_ms: float | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    device: str | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    last: tuple[str, Any] | None = None  # (journal tool name, result model) of the last stage run
    result_id: str | None = None

    def fail(self, stage: str, reason: str) -> "Outcome":
        self.valid, self.failed_stage, self.reason = False, stage, reason[:600]
        return self

    def row(self) -> BatchRow:
        return BatchRow(name=self.name, valid=self.valid, failed_stage=self.failed_stage, reason=self.reason,
                        median_ms=self.median_ms, speedup=self.speedup, speedup_ci=self.speedup_ci,
                        result_id=self.result_id, device=self.device)


def _verify_reason(res) -> str:
    return res.reason or f"failed: {res.message or 'verify did not pass'}"


def _bench_reason(res) -> str | None:
    """None when the benchmark is valid, else why not."""
    if res.error is not None:
        return f"{res.error.kind}: {res.error.message}"
    if not res.results:
        return "no_results: the benchmark returned no shape"
    r = res.results[0]
    if r.valid is False or r.correct_after_timing is False:
        return f"{r.invalid_reason or 'wrong_output_after_timing'}: {r.invalid_detail or '; '.join(r.flags[:1])}"
    return None


def _verify_payload(src: str, plan: Plan, small: bool) -> dict[str, Any]:
    from evokernel_mcp.verify.api import build_payload

    task = plan.small_task if small else plan.task
    shapes = plan.small_shapes if small else plan.verify_shapes
    seeds = SMALL_SEEDS if small else VERIFY_SEEDS
    payload = build_payload(task, src, shapes, seeds, None, True)  # type: ignore[arg-type]
    payload["budget_s"] = max(1.0, plan.timeout_s - BUDGET_MARGIN_S)
    return payload


def _choice(plan: Plan, small: bool) -> ShapeChoice:
    if small:
        return ShapeChoice(shapes=plan.small_shapes, rule="verify_small: the first shape set (or shrunk sizes)")
    return plan.verify_choice()


async def _verify(ex: Executor, slot: str, src: str, plan: Plan, small: bool):
    from evokernel_mcp.verify.api import result_from_reply

    reply = await ex.run(slot, Stage("verify", _verify_payload(src, plan, small), timeout_s=plan.timeout_s))
    return result_from_reply(reply, plan.task.name, _choice(plan, small), True)


async def _verify_both(ex: Executor, slot: str, src: str, plan: Plan) -> list[tuple[str, Any]]:
    """verify_small then verify as ONE stage (runner op verify_steps): one candidate process for both, which
    stops after verify_small when that fails. [(stage, VerifyResult)] for the steps that ran."""
    from evokernel_mcp.verify.api import result_from_reply

    steps = [_verify_payload(src, plan, small) for small in (True, False)]
    payload = {"candidate": src, "steps": [{k: v for k, v in p.items() if k != "candidate"} for p in steps],
               "budget_s": steps[-1]["budget_s"]}
    reply = await ex.run(slot, Stage("verify_steps", payload, timeout_s=plan.timeout_s))
    done = (reply.result or {}).get("steps") if reply.ok and isinstance(reply.result, dict) else None
    if not done:  # the stage itself failed (the runner, a time limit): verify_small carries the reason
        return [("verify_small", result_from_reply(reply.model_copy(update={"result": None}), plan.task.name,
                                                   _choice(plan, True), True))]
    return [(name, result_from_reply(reply.model_copy(update={"result": r}), plan.task.name, _choice(plan, small),
                                     True))
            for (name, small), r in zip((("verify_small", True), ("verify", False)), done)]


async def _benchmark(ex: Executor, slot: str, src: str, plan: Plan):
    from evokernel_mcp.benchmark.api import build_payload, result_from_reply

    payload = build_payload(plan.task, src, "pytorch", [plan.bench_shape], plan.timing, 0)
    payload["budget_s"] = max(1.0, plan.timeout_s - BUDGET_MARGIN_S)
    reply = await ex.run(slot, Stage("benchmark", payload, timeout_s=plan.timeout_s))
    return result_from_reply(reply, plan.task, plan.compute_unit, plan.timing.confidence)


async def _compile(src: str, spec: CompileSpec):
    from evokernel_mcp.compile.api import compile_kernel

    return await compile_kernel(source=src, **spec.model_dump(exclude_none=True))


async def run_candidate(ex: Executor, slot: str, index: int, cand: BatchCandidate, plan: Plan) -> Outcome:
    """The cascade for one candidate on one slot; never raises for the candidate's faults."""
    out = Outcome(index=index, name=cand.name)
    try:
        check_candidate_source(cand.source)
    except BadInput as e:
        return out.fail(plan.stages[0], f"bad_candidate: {e}")
    for stage in plan.stages:
        if stage == "compile":
            try:
                res = await _compile(cand.source, plan.compile)  # type: ignore[arg-type]
            except EvoError as e:
                return out.fail(stage, f"{getattr(e, 'kind', 'failed')}: {e}")
            out.last, out.results[stage] = ("compile_kernel", res), res.model_dump(mode="json")
            if not res.ok:
                first = next((d for d in res.diagnostics if d.severity == "error"), None)
                return out.fail(stage, "compile_error: " + (f"line {first.line}: {first.message}" if first else
                                                            "the compiler failed (see the artifact)"))
        elif stage == "verify" and "verify_small" in plan.stages:
            continue  # ran with verify_small, in the same process
        elif stage == "verify_small" and "verify" in plan.stages:
            for name, res in await _verify_both(ex, slot, cand.source, plan):
                out.device, out.last = res.device, ("verify_vs_pytorch", res)
                out.results[name] = res.model_dump(mode="json")
                if not res.passed:
                    return out.fail(name, _verify_reason(res))
            if "verify" not in out.results:
                return out.fail("verify", "not_run: the verify step did not report")
        elif stage in ("verify_small", "verify"):
            res = await _verify(ex, slot, cand.source, plan, small=stage == "verify_small")
            out.device, out.last = res.device, ("verify_vs_pytorch", res)
            out.results[stage] = res.model_dump(mode="json")
            if not res.passed:
                return out.fail(stage, _verify_reason(res))
        elif stage == "benchmark":
            res = await _benchmark(ex, slot, cand.source, plan)
            out.last, out.results[stage] = ("benchmark", res), res.model_dump(mode="json")
            out.device = (res.device or "").split(": ")[0] or out.device
            why = _bench_reason(res)
            if why is not None:
                return out.fail(stage, why)
            r = res.results[0]
            out.median_ms = r.candidate.median_ms if r.candidate else None
            out.speedup, out.speedup_ci = r.speedup, r.speedup_ci
    out.valid = True
    return out


def rank(outcomes: list[Outcome]) -> list[Outcome]:
    """Valid first, by speedup (high first), then median time (low first), then name; then the failed ones,
    those that got furthest first, then by name."""
    def key(o: Outcome):
        if o.valid:
            sp = o.speedup if o.speedup is not None and math.isfinite(o.speedup) else -math.inf
            med = o.median_ms if o.median_ms is not None else math.inf
            return (0, -sp, med, o.name)
        stage = STAGE_ORDER.index(o.failed_stage) if o.failed_stage in STAGE_ORDER else -1
        return (1, -stage, 0.0, o.name)

    return sorted(outcomes, key=key)


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    c: dict[str, int] = {"valid": sum(1 for o in outcomes if o.valid)}
    for o in outcomes:
        if not o.valid:
            k = f"failed_{o.failed_stage or 'unknown'}"
            c[k] = c.get(k, 0) + 1
    return c

