"""verify_vs_pytorch: is the candidate the same function as the PyTorch reference, on fresh random
inputs, for each shape set (small -> full) and several seeds, plus one signed probe case per shape set?

Server side (verify_vs_pytorch): validate, apply size overrides to a KernelBench reference (tasks.
with_overrides), build the payload, run it as a runner job (wait_s / job id), record it in the journal.
Runner side (runner_side.py): the reference child plans memory and makes inputs and outputs (float64
where it fits), a fresh candidate child runs the candidate twice (poisoned allocations), and the runner
judges (case.py with bar.py's RMS-floored bar, PyTorch's own native error as the floor).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from mcp.server.mcpserver import Context
from pydantic import Field

from evokernel_mcp.errors import BadInput
from evokernel_mcp.journal import RESULT_ID_DESCRIPTION, ExperimentArg, record_call, set_result_id
from evokernel_mcp.models import ErrorInfo, Model, Provenance
from evokernel_mcp.runtime import protocol
from evokernel_mcp.runtime.limits import Limits
from evokernel_mcp.runtime.limits import current as limits_here
from evokernel_mcp.shape_defaults import ShapeChoice, SkippedShape, choose_shapes
from evokernel_mcp.tasks import Task, check_candidate_source, load_task, task_from_reference, with_overrides
from evokernel_mcp.verify.compare import DEFAULT_TOLERANCES

Preset = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
MAX_SEEDS = 1000
MAX_SEED_VALUE = 2**31 - 1


class ToleranceArg(Model):
    """Tighten the default tolerance: a dtype preset, and/or explicit atol/rtol (these win). The bar is
    owned by the harness: a value looser than the task's/dtype's default is capped at that default."""

    preset: Preset | None = Field(default=None, description="Use this dtype's defaults (e.g. 'tf32' for an fp32 task "
                                  "whose candidate uses TF32 matrix math).")
    atol: float | None = Field(default=None, ge=0)
    rtol: float | None = Field(default=None, ge=0)


class VerifyError(ErrorInfo):
    """Why the check did not finish: the candidate's fault (crash, timeout, exception, bad_candidate,
    missing_module) or the harness's (harness: the inputs or the reference failed; too_big: the case
    does not fit in the free memory, with the sizes)."""

    kind: Literal[  # type: ignore[assignment]
        "timeout", "crash", "exception", "gpu_fault", "oom", "compile_error", "bad_candidate", "cancelled",
        "internal", "harness", "too_big", "missing_module",
    ]


class VerifyCase(Model):
    shape: str = Field(description="Shape-set name.")
    seed: int
    probe: bool = Field(default=False, description="Signed probe inputs, beyond the reference's own distribution.")
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = Field(default=None, description="max |out-ref| / (|ref| + atol) over finite outputs.")
    rel_l2_err: float | None = Field(default=None, description="||out-ref|| / ||ref|| over finite outputs.")
    calc_diff: float | None = Field(default=None, description="1 - 2*sum(out*ref)/sum(out^2+ref^2); 0 = identical.")
    mismatches: int = 0
    first_mismatch_index: list[int] | None = None
    mismatch_indices: list[list[int]] = Field(default_factory=list, description="First (up to 10) mismatching indices.")
    mismatch_examples: list[dict[str, Any]] = Field(default_factory=list)
    nan_count: int = 0
    inf_count: int = 0
    unwritten_count: int = Field(default=0, description="Output elements the candidate never wrote (poison survived).")
    numel: int | None = None
    deterministic: bool | None = Field(default=None, description="Two runs on the same inputs were bitwise equal.")
    inputs_mutated: bool | None = None
    torch_max_abs_err: float | None = Field(default=None, description="PyTorch's own native-dtype error vs float64.")
    bar: str | None = Field(default=None, description="The bar applied: |out-ref| <= max(tol*RMS(ref) + tol*|ref|, "
                            "floor), floor = 2x PyTorch's own native error; exact for integers; arg-reductions by "
                            "the values selected.")
    reference: Literal["float64", "native"] | None = Field(default=None, description="What the output was judged "
                                                           "against (native: the float64 copy did not fit).")
    tol: float | None = Field(default=None, description="The tolerance applied (the dtype default or a tighter override).")
    tolerance_custom: bool = Field(default=False, description="A tighter tolerance override was applied.")
    tolerance_note: str | None = Field(default=None, description="Which tolerance, and whether a looser one was capped.")
    floor_abs_err: float | None = Field(default=None, description="The floor: 2x PyTorch's own native error.")
    rms_ref: float | None = Field(default=None, description="RMS of the reference (the bar's scale).")
    atol: float | None = Field(default=None, description="tol x RMS(ref): the absolute part of the bar.")
    rtol: float | None = Field(default=None, description="tol: the relative part of the bar.")
    margin: float | None = Field(default=None, description="max over elements of |out-ref| / allowed: < 1 passes; "
                                 "near 1 passes by luck (null: an infinite ratio).")
    error_vs_pytorch: float | None = Field(default=None, description="The candidate's largest error vs float64 over "
                                           "PyTorch's own: 1 = as accurate as PyTorch, > 1 less accurate.")
    reference_precision: str | None = Field(default=None, description="What this case was judged against: 'float64', "
                                            "'float64 and native run twice (ill-conditioned ...)' or 'native (why)'.")
    native_spread_abs_err: float | None = Field(default=None, description="Largest difference between two runs of "
                                                "the native reference (its floor) where the native bar applied.")
    note: str | None = None


class VerifyResult(Model):
    passed: bool | None = Field(description="All cases passed; null while the job is still running (see job_id).")
    state: Literal["queued", "running", "done", "failed", "cancelled"] = "done"
    cases: list[VerifyCase] = Field(default_factory=list)
    task: str | None = None
    device: str | None = None
    device_name: str | None = None
    reference_precision: str | None = None
    error: VerifyError | None = Field(default=None, description="Why it did not finish: the candidate's fault (crash, "
                                      "hang, raise, missing_module) or the harness's (harness, too_big).")
    stdout: str = ""
    stderr: str = ""
    job_id: str | None = Field(default=None, description="Set when not finished within wait_s: call job_result(job_id).")
    message: str | None = None
    versions: dict[str, Any] = Field(default_factory=dict)
    isolation: str | None = Field(default=None, description="How the candidate was contained: bwrap+uid, bwrap "
                                  "or process (see README 'Reliability and security').")
    overrides_applied: dict[str, Any] = Field(default_factory=dict, description="Module-level constants of the "
                                              "reference set by `overrides`.")
    limits: Limits | None = Field(default=None, description="Memory, CPU-time and process limits of the processes "
                                  "that ran agent code (a limit hit is error kind oom / timeout naming it).")
    result_id: str | None = Field(default=None, description=RESULT_ID_DESCRIPTION)
    reason: str | None = Field(default=None, description="Why it did not pass, in one line: the first failing "
                               "case's class and evidence (a wrong answer wins over a later error), else the "
                               "error's kind and message.")
    shapes_run: list[str] = Field(default_factory=list, description="Shape sets with at least one case run.")
    shapes_skipped: list[SkippedShape] = Field(default_factory=list, description="Shape sets not run, each with "
                                               "why (not a default on this device, too_big, not reached).")
    shape_rule: str | None = Field(default=None, description="How the shape sets were chosen (shapes, or the "
                                   "device's default).")
    provenance: list[Provenance] = Field(default_factory=list)


# ---------------------------------------------------------------- server side
def resolve_tolerance(arg: ToleranceArg | None) -> dict[str, float | str] | None:
    if arg is None:
        return None
    out: dict[str, float | str] = {}
    if arg.preset:
        out["atol"], out["rtol"] = DEFAULT_TOLERANCES[arg.preset]
    if arg.atol is not None:
        out["atol"] = arg.atol
    if arg.rtol is not None:
        out["rtol"] = arg.rtol
    if set(out) != {"atol", "rtol"}:
        raise BadInput("tolerance needs a preset, or both atol and rtol (e.g. {'atol': 0.01, 'rtol': 0.01})")
    return out


def _load(task: str | None, reference: str | None) -> Task:
    if (task is None) == (reference is None):
        raise BadInput("pass exactly one of task (a name from list_tasks, or a path) and reference (KernelBench source)")
    return load_task(task) if task is not None else task_from_reference(reference)


def build_payload(task: Task, candidate: str, shapes: list[str] | None, seeds: int | list[int],
                  tolerance: ToleranceArg | None, stop_on_first_failure: bool, probe: bool = True,
                  device: str | None = None) -> dict[str, Any]:
    """The runner op's payload. The task's reference source carries any overrides already (with_overrides);
    the applied ones travel as payload["overrides"] too (benchmark reads the same key). Without `shapes`, the
    shape sets are `device`'s default (shape_defaults.choose_shapes); payload["choice"] says which and why."""
    check_candidate_source(candidate)
    choice = choose_shapes(task, shapes, device)
    order = choice.shapes  # cascade: small -> full
    n_seeds = seeds if isinstance(seeds, int) else len(seeds)
    if not 1 <= n_seeds <= MAX_SEEDS:  # checked before list(range(seeds)): a huge count must not eat the server
        raise BadInput(f"seeds = {n_seeds if isinstance(seeds, int) else f'a list of {n_seeds}'}: give a count from "
                       f"1 to {MAX_SEEDS} or a non-empty list of at most {MAX_SEEDS} seeds (3 is typical)")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if any(not 0 <= s <= MAX_SEED_VALUE for s in seed_list):
        raise BadInput(f"seeds must be integers from 0 to {MAX_SEED_VALUE}")
    return {"task": task.model_dump(), "candidate": candidate, "shapes": order, "seeds": seed_list,
            "tolerance": resolve_tolerance(tolerance), "stop_on_first_failure": stop_on_first_failure,
            "probe": bool(probe), "overrides": dict(task.overrides_applied), "choice": choice.model_dump()}


def job_device(device: str | None) -> str:
    """The pool device a job asking for `device` runs on (None: the pool's first), as the job manager picks it;
    BadInput for a device the server does not have."""
    from evokernel_mcp.runtime.submit import _jobs

    return _jobs(None).pool.check_device(device)


def _error(r: dict[str, Any], reply: protocol.WorkerReply) -> VerifyError | None:
    if reply.error is not None:
        return VerifyError(**reply.error.model_dump())
    e = r.get("error")
    if not e:
        return None
    kind = e.get("kind") if e.get("kind") in get_args(VerifyError.model_fields["kind"].annotation) else "internal"
    return VerifyError(kind=kind, message=str(e.get("message") or ""), detail=e.get("detail"), role=e.get("role"),
                       limit=e.get("limit"))


def _shapes_outcome(cases: list[VerifyCase], err: VerifyError | None, choice: ShapeChoice | None,
                    stopped_early: bool) -> tuple[list[str], list[SkippedShape], VerifyError | None]:
    """(shape sets run, shape sets skipped with why, the error left at the top). A case too big for the free
    memory after a wrong answer is a skipped shape set: the wrong answer is the verdict, not the size."""
    run = list(dict.fromkeys(c.shape for c in cases))
    if choice is None:
        return run, [], err
    skipped = list(choice.skipped)
    rest = [s for s in choice.shapes if s not in run]
    if rest and err is not None:
        skipped.append(SkippedShape(shape=rest[0], reason=f"{err.kind}: {err.message}"[:600]))
        rest = rest[1:]
    why = ("not reached: stopped at the first failing case (stop_on_first_failure)" if stopped_early and err is None
           else f"not reached: the check ended earlier ({err.kind})" if err is not None else "not reached")
    skipped += [SkippedShape(shape=s, reason=why) for s in rest]
    if err is not None and err.kind == "too_big" and any(not c.passed for c in cases):
        err = None
    order = {s: i for i, s in enumerate(choice.shapes + [k.shape for k in choice.skipped])}
    skipped.sort(key=lambda k: order.get(k.shape, len(order)))
    return run, skipped, err


def verdict_reason(res: VerifyResult) -> str | None:
    """One line: why it did not pass. The first failing case's class and evidence when a case failed (even
    if an error came later), else the error's kind and message; None when it passed or is still running."""
    from evokernel_mcp.journal.extract import verify_summary

    if res.passed or res.passed is None and res.state not in ("failed", "cancelled"):
        return None
    bad = next((c for c in res.cases if not c.passed), None)
    if bad is not None:
        summary, _v, cls, _d = verify_summary({**res.model_dump(mode="json"), "error": None, "state": "done"})
        at = f"; first mismatch at index {bad.first_mismatch_index}" if bad.first_mismatch_index is not None else ""
        return f"{cls}: {summary.get('failure_detail')}{at}"[:600]
    if res.error is not None:
        return f"{res.error.kind}: {res.error.message}"[:600]
    return res.message or ("no case ran" if not res.cases else None)


def result_from_reply(reply: protocol.WorkerReply, task_name: str, choice: ShapeChoice | None = None,
                      stop_on_first_failure: bool = False) -> VerifyResult:
    """Build the VerifyResult of a finished runner op (ok or not); `choice`: the shape sets it was given."""
    r = reply.result or {}
    iso = r.get("isolation") or {}
    err = _error(r, reply)
    fields = set(VerifyCase.model_fields)
    cases = [VerifyCase(**{k: v for k, v in c.items() if k in fields}) for c in r.get("cases", [])]
    run, skipped, err = _shapes_outcome(cases, err, choice, stop_on_first_failure)
    passed = bool(cases) and err is None and all(c.passed for c in cases)
    dev = reply.device
    bars = sorted({c.reference for c in cases if c.reference})
    prov = [Provenance(field="cases", source="measured", detail=f"runner on {dev} "
                       f"({reply.worker_info.get('device_name', '?')}), reference {'/'.join(bars) or '?'} "
                       f"(bar per case: cases[].bar); candidate in a fresh process, isolation {iso.get('level', '?')}")]
    res = VerifyResult(
        passed=passed, cases=cases, task=task_name, device=dev, device_name=reply.worker_info.get("device_name"),
        reference_precision=r.get("reference_precision"), error=err, stdout=r.get("stdout", reply.stdout),
        stderr=r.get("stderr", reply.stderr), isolation=iso.get("level"),
        limits=Limits(**iso["limits"]) if iso.get("limits") else limits_here(),
        overrides_applied=r.get("overrides_applied") or {},
        versions={k: v for k, v in reply.worker_info.items() if k in ("torch", "triton", "hip", "cuda", "python")},
        shapes_run=run, shapes_skipped=skipped, shape_rule=choice.rule if choice else None, provenance=prov)
    res.reason = verdict_reason(res)
    return res


def _journal(res: VerifyResult, experiment: str | None, task: str | None, candidate: str,
             arguments: dict[str, Any]) -> VerifyResult:
    """Record the finished result under `experiment` (never fails the tool) and set result_id."""
    if experiment is None:
        return res
    rid = record_call("verify_vs_pytorch", experiment=experiment, task=task, source=candidate,
                      arguments=arguments, result=res)
    return set_result_id(res, rid)


async def verify_vs_pytorch(
    candidate: Annotated[str, Field(description="Python source defining run(*inputs) (Triton kernels + launcher) or "
                                    "class ModelNew(nn.Module).")],
    task: Annotated[str | None, Field(
        description="Shipped task name (list_tasks), task folder, or KernelBench .py path.")] = None,
    reference: Annotated[str | None, Field(description="KernelBench-form reference source (instead of task).")] = None,
    shapes: Annotated[list[str] | None, Field(description="Shape-set names, run small -> full; default: the device's "
                                              "(all on a GPU, the small ones on the CPU path).")] = None,
    seeds: Annotated[int | list[int], Field(description="Number of seeds (0..n-1) or explicit seeds; at most 1000.")] = 3,
    tolerance: Annotated[ToleranceArg | None, Field(description="Tighten the per-dtype default (never looser).")] = None,
    overrides: Annotated[dict[str, Any] | None, Field(description="KernelBench module-level constants to set before "
                                                      "get_inputs, e.g. {'batch_size': 16}; recorded.")] = None,
    probe: Annotated[bool, Field(description="Add one signed-input probe case per shape set.")] = True,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="Hard limit for the whole check, seconds.")] = 300,
    wait_s: Annotated[float, Field(ge=0, le=600, description="Return a job_id if not done by then, seconds.")] = 50,
    stop_on_first_failure: Annotated[bool, Field(description="Cascade: stop at the first failing case.")] = False,
    device: Annotated[str | None, Field(description="Pool device ('cpu', 'cuda:0', 'rocm:0'); default the first.")] = None,
    experiment: ExperimentArg = None,
    ctx: Context | None = None,
) -> VerifyResult:
    """Check that a candidate kernel computes the same function as the PyTorch reference.

    Call after compile_kernel and before benchmark. Runs in an isolated process on fresh random inputs
    per shape set and seed, plus one probe case per shape set with signed, larger inputs (probe=true);
    judges each output against its own scale (RMS-floored bar, PyTorch's own error as the floor; cases[].bar
    says which); reports max abs/rel error, mismatches with indices, NaN/Inf, unwritten outputs,
    determinism and input mutation. If not done within wait_s, returns job_id: call job_result(job_id)."""
    import anyio

    from evokernel_mcp.runtime.submit import run_worker_job

    t = await anyio.to_thread.run_sync(_load, task, reference)  # parsing a big source off the event loop
    if overrides:
        t = await anyio.to_thread.run_sync(with_overrides, t, overrides)
    payload = await anyio.to_thread.run_sync(build_payload, t, candidate, shapes, seeds, tolerance,
                                             stop_on_first_failure, probe, job_device(device))
    payload["budget_s"] = max(1.0, timeout_s - 5.0)
    choice = ShapeChoice(**payload["choice"])
    args = {"task": task, "reference": reference, "shapes": shapes, "seeds": seeds, "overrides": overrides,
            "probe": probe, "tolerance": tolerance.model_dump() if tolerance else None, "device": device}

    def build(reply, _j):
        return _journal(result_from_reply(reply, t.name, choice, stop_on_first_failure), experiment, task,
                        candidate, args)

    outcome = await run_worker_job(kind="verify", op="verify", payload=payload, device=device, timeout_s=timeout_s,
                                   wait_s=wait_s, ctx=ctx, build=build)
    if outcome.state == "done" and outcome.result is not None:
        return outcome.result  # type: ignore[return-value]
    if outcome.finished:
        err = VerifyError(**outcome.error.model_dump()) if outcome.error is not None else None
        res = VerifyResult(passed=False, state=outcome.state, task=t.name, device=outcome.device, error=err,
                           overrides_applied=t.overrides_applied, shapes_skipped=choice.skipped,
                           shape_rule=choice.rule)
        res.reason = verdict_reason(res)
        return _journal(res, experiment, task, candidate, args)
    return VerifyResult(passed=None, state=outcome.state, task=t.name, device=outcome.device, job_id=outcome.job_id,
                        overrides_applied=t.overrides_applied, shapes_skipped=choice.skipped, shape_rule=choice.rule,
                        message=f"Not finished within wait_s={wait_s:g} s. Call job_result('{outcome.job_id}', wait_s) "
                        "to fetch the result, job_status to look, cancel_job to stop it.")
