"""benchmark and measure_ceilings: server side. Validate, run the runner op as a job on the device
(exclusive: one job per device at a time), then turn the raw times into statistics, speedup, roofline
and flags HERE, in the server, where candidate code never runs."""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from evokernel_mcp.benchmark import work
from evokernel_mcp.benchmark.models import (
    BenchmarkResult,
    Ceilings,
)
from evokernel_mcp.benchmark.outcome import verdict_reason
from evokernel_mcp.benchmark.results import result_from_reply
from evokernel_mcp.benchmark.timing import TimingOptions
from evokernel_mcp.errors import BadInput, EvoError
from evokernel_mcp.runtime.protocol import WorkerReply
from evokernel_mcp.shape_defaults import ShapeChoice, choose_shapes
from evokernel_mcp.tasks import Task, with_overrides

log = logging.getLogger(__name__)
CEILINGS_OP = "measure_ceilings"  # runtime/ops.py


def _load(task: str | None, reference: str | None) -> Task:
    from evokernel_mcp.verify.api import _load as load

    return load(task, reference)


def job_device(device: str | None) -> str:
    from evokernel_mcp.verify.api import job_device as pick

    return pick(device)


def _check_source(source: str, what: str) -> None:
    from evokernel_mcp.tasks import check_candidate_source

    try:
        check_candidate_source(source)
    except BadInput as e:
        raise BadInput(f"{what}: {e}") from None


def _journal(res: BenchmarkResult, experiment: str | None, task: str, candidate: str, baseline: str,
             shapes: list[str] | None) -> BenchmarkResult:
    """Record the finished call in the experiment journal when a label is given (never fails the tool)."""
    if not experiment:
        return res
    try:
        from evokernel_mcp.journal import record_call

        rid = record_call("benchmark", experiment=experiment, task=task, source=candidate,
                          arguments={"baseline": "pytorch" if baseline == "pytorch" else "source", "shapes": shapes},
                          result=res)
        res.result_id = rid
    except Exception:  # noqa: BLE001 - the journal is an extra
        log.exception("journal record failed")
    return res


def build_payload(t: Task, candidate: str, baseline: str, shapes: list[str] | None, opt: TimingOptions,
                  seed: int, device: str | None = None) -> dict[str, Any]:
    """The runner op's payload. Without `shapes`, the shape sets are `device`'s default (shape_defaults.choose_shapes);
    payload["choice"] says which and why."""
    _check_source(candidate, "candidate")
    if baseline != "pytorch":
        _check_source(baseline, "baseline")
    choice = choose_shapes(t, shapes, device)
    return {"task": t.model_dump(), "candidate": candidate, "baseline": baseline, "shapes": choice.shapes,
            "options": dataclasses.asdict(opt), "seed": seed, "ceilings": True, "choice": choice.model_dump(),
            "control": True}  # the control arm is part of every default benchmark (evaluate_batch's too)


async def benchmark(
    candidate: Annotated[str, Field(description="Python source defining run(*inputs) or class ModelNew(nn.Module); "
                                    "verify it first with verify_vs_pytorch.")],
    task: Annotated[str | None, Field(
        description="Shipped task name (list_tasks), task folder, or KernelBench .py path.")] = None,
    reference: Annotated[str | None, Field(description="KernelBench-form reference source (instead of task).")] = None,
    baseline: Annotated[str, Field(
        description="'pytorch' (the reference) or a second candidate's source.")] = "pytorch",
    shapes: Annotated[list[str] | None, Field(description="Shape-set names, small -> full; default: the device's (all "
                                              "on a GPU, the small ones on the CPU path).")] = None,
    cold_cache: Annotated[bool, Field(description="Flush L2 (+ Infinity Cache) before every timed launch.")] = True,
    min_reps: Annotated[int, Field(ge=1, le=100000, description="Timed repetitions at least.")] = 20,
    max_time_s: Annotated[float, Field(gt=0, le=120, description="Stop adding repetitions after this many "
                                       "seconds per measured series (candidate and baseline each, per shape).")] = 2.0,
    target_rel_ci: Annotated[float, Field(gt=0, le=1, description="Stop when the median's CI half-width is "
                                          "below this fraction of the median (0.005 = +/-0.5 %).")] = 0.005,
    use_graph: Annotated[bool, Field(description="Time CUDA/HIP graph replays (launch-bound callables).")] = False,
    timer: Annotated[Literal["auto", "events"], Field(
        description="'auto': the device's own kernel start/end timestamps (CUPTI / roctracer activity records "
        "via torch.profiler), the clock ncu's gpu__time_duration reads; falls back to events, saying why, when "
        "the records cannot be used. 'events': device events around each launch (these also count the "
        "kernel's launch cost on the device, ~1 us on an H200).")] = "auto",
    subtract_event_overhead: Annotated[bool, Field(
        description="With the event clock: subtract the measured cost of an empty event pair (~1 us on an "
        "H200) from every time (without it events read +23%/+6%/+1% over ncu at 9/42/349 us).")] = True,
    add_launch_cost: Annotated[bool, Field(
        description="With the activity clock: add the device's fixed per-launch cost as ncu counts it "
        "(measure_ceilings' launch_cost_us, ~0.9 us on an H200), so times read as ncu's gpu__time_duration "
        "would. Off: bare kernel spans, as nsys / torch.profiler / rocprofv3 kernel traces report them. The "
        "bare span median is reported either way (kernel_span_median_ms).")] = True,
    compute_unit: Annotated[Literal["matrix", "vector"] | None, Field(
        description="Which FLOP peak bounds the roofline: matrix units (MFMA / tensor cores) or vector ALUs "
        "(e.g. depthwise convolution, elementwise). Default: the task's `compute_unit`, else matrix.")] = None,
    seed: Annotated[int, Field(ge=0, le=2**31 - 1, description="Seed of the timed inputs (the check uses "
                               "another).")] = 0,
    control: Annotated[bool, Field(description="Time a byte-identical copy of the baseline as a third arm (on by "
                                   "default; the three arms share the time budget of two): its ratio to the "
                                   "baseline is the measured noise floor (noise_floor); a speedup inside it is "
                                   "not resolved. Off: the band is the least two processes of identical code "
                                   "differ by (1.5 % on a GPU, 1 % on the host).")] = True,
    confirm: Annotated[bool, Field(description="Re-time the candidate in a second fresh process with fresh "
                                   "inputs; the result is invalid when the two disagree.")] = False,
    overrides: Annotated[dict[str, Any] | None, Field(description="KernelBench module-level constants to "
                                                      "set before get_inputs (e.g. {'batch_size': 16}).")] = None,
    experiment: Annotated[str | None, Field(max_length=200, description="Journal label to record this "
                                            "call under (e.g. 'conv3d/step3-lds').")] = None,
    flops: Annotated[float | dict[str, float] | None, Field(
        description="Useful FLOPs of one call (2 per multiply-add), for the roofline and fraction_of_peak: a number "
        "for the one shape set timed, or {shape set: FLOPs}. Default: the task's (task.yaml), else counted by "
        "torch.utils.flop_counter on the reference's forward (matmul/conv/attention ops only).")] = None,
    bytes: Annotated[float | dict[str, float] | None, Field(
        description="Minimum DRAM bytes of one call, as `flops`. Default: the task's, else inputs + parameters + "
        "outputs, each once.")] = None,
    timeout_s: Annotated[float, Field(gt=0, le=3600, description="Hard limit for the whole job, seconds.")] = 600,
    wait_s: Annotated[float, Field(ge=0, le=600, description="Return a job_id if not done by then, seconds.")] = 50,
    device: Annotated[str | None, Field(
        description="Pool device ('cpu', 'cuda:0', 'rocm:0'); default the first.")] = None,
    ctx: Context | None = None,
) -> BenchmarkResult:
    """Time a verified candidate against PyTorch (or a second candidate) and against the hardware's limit.

    Call after verify_vs_pytorch passes. Per shape set: median/min/mean/p10/p90/std and the median's
    confidence interval (ms of device time from the kernels' own timestamps plus the launch cost ncu
    counts, cold L2 by default; candidate_timing says which clock), speedup with its interval and a noise
    verdict, achieved GB/s and TFLOP/s, the roofline-bound time and the fraction of it reached, the fraction
    of the datasheet peak (fraction_of_peak; FLOPs and bytes from the task, the caller, or counted), flags
    for a person (speedup > 10x, output wrong after timing). The device is held exclusively while
    timing. If not done within wait_s, returns job_id: then call job_result(job_id, wait_s)."""
    from evokernel_mcp.runtime.submit import run_worker_job

    opt = TimingOptions(cold_cache=cold_cache, min_reps=min_reps, max_time_s=max_time_s,
                        target_rel_ci=target_rel_ci, use_graph=use_graph, max_reps=max(20000, min_reps),
                        subtract_overhead=subtract_event_overhead, timer=timer)
    t = _load(task, reference)
    compute_unit = compute_unit or t.compute_unit or "matrix"
    t = with_overrides(t, overrides)
    payload = build_payload(t, candidate, baseline, shapes, opt, seed, job_device(device))
    payload.update(budget_s=max(1.0, timeout_s - 5.0), control=control, confirm=confirm)
    choice = ShapeChoice(**payload["choice"])
    given = {"flops": work.per_shape(flops, choice.shapes, "flops"),
             "bytes": work.per_shape(bytes, choice.shapes, "bytes")}

    def build(reply, _j):
        res = result_from_reply(reply, t, compute_unit, opt.confidence, add_launch_cost, choice, given)
        if overrides:
            res.overrides_applied = dict(overrides)
        return _journal(res, experiment, task or t.name, candidate, baseline, shapes)
    outcome = await run_worker_job(
        kind="benchmark", op="benchmark", payload=payload, device=device, timeout_s=timeout_s, wait_s=wait_s,
        ctx=ctx, build=build)
    if outcome.state == "done" and outcome.result is not None:
        return outcome.result  # type: ignore[return-value]
    if outcome.finished:
        res = BenchmarkResult(state=outcome.state, device=outcome.device, error=outcome.error,
                              shapes_skipped=choice.skipped, shape_rule=choice.rule)
        res.reason = verdict_reason(res)
        return res
    return BenchmarkResult(state=outcome.state, device=outcome.device, job_id=outcome.job_id,
                           shapes_skipped=choice.skipped, shape_rule=choice.rule,
                           message=f"Not finished within wait_s={wait_s:g} s. Call job_result('{outcome.job_id}', "
                           "wait_s) to fetch the result, job_status to look, cancel_job to stop it.")


async def measure_ceilings(
    refresh: Annotated[bool, Field(description="Measure again even if cached for this device/driver/torch.")] = False,
    device: Annotated[str | None, Field(description="Pool device; default the first.")] = None,
    timeout_s: Annotated[float, Field(gt=0, le=1800)] = 300,
    wait_s: Annotated[float, Field(ge=0, le=600)] = 50,
    ctx: Context | None = None,
) -> Ceilings:
    """Measure the device's real ceilings once: device-to-device copy bandwidth (GB/s, read + write bytes)
    and matmul TFLOP/s for bf16/fp16/fp32 on random data. Cached per device + driver + torch version;
    benchmark uses them for roofline_ms and the fraction of measured ceilings. Cheap when cached."""
    from evokernel_mcp.runtime.submit import run_worker_job

    def build(reply: WorkerReply, _j) -> Ceilings:
        if not reply.ok or not reply.result:
            msg = reply.error.message if reply.error else "no result"
            raise EvoError(f"measuring the ceilings failed on {reply.device}: {msg}")
        return Ceilings(**reply.result)

    outcome = await run_worker_job(kind="measure_ceilings", op=CEILINGS_OP, payload={"refresh": refresh},
                                   device=device, timeout_s=timeout_s, wait_s=wait_s, ctx=ctx, build=build)
    if outcome.state == "done" and outcome.result is not None:
        return outcome.result  # type: ignore[return-value]
    if outcome.finished:
        raise EvoError(outcome.error.message if outcome.error else f"measure_ceilings {outcome.state}")
    raise EvoError(f"measure_ceilings is still running as {outcome.job_id}: call job_result('{outcome.job_id}', "
                   "wait_s) for the result")
