"""Op "verify" in the runner (harness code only; never imports agent code).

Per job: the reference child for this reference source (cached; spares.py) plans each case's memory,
makes its inputs and outputs (native, and float64 where it fits); a fresh candidate child (a spare,
used for this job only, then killed with its tree and its scratch dir removed) runs the candidate twice
on its own copies; the runner compares (case.py) on its own device (cuda when present: tensors arrive
there one at a time, so no float64 host copy of a whole output is made), in blocks.

Cases: every seed of every shape set, then (on by default) one probe case per shape set: the first
seed's inputs replaced by signed, larger ones (verify/probe.py), reported with probe=true.
A failure of the inputs or the reference is reported as kind "harness" (a case too big for the free
memory as "too_big", with the sizes), never as the candidate's.
"""

from __future__ import annotations

import platform
import time
from typing import Any

from evokernel_mcp import settings
from evokernel_mcp.runtime.context import RunnerContext
from evokernel_mcp.runtime.devmem import release_host, trim_between_cases
from evokernel_mcp.runtime.spares import ChildFailed, handed_over, note, wall_deadline
from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.messages import VerifyRequest, VerifyStep, VerifyStepsRequest

LOAD_TIMEOUT_S = 120.0
OUTPUT_SLACK = 8  # a candidate may send up to 8x the reference's output bytes (dtype mix-ups), not more


def _nbytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(o) for o in obj.values())
    return 0


def load_candidate(ctx, child, source: str, task: Task, deadline: float) -> None:
    child.load_source(source, {"op": "load", "role": "candidate", "source": source, "task": task.model_dump()},
                      timeout_s=min(LOAD_TIMEOUT_S, wall_deadline(deadline)))


def tensor_device(ctx) -> str | None:
    """Where the runner keeps what it receives: the GPU when the runner has one (comparisons run there)."""
    if ctx.device == "cpu":
        return None
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        return None


def runner_verify(ctx: RunnerContext, req: VerifyRequest, progress) -> dict[str, Any]:
    """Returns {cases, error?, reference_precision, isolation, stdout, stderr, overrides_applied} (VerifyReply)."""
    deadline = time.monotonic() + req.budget_s
    return _verify_steps(ctx, req.candidate, [req], deadline, progress)[0]


def runner_verify_steps(ctx: RunnerContext, req: VerifyStepsRequest, progress) -> dict[str, Any]:
    """Op "verify_steps": several verify payloads (payload["steps"]: task, shapes, seeds, probe, tolerance,
    stop_on_first_failure each) run in turn against ONE candidate child, which loads the candidate once; it
    stops after the first step that does not pass. The batch cascade's verify_small then verify: one process
    start per candidate instead of two. Returns {"steps": [op "verify"'s result per step run]}."""
    deadline = time.monotonic() + req.budget_s
    return {"steps": _verify_steps(ctx, req.candidate, list(req.steps), deadline, progress)}


def _passed(out: dict[str, Any]) -> bool:
    return "error" not in out and bool(out["cases"]) and all(c.get("passed") for c in out["cases"])


def _verify_steps(ctx: RunnerContext, source: str, steps: list[VerifyStep], deadline: float, progress) -> list[dict[str, Any]]:
    outs: list[dict[str, Any]] = []
    cand = ref = None
    ctx.spares.wait_retired_if_tight()
    try:
        for k, step in enumerate(steps):
            task = step.task
            out: dict[str, Any] = {"cases": [], "platform": platform.machine(),
                                   "overrides_applied": task.overrides_applied,
                                   "reference_precision": "float64 (inputs upcast) where it fits, else the native "
                                   "dtype; in the reference's own process"}
            outs.append(out)
            try:
                ref = ctx.spares.reference(task, timeout_s=min(LOAD_TIMEOUT_S, wall_deadline(deadline)))
            except ChildFailed as e:
                out["error"] = e.info()
                out["isolation"] = ctx.spares.isolation()
                return outs
            if cand is None:
                give_back_early(ctx, ref, SPARES_WITHIN_CAP)  # (the candidate is taken from what it keeps)
                cand = ctx.spares.take("verify")
                # loaded with the last step's task: the candidate side reads only each case's init inputs
                # and state (sent with every run), so one load serves every step
                load_candidate(ctx, cand, source, steps[-1].task, deadline)
                note("verify: candidate loaded; waited %.2f s for the last job's children to end",
                     ctx.spares.wait_retired())
            out["isolation"] = ctx.spares.isolation()
            _cases(ctx, ref, cand, task, step, deadline, progress, out, model_key=k if len(steps) > 1 else None)
            if k < len(steps) - 1 and not _passed(out):
                return outs
    except ChildFailed as e:
        outs[-1]["error"] = e.info()
    finally:
        release_host()  # the pinned host memory of a big case's reference outputs (_lean_case), whatever ended it
        if cand is not None:  # (no candidate process yet: the runner's own captured output stands)
            stdout, stderr = cand.output()
            ctx.spares.retire(cand, big=bool(getattr(ref, "capped", False)))  # (within_cap: planned within the cap)
            for out in outs:
                out["stdout"], out["stderr"] = stdout, stderr
    return outs


def _case_list(step: VerifyStep) -> list[tuple[str, int, bool]]:
    seeds = list(step.seeds)
    cases = []
    for shape in step.shapes:
        cases += [(shape, s, False) for s in seeds]
        if step.probe and seeds:
            cases.append((shape, seeds[0], True))
    return cases


def _reference_case(ctx, ref, shape: str, seed: int, probe: bool, deadline: float, dev: str | None,
                    before=None) -> dict:
    """The reference's case; `before(plan)`: called first with the case's memory plan (op "plan", meta tensors
    only), so that idle processes are given back before the reference's own peak."""
    what = f"shape set {shape!r} seed {seed}" + (" (probe)" if probe else "")
    try:
        if before is not None:
            before(plan_of(ref.request({"op": "plan", "shape": shape, "seed": seed, "hi": True,
                                        "memory_factor": settings.get().memory_factor},
                                       timeout_s=wall_deadline(deadline), max_bytes=1 << 20)))
        case = ref.request({"op": "case", "shape": shape, "seed": seed, "hi": True, "probe": probe, "hold": True,
                            "memory_factor": settings.get().memory_factor},
                           timeout_s=wall_deadline(deadline), max_bytes=1 << 42, device=dev)
        if case.get("hi_held"):
            case["hi"] = ref.request({"op": "expected", "held": True}, timeout_s=wall_deadline(deadline),
                                     max_bytes=1 << 43, device=dev)["hi"]
    except ChildFailed as e:
        if e.kind in ("timeout", "crash", "oom", "gpu_fault"):
            ctx.spares.drop_reference(ref)
        kind = "harness" if e.kind in ("exception", "bad_candidate") else e.kind
        raise e.again(kind, f"reference side, {what}: {e.message}") from e
    return case


def give_back(ctx, keep: tuple, state: dict, keep_spares: int = 0) -> dict:
    """Our idle processes' device memory given back for this job (spares.give_back_idle), noted in `state`."""
    g = state["gave_back"] = ctx.spares.give_back_idle(keep=keep, keep_spares=keep_spares)
    freed = f", {g['freed_bytes'] / 1e9:.1f} GB freed" if g.get("freed_bytes") is not None else ""
    g["what"] = f"{g['processes']} idle process(es) of ours stopped and the runner's cache emptied{freed}"
    return g


def with_room(ctx, ask, keep: tuple, state: dict) -> dict:
    """ask() the reference for a case; when it refuses the case as too_big, give our idle processes' device
    memory back (spares, cached references of other sources, the runner's cache: spares.give_back_idle; once
    per job) and ask again. The case then says what was given back; a refusal even then says so too."""
    try:
        return ask()
    except ChildFailed as e:
        if e.kind != "too_big" or "gave_back" in state or ctx.device == "cpu":
            raise
    what = give_back(ctx, keep, state)["what"]
    try:
        case = ask()
    except ChildFailed as e:
        if e.kind == "too_big":
            raise e.again("too_big", f"{e.message} (asked again after giving back memory: {what})") from e
        raise
    case["notes"] = [*(case.get("notes") or []), f"device memory given back for this case: {what}"]
    return case


# Spares a job planned within its memory cap keeps at most (the next job's candidate starts from one); the plan's
# headroom is an estimate (a forward's temporaries are not in it), and six idle contexts are 3.6 GiB on an H100
SPARES_WITHIN_CAP = 1


def within_cap(ctx, ref, plan: dict | None, state: dict, spares_room: bool = True) -> str | None:
    """A case planned within the job's memory cap (runtime/devplan.data_cap): our idle processes (spares, cached
    references of other sources) count against it too, so those beyond what the cap leaves room for (at most
    SPARES_WITHIN_CAP) are stopped
    (once per job; spares start again when it ends; none is kept without `spares_room`). `plan`: the case's,
    asked before the reference makes anything (op "plan"). Returns what was given back, or None."""
    from evokernel_mcp.runtime.devplan import CONTEXT_BYTES_ASSUMED

    # (the plan is the reference's, agent code's: numbers only decide how many idle processes of ours stop)
    plan = plan if isinstance(plan, dict) else {}
    cap, needed = plan.get("cap_bytes"), plan.get("needed_bytes") or 0
    if ref is not None:  # (remembered for the next job of this source: give_back_early)
        ref.capped = _count(cap)
    if not _count(cap) or not _count(needed) or "gave_back" in state or ctx.device == "cpu":
        return None
    room = min(max(0, cap - needed) // CONTEXT_BYTES_ASSUMED, SPARES_WITHIN_CAP)
    return give_back(ctx, (ref,), state, keep_spares=room if spares_room else 0)["what"]


def give_back_early(ctx, ref, keep_spares: int) -> dict | None:
    """A verify of a reference source whose last job was planned within the memory cap (its cached process says so:
    Child.capped) is likely big again: our idle processes but `keep_spares` ready spares go before it takes its
    candidate, not after its own processes have joined them (its plan still gives back what is idle then:
    within_cap). Not before a benchmark's takes: so held on an H100, a benchmark waited the whole start timeout (180
    s) for its first arm, the device gate having let a cold start through for it (Spares.take now starts a timed
    arm of its own during a hold; the early give-back before a benchmark was not measured again). Returns what was
    given back, or None."""
    if not getattr(ref, "capped", False) or ctx.device == "cpu":
        return None
    return give_back(ctx, (ref,), {}, keep_spares=keep_spares)


def plan_of(reply: Any) -> dict | None:
    """The plan in a reference's op "plan" reply (the reference is agent code: anything else reads as none)."""
    plan = reply.get("plan") if isinstance(reply, dict) else None
    return plan if isinstance(plan, dict) else None


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _lean_case(task: Task, shape: str, seed: int, case: dict, cand, deadline: float, dev: str, what: str,
               model_key: int | None, tolerance: dict | None, probe: bool) -> dict:
    """A case planned within its memory cap, judged one run at a time: run A against the reference, then only
    a digest of run A's outputs is kept while run B arrives (the runner never holds the reference's outputs and
    both runs at once). Unwritten elements are NaN in run A: where run A has any NaN, run A is kept for run B
    and the case is judged as every other is. Run B is compared with run A by digest (deterministic or not).
    Where a device copy of the reference's outputs beside run A's would take the job past its cap
    (devplan.outputs_on_host: a 1-2 GB convolution's; a 4 GiB tall-skinny matmul's, with the export of the candidate's
    reply beside them), they wait in host memory, judged block by block."""
    from evokernel_mcp.runtime.devmem import on_host
    from evokernel_mcp.runtime.devplan import outputs_on_host
    from evokernel_mcp.verify.case import case_record, has_nan, judge, judge_outputs, output_digests

    def later(k: int) -> dict:
        return _candidate_runs(cand, case, seed, deadline, dev, what, model_key, only=k)[0]

    host = outputs_on_host(_nbytes(case["inputs"]), _nbytes(case["native"]), settings.get().memory_factor,
                           case.get("workspace_bytes"), reply_beside=True)
    if host:
        case["native"], case["hi"] = on_host(case["native"]), on_host(case.get("hi"))
        trim_between_cases()
    run_a = later(0)
    if has_nan(run_a.get("out"), dev):
        return judge(task, shape, seed, case, run_a, later(1), tolerance, device=dev, probe=probe, ref_in_place=host)
    plan = case.get("plan") or {}
    res = judge_outputs(task, case["native"], case.get("hi"), run_a.get("out"), None, inputs=case.get("inputs"),
                        arg=case.get("arg_reductions"), override=tolerance, chunk=plan.get("chunk_elems"),
                        device=dev, native_spread=case.get("native_spread"),
                        sampled_torch_err=case.get("sampled_torch_err"), ref_in_place=host)
    want = output_digests(run_a.get("out"), dev)
    run_a["out"] = None
    trim_between_cases()
    run_b = later(1)
    got = output_digests(run_b.get("out"), dev)
    run_b["out"] = None
    res["deterministic"] = want is not None and got == want
    return case_record(shape, seed, case, res, run_a, run_b, probe)


def _candidate_runs(cand, case: dict, seed: int, deadline: float, dev: str | None, what: str,
                    model_key: int | None = None, only: int | None = None) -> list[dict]:
    """Runs A (poison NaN) and B (poison -320) of the candidate on the case's inputs (`only`: one of them).
    Within the job's memory cap (plan pristine=False, on a device) the inputs go over first, handed over (the
    child keeps the runner's export as its own: one copy), and the runner's copy is let go before run A: its
    forward's temporaries (a loss's: 2 x its inputs) then have that room."""
    limit = OUTPUT_SLACK * _nbytes(case["native"]) + (16 << 20)
    pristine = bool((case.get("plan") or {}).get("pristine", True))  # False: a digest instead of a second copy
    base = {"op": "run", "init_inputs": case["init_inputs"], "state": case["state"], "seed": seed,
            "pristine": pristine}
    if model_key is not None:  # one child serving several steps: a step's ModelNew is built for its own sizes
        base["model_key"] = f"{model_key}:{seed}"
    loaded_first = not pristine and dev not in (None, "cpu") and only in (None, 0)
    if loaded_first:
        _inputs_to_host(case)
        _ask(cand, {**base, "poison": "nan", "inputs": case["inputs"], "keep": True, "load_only": True}, deadline,
             1 << 20, dev, what, handed=True)
        _let_inputs_go(case)
    runs = []
    for i, poison in enumerate(("nan", "sentinel")):
        if only is not None and i != only:
            continue
        same = i == 1 or loaded_first
        req = {**base, "poison": poison, "keep": i == 0, "same_inputs": same}
        if not same:
            req["inputs"] = case["inputs"]
        runs.append(_ask(cand, req, deadline, limit, dev, what))
        if i == 0:
            _let_inputs_go(case)
    return runs


def _ask(cand, req: dict, deadline: float, limit: int, dev: str | None, what: str, handed: bool = False) -> dict:
    """One request to the candidate; handed: its tensors are the child's to keep (courier.handing_over)."""
    try:
        with handed_over(cand, handed):
            return cand.request(req, timeout_s=wall_deadline(deadline), max_bytes=limit, device=dev)
    except ChildFailed as e:
        if e.kind == "exception":
            e.message = f"candidate raised {e.message} ({what})"
        raise


def _inputs_to_host(case: dict) -> None:
    """Before the runner hands a case within its memory cap over to the candidate: where devplan.inputs_from_host says
    so, its copy of the inputs waits in host memory (pinned; release_host at the job's end), and the export the
    candidate adopts is the only device copy (the export copies host memory to the device). On the device path, the
    runner's copy stayed beside the candidate's until run A: 6_Matmul_with_large_K_dimension_ on an H100 peaked at
    3.3x its own bytes, 1 GiB of inputs twice beside three CUDA contexts. An arg-reduction's inputs stay (the judge
    reads the values its indices select), as do inputs too small for a transfer by fd (courier.THRESHOLD)."""
    from evokernel_mcp.runtime.courier import THRESHOLD
    from evokernel_mcp.runtime.devmem import on_host, release_cached
    from evokernel_mcp.runtime.devplan import inputs_from_host

    inputs = case.get("inputs")
    if case.get("arg_reductions") or not isinstance(inputs, (list, tuple)):
        return
    i = _nbytes(inputs)
    if i < THRESHOLD or not inputs_from_host(i, _nbytes(case.get("native")), settings.get().memory_factor):
        return
    case["inputs"] = on_host(inputs)
    inputs = None  # (the device copy goes before the cache is emptied)
    release_cached()


def _let_inputs_go(case: dict) -> None:
    """The candidate keeps the inputs: the runner's copy goes (the judge needs only their dtypes), and with it
    the cache it leaves; an arg-reduction's inputs stay (the values its indices select)."""
    if case.get("arg_reductions") or not isinstance(case.get("inputs"), (list, tuple)):
        return
    if any(getattr(t, "numel", lambda: 0)() for t in case["inputs"]):
        case["inputs"] = _dtype_stubs(case["inputs"])
        trim_between_cases()


def _dtype_stubs(inputs: Any) -> Any:
    """Empty host tensors of the inputs' dtypes in their place (Python values kept): the runner's copy of the
    inputs is let go once the candidate has its own, so run B and the judge have that device memory."""
    import torch

    if not isinstance(inputs, (list, tuple)):
        return inputs
    return [torch.empty(0, dtype=t.dtype) if isinstance(t, torch.Tensor) else t for t in inputs]


def _cases(ctx, ref, cand, task: Task, step: VerifyStep, deadline: float, progress, out: dict,
           model_key: int | None = None) -> None:
    from evokernel_mcp.verify.case import judge

    dev = tensor_device(ctx)
    todo = _case_list(step)
    room: dict = {}
    planned: set[str] = set()  # shape sets whose plan was asked (a plan depends on the sizes, not the seed)
    for i, (shape, seed, probe) in enumerate(todo):
        what = f"shape set {shape!r}, seed {seed}" + (", probe" if probe else "")
        progress(i, len(todo), f"verify {task.name} {what}")
        early: list[str] = []

        def before(plan: dict | None) -> None:  # before the reference's own peak
            early.extend(filter(None, [within_cap(ctx, ref, plan, room)]))
        ask_plan = dev is not None and "gave_back" not in room and shape not in planned
        planned.add(shape)
        case = with_room(ctx, lambda: _reference_case(ctx, ref, shape, seed, probe, deadline, dev,
                                                      before if ask_plan else None), (ref,), room)
        gave = within_cap(ctx, ref, case.get("plan"), room) or (early[0] if early else None)
        if gave:
            case["notes"] = [*(case.get("notes") or []), f"within the job's memory cap (memory_factor x its own "
                             f"bytes): {gave}"]
        if dev is not None and not (case.get("plan") or {}).get("pristine", True):
            out["cases"].append(_lean_case(task, shape, seed, case, cand, deadline, dev, what, model_key,
                                           step.tolerance, probe))
        else:
            runs = _candidate_runs(cand, case, seed, deadline, dev, what, model_key)
            out["cases"].append(judge(task, shape, seed, case, runs[0], runs[1], step.tolerance,
                                      device=dev or "cpu", probe=probe))
            del runs
        del case
        trim_between_cases()
        if step.stop_on_first_failure and not out["cases"][-1]["passed"]:
            return
    progress(len(todo), len(todo), "verify done")
    out["reference_precision"] = precision_summary(out["cases"]) or out.get("reference_precision")


def precision_summary(cases: list[dict]) -> str | None:
    """The result-level reference_precision: what the cases were judged against ('float64 (inputs upcast),
    in the reference's own process' when every case had it; else each kind with its count)."""
    kinds = [c.get("reference_precision") for c in cases if c.get("reference_precision")]
    if not kinds:
        return None
    if set(kinds) == {"float64"}:
        return "float64 (inputs upcast), in the reference's own process"
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    return "; ".join(f"{k} [{n} of {len(cases)} cases]" for k, n in counts.items())
