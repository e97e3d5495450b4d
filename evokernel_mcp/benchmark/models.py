"""Result models of benchmark and measure_ceilings (names fixed by docs/api.md; more fields may be added)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from evokernel_mcp.benchmark.verdict import InvalidReason
from evokernel_mcp.models import ErrorInfo, Model, Provenance
from evokernel_mcp.runtime.limits import Limits
from evokernel_mcp.shape_defaults import SkippedShape


class TimingStats(Model):
    """Summary of one series of timed repetitions (all in milliseconds of device time, or host time on CPU)."""

    median_ms: float
    min_ms: float
    mean_ms: float
    p10_ms: float = Field(description="10th percentile (linear interpolation).")
    p90_ms: float = Field(description="90th percentile (linear interpolation).")
    std_ms: float = Field(description="Sample standard deviation (n-1); 0 for a single repetition.")
    ci_median_ms: tuple[float, float] = Field(
        description="Confidence interval of the median [lo, hi] by binomial order statistics "
        "(distribution-free); [min, max] when there are too few repetitions to reach the confidence.")
    reps: int = Field(description="Timed repetitions (warm-up excluded).")
    confidence: float = Field(default=0.95, description="Coverage of ci_median_ms.")
    rel_ci: float = Field(description="Half-width of ci_median_ms over the median (0.01 = +/-1 %).")


class Speedup(Model):
    speedup: float = Field(description="baseline median / candidate median (> 1: the candidate is faster).")
    speedup_ci: tuple[float, float] = Field(
        description="Conservative interval: [baseline CI lo / candidate CI hi, baseline CI hi / candidate CI lo].")
    noise: bool = Field(description="True when the two medians' intervals overlap: no difference was shown.")


class Roofline(Model):
    """How far a time is from what the silicon allows, for one shape set."""

    bytes: float | None = Field(default=None, description="Minimum bytes moved (see counts_source).")
    flops: float | None = Field(default=None, description="Floating-point operations (see counts_source).")
    achieved_gbs: float | None = Field(default=None, description="bytes / median time, in GB/s (1e9).")
    achieved_tflops: float | None = Field(default=None, description="flops / median time, in TFLOP/s (1e12).")
    fraction_of_peak_bandwidth: float | None = Field(default=None, description="achieved / arch-table peak.")
    fraction_of_peak_tflops: float | None = Field(default=None, description="achieved / arch-table peak (dtype).")
    fraction_of_measured_bandwidth: float | None = Field(default=None, description="achieved / measured copy ceiling.")
    fraction_of_measured_tflops: float | None = Field(default=None, description="achieved / measured matmul ceiling.")
    roofline_ms: float | None = Field(
        default=None, description="max(bytes/bandwidth, flops/peak) with measured ceilings where known, else "
        "arch-table peaks (see provenance).")
    roofline_datasheet_ms: float | None = Field(default=None, description="The same bound from arch-table peaks only.")
    bound: str | None = Field(default=None, description="'memory' or 'compute': the larger term of the bound.")
    fraction_of_roofline: float | None = Field(
        default=None, description="roofline_ms / median_ms (1.0 = at the bound; 0.25 = 4x slower than the bound).")
    gap_ms: float | None = Field(default=None, description="median_ms - roofline_ms.")
    fraction_of_peak: float | None = Field(
        default=None, description="roofline_datasheet_ms / median_ms: the larger of fraction_of_peak_bandwidth and "
        "fraction_of_peak_tflops (1.0 = at the datasheet peak of the bounding resource); peak_note says which.")
    peak_note: str | None = Field(default=None, description="Which datasheet peak fraction_of_peak is of (value "
                                  "and source), or why there is none (e.g. the CPU path has no peak).")
    counts_source: str | None = Field(
        default=None, description="Where flops and bytes came from: the caller, task.yaml, or counted "
        "(torch.utils.flop_counter on the reference's forward on meta tensors; bytes of the inputs, parameters "
        "and outputs as they crossed from the reference's process).")
    counts_note: str | None = Field(default=None, description="What the counts leave out (e.g. no FLOP formula "
                                    "for elementwise ops: memory roofline only).")


class TimingInfo(Model):
    """How one series was taken (for a person checking the method)."""

    stop_reason: str | None = Field(default=None, description="target_rel_ci, max_time_s or max_reps.")
    warmup_calls: int | None = None
    copies: int | None = Field(default=None, description="Input sets rotated among.")
    flush_bytes: int | None = Field(default=None, description="Bytes read by the cache flush before each launch.")
    event_overhead_ms: float | None = Field(
        default=None, description="Median of an empty event pair after a flush (with the event clock, "
        "subtracted from the times when subtract_event_overhead).")
    overhead_subtracted: bool = False
    host_timing: bool = False
    timer: str | None = Field(
        default=None, description="'activity' (device kernel timestamps), 'events' (device events) or 'host'.")
    event_median_ms: float | None = Field(
        default=None, description="With the activity clock: the median the events gave for the same repetitions "
        "(the difference is the launch cost on the device).")
    timer_note: str | None = Field(default=None, description="Why the activity clock was not used, if it was not; "
                                   "and fewer timed input sets than the caches want, when device memory was short.")
    kernel_span_median_ms: float | None = Field(
        default=None, description="With the activity clock: the median bare kernel span (first kernel start to "
        "last kernel end), before launch_cost_ms was added.")
    launch_cost_ms: float | None = Field(
        default=None, description="Fixed launch cost added to every activity-clock time (measure_ceilings' "
        "launch_cost_us), so the times read as ncu's gpu__time_duration would; None: nothing added.")


class NoiseFloor(Model):
    """The ratio of the baseline to a byte-identical copy of itself, timed interleaved (the control arm)."""

    ratio: float = Field(description="baseline / control, exp(median per-round log ratio); 1 = no noise.")
    ci: tuple[float, float] = Field(description="Distribution-free interval of that ratio [lo, hi].")
    band: tuple[float, float] = Field(
        description="The interval made symmetric in log around 1 [1/x, x]: a speedup inside it is not resolved.")
    rounds: int = Field(description="Interleaved rounds the floor was measured over.")
    source: str | None = Field(default=None, description="Which noise floor was used, in words: the control arm, "
                               "its rounds and band.")


class OutputCheck(Model):
    """One post-timing check of the candidate's output against the reference, with verify's bar."""

    passed: bool | None = None
    mismatches: int | None = None
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    nan_count: int | None = None
    note: str | None = None
    bar: str | None = Field(default=None, description="The bar applied (as verify's).")


class OutputChecks(Model):
    """The candidate's output checked after timing: guards against caching and wrong timed kernels."""

    timed: OutputCheck | None = Field(default=None, description="A timed call's output, its input storage "
                                      "refilled with new values (catches results cached by address).")
    fresh: OutputCheck | None = Field(default=None, description="The output on fresh inputs.")
    probe: OutputCheck | None = Field(default=None, description="The output on verify's signed probe inputs "
                                      "(randn x 4): catches a precision below the problem's dtype (TF32, fp16, bf16).")


class ShapeResult(Model):
    shape: str
    candidate: TimingStats | None = Field(
        default=None, description="The candidate's timing figures; null when valid is false.")
    baseline: TimingStats | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = Field(
        default=None, description="Interval of the speedup. Interleaved arms: the distribution-free interval "
        "of the median per-round ratio (paired_ci); with a control arm, that interval widened on both sides "
        "by the noise floor's band, so it holds 1 whenever the difference is within what identical code in "
        "two processes shows.")
    paired_ci: tuple[float, float] | None = Field(
        default=None, description="The paired interval alone (not widened by the noise floor).")
    achieved_gbs: float | None = None
    achieved_tflops: float | None = None
    roofline_ms: float | None = None
    fraction_of_roofline: float | None = None
    fraction_of_peak: float | None = Field(
        default=None, description="The candidate's fraction of the datasheet peak of its bounding resource "
        "(roofline.fraction_of_peak; roofline.peak_note says which peak, or why there is none).")
    noise: bool | None = Field(default=None, description="True when speedup_ci holds 1: no difference shown.")
    flags: list[str] = Field(default_factory=list, description="Things a person must look at (e.g. speedup > 10x).")
    roofline: Roofline | None = Field(default=None, description="All roofline numbers for the candidate.")
    baseline_roofline: Roofline | None = None
    candidate_timing: TimingInfo | None = None
    baseline_timing: TimingInfo | None = None
    correct_after_timing: bool | None = Field(
        default=None, description="The candidate's outputs after timing (refilled storage, fresh inputs, and verify's "
        "signed probe inputs where judged) matched the reference.")
    check_detail: str | None = Field(default=None, description="The output checks after timing in one sentence "
                                     "(checks has them structured).")
    checks: OutputChecks | None = None
    valid: bool = Field(
        default=True, description="False when the timing is not of the requested computation (invalid_reason "
        "says why); then speedup, speedup_ci and the timing figures are null. Read this before speedup.")
    invalid_reason: InvalidReason | None = Field(
        default=None, description="One of a closed set (benchmark/verdict.py EXPLAIN has one line per reason); "
        "null when valid.")
    invalid_detail: str | None = Field(default=None, description="The evidence behind invalid_reason.")
    noise_floor: NoiseFloor | None = Field(
        default=None, description="With control=true (the default): the baseline's paired ratio to a "
        "byte-identical copy of itself (the measured noise floor; `source` says which, over how many rounds, "
        "and its band); without a control arm (off, or cut for device memory): the least band two processes of "
        "identical code differ by on this kind of timing (rounds 0, `source` says so).")
    resolved: bool | None = Field(
        default=None, description="True when speedup_ci lies wholly outside the noise floor's band (without a "
        "control arm: the least band); null when there is no speedup.")
    clocks_moved: bool | None = Field(
        default=None, description="True when the SM clock changed by more than a few % or a throttle reason "
        "appeared between the readings around this shape's series (a flag, not invalid); null: not read.")
    runner_clock: str | None = Field(
        default=None, description="The candidate's reported times held against the runner's own clock around "
        "each block (what it read, what was reported, the excess over the baseline arm's and the allowance).")
    probes_checked: int | None = Field(
        default=None, description="Timed repetitions whose output was judged by verify's bar: every element by "
        "chunk sums, and on the host path also at random positions (every repetition; on a GPU every one but "
        "graph replays); null: not probed.")
    confirm_speedup: float | None = Field(default=None, description="With confirm=true: the paired speedup a "
                                          "second fresh process measured on fresh inputs.")
    confirm_speedup_ci: tuple[float, float] | None = None
    raw_invalid: dict[str, Any] | None = Field(
        default=None, exclude=True, description="The nulled figures of an invalid result, for a person (kept "
        "out of the default dump; the runner stores them as an artifact).")


class Clocks(Model):
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    source: str | None = Field(default=None, description="nvidia-smi / amd-smi; None when unavailable.")
    throttle_reasons: list[str] | None = Field(
        default=None, description="Active clock-event (throttle) reasons, e.g. sw_power_cap, hw_thermal_slowdown "
        "(nvidia-smi clocks_event_reasons.active decoded); [] none active; None: not read.")
    power_w: float | None = Field(default=None, description="Board power draw, W; None: not read.")
    temperature_c: float | None = Field(default=None, description="GPU temperature, degrees C; None: not read.")


class ClockReadings(Model):
    before: Clocks | None = None
    after: Clocks | None = None


class BenchmarkResult(Model):
    results: list[ShapeResult] = Field(default_factory=list)
    device: str | None = None
    clocks: ClockReadings | None = Field(default=None, description="Clocks read before and after; None if unavailable.")
    versions: dict[str, str | None] = Field(default_factory=dict)
    job_id: str | None = Field(default=None, description="Set when the job did not finish within wait_s.")
    state: Literal["queued", "running", "done", "failed", "cancelled"] = "done"
    message: str | None = None
    timing_method: str | None = Field(default=None, description="How the times were taken (events, flush, host).")
    error: ErrorInfo | None = None
    stdout: str | None = None
    stderr: str | None = None
    isolation: str | None = Field(default=None, description="How the candidate was contained (bwrap+uid, bwrap "
                                  "or process).")
    limits: Limits | None = Field(default=None, description="Memory, CPU-time and process limits of the processes "
                                  "that ran agent code (a limit hit is error kind oom / timeout naming it).")
    overrides_applied: dict[str, Any] | None = Field(default=None, description="KernelBench constants set.")
    result_id: str | None = Field(default=None, description="Journal entry id (with experiment).")
    reason: str | None = Field(default=None, description="Why it is not a valid result, in one line: the first "
                               "invalid shape set's reason (a wrong answer wins over a later error), else the error.")
    shapes_run: list[str] = Field(default_factory=list, description="Shape sets timed.")
    shapes_skipped: list[SkippedShape] = Field(default_factory=list, description="Shape sets not timed, each with "
                                               "why (not a default on this device, too_big, not reached).")
    shape_rule: str | None = Field(default=None, description="How the shape sets were chosen (shapes, or the "
                                   "device's default).")
    provenance: list[Provenance] = Field(default_factory=list)


class Ceilings(Model):
    device: str
    driver: str | None = None
    torch_version: str | None = None
    copy_gbs: float | None = Field(default=None, description="Device-to-device copy, read + write bytes, GB/s.")
    matmul_tflops: dict[str, float] = Field(default_factory=dict, description="dtype -> TFLOP/s, random data.")
    measured_at: str | None = None
    cached: bool = False
    host_timing: bool = Field(default=False, description="True on the CPU path (no GPU): host numbers.")
    launch_cost_us: float | None = Field(
        default=None, description="Fixed per-launch cost ncu's gpu__time_duration counts and the activity "
        "records do not (ncu duration minus activity span of a tiny kernel, measured here); benchmark adds it "
        "to activity-clock times. None: not measured (see launch_cost_detail).")
    launch_cost_detail: str | None = Field(default=None, description="How launch_cost_us was measured, or why not.")
    provenance: list[Provenance] = Field(default_factory=list)
