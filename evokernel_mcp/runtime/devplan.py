"""The device memory of a job across all of our processes, and what our idle processes give back when it needs
the room. Pure arithmetic on numbers handed in (free and total bytes from torch.cuda.mem_get_info, which counts
every process on the device; what each idle process holds): no device, no I/O, so every decision is unit-tested
on the CPU with injected numbers.

A verify case at its peak (tensors on one device, each held by the process named; a benchmark shape: BenchPlan):
  reference   inputs + the copy its forward runs on + native outputs, and the float64 copy (inputs and outputs)
              while its forward runs
  runner      native outputs + candidate runs A and B (+ the float64 outputs where kept), one bool mask and the
              comparison blocks (its copy of the inputs goes once the candidate has its own; an arg-reduction's
              inputs stay, beside outputs too small to matter)
  candidate   inputs + its pristine copy + one run's outputs
  (lean, within a job's memory cap: no process keeps a second copy of the inputs, the reference's forwards and
  the candidate's runs are on the inputs themselves, checked by digest; the candidate gets its inputs before
  run A and the runner lets its own copy go first; the runner judges run A before run B arrives, keeping a
  digest of run A's outputs, not the outputs)
  transfer    the largest tensor once more (a VMM export is a second allocation until the peer has copied it)
The reference's float64 copy is transient (its forward, then sent and dropped) and does not coincide with the
candidate's runs, so the peak is the larger of the two phases.

A job whose own bytes (inputs + outputs) exceed BIG_JOB_BYTES is planned within a cap as well: our processes
together within `memory_factor` (settings; 3 by default) times its own bytes, the CUDA contexts of the job's
processes counted (data_cap). Under the cap the plan gives up accuracy and robustness aids before it would
need more: the float64 reference sampled instead of whole; always (verify) no second copy of the inputs in
any process, a mutation found by a digest instead; the refill pool, the control arm, the sampled repetitions
(benchmark). The cap is soft: a job whose leanest plan exceeds it still runs where the free memory holds it.

Idle processes of ours (spares, cached reference processes of other sources, the runner's allocator cache) are
counted: when the job does not fit in what is free, they are stopped (or their caches emptied) and the job is
planned again against what is free then. A job that does not fit even then is `too_big`, naming the bytes it
needs, the bytes the device has and the overrides that would shrink it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

HEADROOM = 0.9  # plan within this fraction of the free memory (the allocator's rounding, a context's growth)
# an idle CUDA process of ours without a per-process reading: 414-436 MiB a child and 524 MiB the runner on an H100
# with the stack limit of runtime/cuda_stack.py (612-784 MiB without it), plus what its libraries keep once used
# (cuBLAS's handle and workspace: an idle reference after a matmul held 620 MiB)
CONTEXT_BYTES_ASSUMED = 640 << 20
BIG_JOB_BYTES = 10**9  # own bytes above which a job is planned within memory_factor x them (data_cap)


def data_cap(own_bytes: int, factor: float, processes: int) -> int | None:
    """Bytes of tensors a job may plan for, our processes together, so that they stay within factor x its own
    bytes (inputs + outputs) with the CUDA contexts of its `processes` counted; None (no cap) for a job of at
    most BIG_JOB_BYTES or with the factor 0 (off)."""
    if factor <= 0 or own_bytes <= BIG_JOB_BYTES:
        return None
    return max(0, int(factor * own_bytes) - processes * CONTEXT_BYTES_ASSUMED)


def reported_bytes(x: Any) -> int:
    """A byte count a child reported (agent code's process: anything but a non-negative int reads as 0)."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else 0


def outputs_on_host(input_bytes: int, output_bytes: int, factor: float, workspace_bytes: Any = 0, *,
                    reply_beside: bool = False) -> bool:
    """Whether the runner keeps the reference's outputs of a check in host memory, judging them block by block
    (verify's lean case, the benchmark's post-timing checks): where its device copy beside the candidate's inputs,
    outputs and forward's working memory (`workspace_bytes`: the reference's forward measured it; agent code's
    number, it only picks where the runner keeps a copy) would take the job past its cap (data_cap, the job's three
    processes' contexts counted): a job of 1-2 GB whose outputs are most of its bytes (a convolution's).
    reply_beside: one side's outputs arrive while the runner holds the other side's device copy (verify's lean
    case: the candidate's run beside the reference's outputs; the benchmark's checks, whose first reply then waits
    on the host: benchmark/runner_side._reply_beside), so their export, a second device copy in the sender until the
    runner has them, counts too where it is more than the working memory: 9_Tall_skinny's 4 GiB of outputs read
    3.4x its own bytes with the device copy (an H100), 2.6x with the host copy (an H200). Elsewhere the device copy
    stays: the host round trip costs a copy each way of every check (2-5 s a verify for 2.5-4 GiB of outputs)."""
    cap = data_cap(input_bytes + output_bytes, factor, 3)
    work = reported_bytes(workspace_bytes)
    peak = input_bytes + 2 * output_bytes + (max(output_bytes, work) if reply_beside else work)
    return cap is not None and peak > cap


def inputs_from_host(input_bytes: int, output_bytes: int, factor: float) -> bool:
    """Whether the runner hands a capped verify case's inputs over to the candidate from host memory (the export the
    candidate adopts then the only device copy): where its own copy beside the candidate's and the outputs would take
    the job past its cap (data_cap, three processes' contexts counted), as for a 1-2 GB shape. Elsewhere the device
    path stays: pinning a reduction's 8 GiB took 5-6 s a case on an H100, for a job at 2.2x its own bytes either way.
    The same rule sends a staged benchmark shape's refill values to the candidate in host memory (its timed storage
    and a device copy of them beside it are two copies of the inputs in one process)."""
    cap = data_cap(input_bytes + output_bytes, factor, 3)
    return cap is not None and 2 * input_bytes + output_bytes > cap


def through_host(input_bytes: int, output_bytes: int, largest_bytes: int, factor: float) -> bool:
    """Whether the reference sends a staged benchmark shape's inputs through host memory (child.serve, through_host):
    where its device copy beside the export of the largest tensor (a second device copy while it sends) would take the
    job past its cap (data_cap, three contexts counted): 6_Matmul_with_large_K_dimension_'s 1 GiB beside four
    contexts. An 8 GiB reduction keeps the device path (2.2x its own bytes; pageable copies cost seconds there)."""
    cap = data_cap(input_bytes + output_bytes, factor, 3)
    return cap is not None and input_bytes + output_bytes + largest_bytes > cap


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if abs(n) >= 1e8 else f"{n / 1e6:.1f} MB"


class Holding(BaseModel):
    """Device memory one idle process of ours holds, and whether it can be given back."""

    role: Literal["spare", "cached reference", "runner cache", "kept draws"]
    pid: int | None = None
    bytes: int
    source: str = Field(description="Where the number comes from: 'nvidia-smi', 'torch allocator', or "
                        "'assumed (a CUDA context)'.")


class VerifyNeeds(BaseModel):
    """Bytes of one verify case's tensors (shapes from meta tensors: verify/memory.py)."""

    input_bytes: int
    output_bytes: int
    hi_input_bytes: int = Field(default=0, description="The floating inputs in float64 (0: none floating).")
    hi_output_bytes: int = Field(default=0, description="The outputs in float64.")
    largest_bytes: int = Field(default=0, description="The largest single tensor (sent between processes).")
    mask_bytes: int = Field(default=0, description="One byte per output element (the unwritten mask).")

    def by_process(self, float64: Literal["whole", "sampled", "none"], pristine: bool = True) -> dict[str, int]:
        """{process: bytes} at the case's peak, with the float64 reference kept whole, sampled or left out, and
        the candidate keeping a pristine copy of its inputs (else a digest of them)."""
        i, o = self.input_bytes, self.output_bytes
        hi = float64 == "whole"
        # the forward on a copy of the inputs, or (pristine=False) on the inputs themselves, checked by digest
        ref_phase = (2 if pristine else 1) * i + o + (self.hi_input_bytes + self.hi_output_bytes if hi else 0)
        # lean: run A judged, then only its digest kept while run B arrives (verify/runner_side._lean_case)
        judge_phase = {"runner": (3 if pristine else 2) * o + (self.hi_output_bytes if hi else 0) + self.mask_bytes,
                       "candidate": (2 if pristine else 1) * i + o}
        transfer = max(self.largest_bytes, self.hi_output_bytes if hi else 0)
        if ref_phase >= sum(judge_phase.values()):
            return {"reference": ref_phase, "transfer": transfer}
        return {**judge_phase, "transfer": transfer}

    def peak(self, float64: Literal["whole", "sampled", "none"], pristine: bool = True) -> int:
        return sum(self.by_process(float64, pristine).values())


class DevicePlan(BaseModel):
    """What a job will hold on the device and how it fits (or why not)."""

    needed_bytes: int
    parts: dict[str, int] = Field(description="Bytes by process at the job's peak.")
    free_bytes: int = Field(description="Free on the device (all processes: cudaMemGetInfo) when planned.")
    total_bytes: int | None = None
    reclaim: list[Holding] = Field(default_factory=list, description="Idle processes of ours to stop (caches to "
                                   "empty) first.")
    reclaim_bytes: int = 0
    float64: Literal["whole", "sampled", "none"] = "whole"
    pristine: bool = Field(default=True, description="The candidate keeps a pristine copy of its inputs (run B "
                           "starts from it; a mutation is found by comparing); False: a digest of them instead.")
    cap_bytes: int | None = Field(default=None, description="The tensors' bytes the job planned within "
                                  "(data_cap); None: only the free memory limits it.")
    park_idle_arms: bool = Field(default=False, description="Each arm's data waits in host memory between its "
                                 "turns: one arm's inputs and working memory on the device at a time.")
    copies: int | None = Field(default=None, description="Benchmark: timed input sets rotated per arm.")
    too_big: str | None = None
    note: str | None = None


def _choose(holdings: list[Holding], short: int) -> list[Holding]:
    """The idle holdings to give back to cover `short` bytes: caches first (no process to start again), then
    cached references of other sources, then spares, biggest first; all of them when they cannot cover it."""
    order = {"runner cache": 0, "kept draws": 1, "cached reference": 2, "spare": 3}
    picked, got = [], 0
    for h in sorted(holdings, key=lambda h: (order[h.role], -h.bytes)):
        if got >= short:
            break
        picked.append(h)
        got += h.bytes
    return picked


def _usable(free: int) -> int:
    return int(HEADROOM * max(0, free))


def too_big_message(needed: int, free: int, total: int | None, reclaimed: int, parts: dict[str, int],
                    overrides: dict | None) -> str:
    by = " + ".join(f"{k} {_gb(v)}" for k, v in parts.items() if v)
    has = f"{_gb(free)} free of {_gb(total)}" if total else f"{_gb(free)} free"
    given = f" after giving back {_gb(reclaimed)} our idle processes held" if reclaimed else ""
    fix = (f"pass overrides={overrides!r} (the problem's size constants, scaled down)" if overrides else
           "pass overrides with smaller size constants (e.g. batch_size)")
    return (f"this job does not fit the device: it needs {_gb(needed)} ({by}), the device has {has}{given} "
            f"({HEADROOM:.0%} usable); {fix}, or name a smaller shape set, or run it on a device with more memory")


def plan_verify(needs: VerifyNeeds, free: int, total: int | None, holdings: list[Holding],
                overrides: dict | None = None, cap: int | None = None) -> DevicePlan:
    """The fullest case that fits: the float64 reference whole where it fits in what is free (and within `cap`,
    data_cap's bytes, where set); else sampled (PyTorch's own error measured in float64 on a slice of the batch:
    verify/refout.py); and where even that exceeds the cap, the leanest that fits what is free. Else the same
    with idle processes of ours given back first; else too_big. Giving back comes after dropping the whole
    float64 copy: it is an accuracy aid, and a stopped spare costs the next job a process start.
    Under a cap no process keeps a second copy of the inputs (pristine=False): the reference's forwards and the
    candidate's runs are on the inputs themselves, checked by digest. A copy finds no mutation a digest misses
    that matters (a case whose inputs changed fails either way), and the forward's own temporaries, which no
    plan sees before it runs (a loss's elementwise terms: 2 x its inputs), come on top of it."""
    pristine = cap is None
    modes: list[tuple[Literal["whole", "sampled"], bool]] = [("whole", pristine), ("sampled", pristine)]

    def plan(mode: tuple[Literal["whole", "sampled"], bool], **kw) -> DevicePlan:
        return DevicePlan(needed_bytes=needs.peak(*mode), parts=needs.by_process(*mode), free_bytes=free,
                          total_bytes=total, float64=mode[0], pristine=mode[1], cap_bytes=cap, **kw)

    reclaimable = sum(h.bytes for h in holdings)
    for room in (_usable(free), _usable(free + reclaimable)):
        fitting = [m for m in modes if needs.peak(*m) <= room]
        if not fitting:
            continue
        under = [m for m in fitting if cap is None or needs.peak(*m) <= cap]
        mode = under[0] if under else fitting[-1]
        if room == _usable(free):
            return plan(mode)
        pick = _choose(holdings, math.ceil((needs.peak(*mode) - _usable(free)) / HEADROOM))  # (HEADROOM usable)
        got = sum(h.bytes for h in pick)
        return plan(mode, reclaim=pick, reclaim_bytes=got,
                    note=f"{len(pick)} idle process(es)/cache(s) of ours give back {_gb(got)} first")
    lean = modes[-1]
    parts = needs.by_process(*lean)
    return DevicePlan(needed_bytes=needs.peak(*lean), parts=parts, free_bytes=free, total_bytes=total,
                      float64="none", pristine=lean[1], cap_bytes=cap, reclaim=list(holdings),
                      reclaim_bytes=reclaimable,
                      too_big=too_big_message(needs.peak(*lean), free, total, reclaimable, parts, overrides))


class BenchPlan(BaseModel):
    """What one benchmark shape holds on the device, by part, and what was cut to make it fit (or why not).

    Counted against the device's free memory read while the runner holds the case (its inputs and the
    reference's outputs), with the runner's device copy of the outputs let go before the arms get theirs:
      per arm      copies x inputs + refill sets x inputs + two calls' outputs + per_rep_check_bytes + the
                   forward's working memory (what its allocator keeps cached after a call), as the reference's
                   native forward measured it in the reference's own process: an estimate for every arm, out
                   of the candidate's reach; it only sizes the plan, so a wrong figure costs that job an `oom`
                   or a leaner plan (whose notes say what it cut)
      candidate    + sample_size x (inputs + outputs): the sampled repetitions it keeps
      runner       + refill sets x inputs (the pool it sends on)
      transfer     one input set, in every plan but the leanest: the margin the fuller plans were measured
                   with on an 80 GB card (allocator caches, what the processes hold between requests). What the
                   runner exports to an arm is that arm's own copy (the child adopts the allocation:
                   courier.py), so the leanest plan, with no aid left to cut, is tried without it last.
    """

    parts: dict[str, int]
    needed_bytes: int
    free_bytes: int
    total_bytes: int | None = None
    control: bool = Field(description="The control arm (a third process timing the baseline again) kept.")
    copies: int = Field(default=1, description="Timed input sets per arm (the arm decides; 1 for big inputs).")
    refill_sets: int = Field(description="Input sets of other seeds each arm copies into its timed storage.")
    sample_size: int = Field(description="Timed repetitions the candidate keeps (inputs + outputs) for checking.")
    runner_keeps_outputs: bool = Field(default=True, description="False: the runner let its device copy of the "
                                       "reference's outputs go before the arms got theirs.")
    per_rep_check_bytes: int = Field(default=0, description="Device bytes per arm a per-repetition output check "
                                     "adds (filled by the check that needs them; counted in every arm).")
    cap_bytes: int | None = Field(default=None, description="The tensors' bytes the job planned within "
                                  "(data_cap); None: only the free memory limits it.")
    park_idle_arms: bool = Field(default=False, description="Each arm's data waits in host memory between its "
                                 "turns: one arm's inputs and working memory on the device at a time.")
    notes: list[str] = Field(default_factory=list)
    too_big: str | None = None


def per_rep_check_bytes(input_bytes: int, output_bytes: int) -> int:
    """Device bytes per arm that a per-repetition check of the timed outputs holds (a ring of kept outputs or
    their digests): counted in every arm's share by plan_benchmark. 0 while no such check keeps device memory;
    the check that keeps some returns its bytes here."""
    return 0


# inputs + outputs above this (BIG_JOB_BYTES: the memory cap's line): the runner lets its device copy of the
# outputs go, and the arms give their working memory back between blocks (benchmark/runner_side.py)
BIG_BENCH_BYTES = BIG_JOB_BYTES


def host_staged(input_bytes: int, output_bytes: int) -> bool:
    """A big benchmark shape whose inputs are more than twice its outputs (reductions, matrix-vector products):
    three device copies of its inputs at once (the runner's, and the two processes it passes them to) would be
    more than twice its own bytes, so the runner's copies wait on the host (pinned) while it passes them on.
    Elsewhere the device-to-device path stays (host staging costs a copy each way)."""
    return input_bytes + output_bytes > BIG_BENCH_BYTES and input_bytes > 2 * output_bytes


def _bench_parts(i: int, o: int, n_arms: int, copies: int, refill: int, sample: int, per_rep: int,
                 runner_keeps: bool, margin: bool = True, work: int = 0, park: bool = False) -> dict[str, int]:
    arm = copies * i + refill * i + 2 * o + per_rep
    on_device = 1 if park else n_arms  # parked arms hold nothing on the device between their turns
    return {"arms": on_device * arm, "arms' working memory": on_device * work, "sampled repetitions": sample * (i + o),
            "refill pool": refill * i,
            # the runner holds its device copy of the inputs while an export makes an arm's; a staged shape's
            # waits on the host (the export copies it to the arm's device): no transfer margin
            "transfer": i if margin and not host_staged(i, o) else 0,
            "runner's outputs freed": 0 if runner_keeps else -o}


_TURNS = ("each arm's inputs wait in host memory while another arm runs its block, copied back before its own, off "
          "the timed repetitions; the copies count against the time budget, so the run may have fewer rounds")
PARK_NOTE = f"the arms take turns on the device (device memory: the leanest plan did not fit what is free): {_TURNS}"
PARK_CAP_NOTE = (f"the arms take turns on the device (the job's memory cap: the leanest plan was over it, and its inputs "
                 f"are small enough to copy out and back at each switch of arms): {_TURNS}")
# inputs up to this size also park to keep within the job's soft cap (not only where the free memory is short): a
# shape of 1-2.5 GB otherwise holds two arms' inputs beside the CUDA contexts, over 3x its own bytes however lean its
# plan, and each switch of arms copies only its inputs out and back (the 15 level-1 problems of 1-2.2 GB: their
# benchmarks 18 % longer on an H100; a 4-13 GB shape's two to five times as long). Bigger inputs park for the cap
# only where even one turn of lean arms is over it (_one_turn_bytes: a loss's 8 GiB of temporaries beside the idle
# arm's 8 GiB of inputs), not where the plan's every-arm figure alone is (an elementwise shape's 6 GiB outputs)
PARK_FOR_CAP_BYTES = 5 << 29


def _one_turn_bytes(i: int, o: int, n_arms: int, work: int, runner_keeps: bool, margin: bool) -> int:
    """What the leanest unparked plan holds on the device while one lean arm runs its block: every arm's inputs, the
    running arm's outputs and working memory alone (a lean arm gives its cache back between its blocks: blocks.py
    give_back), the transfer margin, less the runner's device copy of the outputs where it let it go."""
    return (n_arms * i + 2 * o + max(0, work) + (i if margin and not host_staged(i, o) else 0)
            - (0 if runner_keeps else o))


def last_arm_from_host(i: int, o: int, n_arms: int, work: int, cap: int | None) -> bool:
    """Whether the runner moves its copy of a big shape's inputs to the host before the last arm gets its own (an
    unstaged shape: host_staged): where one turn of lean arms with that copy beside them is over the job's cap
    (_one_turn_bytes), so that the last arm's first calls run beside the other arms' inputs alone (41_Max_Pooling_1D
    on an H100: 3 GiB of the runner's beside a 12.7 GiB first call and the idle arm's 3.3 GiB, 3.3x its own bytes).
    Elsewhere the device-to-device path stays (a copy each way through the host: seconds for 6 GiB of inputs)."""
    return cap is not None and _one_turn_bytes(i, o, n_arms, max(0, work), runner_keeps=False, margin=True) > cap


def plan_benchmark(input_bytes: int, output_bytes: int, free: int, total: int | None, control: bool,
                   refill_sets: int, sample_size: int, per_rep_check_bytes: int = 0,
                   overrides: dict | None = None, reclaimed: int = 0, workspace_bytes: int = 0,
                   cap: int | None = None, can_park: bool = False, park_big: bool = False) -> BenchPlan:
    """The fullest benchmark that fits in what is free (and within `cap`, data_cap's bytes, where set): as asked; else,
    one cut at a time, no refill pool (the post-timing refill check still catches caching by address), no
    control arm (the noise floor then is the least band of two processes: stats.least_floor), no sampled
    repetitions (the refill and fresh checks still judge the outputs); where even the leanest exceeds the cap,
    the leanest that fits what is free; where even that does not fit, the leanest with its arms parked
    (`can_park`: a big shape's lean arms, no graph replay: one arm's data on the device at a time, each switch
    of arms copying it out and back, which made a big shape's benchmark two to five times as long on an H100, so
    it is the last resort, and a way under the soft cap only for inputs of at most PARK_FOR_CAP_BYTES, or, with
    `park_big` (the host holds every arm's inputs twice over), bigger ones whose one turn of lean arms is over the cap:
    _one_turn_bytes); else too_big with the bytes of the leanest plan, the device's and the overrides."""
    i, o = max(0, input_bytes), max(0, output_bytes)
    keeps = i + o <= BIG_BENCH_BYTES
    # (control arm, refill sets, sampled repetitions, transfer margin, the note saying what this step cut)
    steps: list[tuple[bool, int, int, bool, str | None]] = [(control, refill_sets, sample_size, True, None)]
    if refill_sets:
        steps.append((control, 0, sample_size, True, "no refill pool (device memory): the timed inputs keep their "
                      "content between blocks; the post-timing refill check still catches caching by address"))
    if control:
        steps.append((False, 0, sample_size, True, "control arm left out (device memory): the noise floor is the "
                      "least band two processes of identical code differ by (1.5 % on a GPU), not measured by a "
                      "byte-identical third arm"))
    if sample_size:
        steps.append((False, 0, 0, True, "no sampled timed repetitions kept (device memory): the candidate's "
                      "outputs are judged by the post-timing refill and fresh-input checks"))
    if not host_staged(i, o):
        steps.append((False, 0, 0, False, "no transfer margin (device memory): the leanest plan, the arms adopting "
                      "the runner's copies of their inputs"))
    if can_park:  # the last resort (a control arm would make every block a switch of arms)
        steps.append((False, 0, 0, steps[-1][3], PARK_NOTE))
    lean = steps[-2] if can_park else steps[-1]  # the leanest step short of parking
    park_for_cap = can_park and cap is not None and (
        i <= PARK_FOR_CAP_BYTES or park_big and _one_turn_bytes(i, o, 2, work=workspace_bytes, runner_keeps=keeps,
                                                                margin=lean[3]) > cap)
    notes: list[str] = []
    if not keeps:
        notes.append(f"the runner let its device copy of the reference's outputs ({_gb(o)}) go before timing"
                     + (", and kept its copies of the inputs on the host while the arms got theirs"
                        if host_staged(i, o) else "")
                     + "; one timed input set per arm (no rotation: address effects matter little for kernels of "
                     "this size)")
    parts: dict[str, int] = {}
    over_cap: BenchPlan | None = None
    park = False
    for ctrl, refill, sample, margin, why in steps:
        park = why == PARK_NOTE
        if park and over_cap is not None:  # the free memory holds a plan without parking: the cap is soft ...
            if not park_for_cap:  # ... unless the inputs are small enough that parking costs little time
                break
            why = PARK_CAP_NOTE
        if why:
            notes.append(why)
        parts = _bench_parts(i, o, 3 if ctrl else 2, 1, refill, sample, per_rep_check_bytes, keeps, margin,
                             max(0, workspace_bytes), park)
        need = sum(parts.values())
        if need <= _usable(free):
            plan = BenchPlan(parts=parts, needed_bytes=need, free_bytes=free, total_bytes=total, control=ctrl,
                             refill_sets=refill, sample_size=sample, runner_keeps_outputs=keeps,
                             per_rep_check_bytes=per_rep_check_bytes, notes=list(notes), cap_bytes=cap,
                             park_idle_arms=park)
            if cap is None or need <= cap or park:
                if cap is not None and need <= cap and len(notes) > (0 if keeps else 1):
                    plan.notes.append(f"planned within the job's memory cap: {_gb(cap)} of tensors (memory_factor "
                                      "x its own bytes, the processes' contexts counted)")
                return plan
            over_cap = plan
    if over_cap is not None:  # the cap is soft: the leanest plan that fits what is free
        over_cap.notes.append(f"over the job's memory cap ({_gb(over_cap.needed_bytes)} planned, cap {_gb(cap or 0)}):"
                              " the leanest plan, the free memory holds it")
        return over_cap
    need = sum(parts.values())
    msg = too_big_message(need, free, total, reclaimed, parts, overrides)
    return BenchPlan(parts=parts, needed_bytes=need, free_bytes=free, total_bytes=total, control=False,
                     refill_sets=0, sample_size=0, runner_keeps_outputs=keeps,
                     per_rep_check_bytes=per_rep_check_bytes, notes=notes, park_idle_arms=park,
                     too_big=msg.replace("this job does not fit the device", "the benchmark's arms do not fit", 1))


def fits(need: int, free: int) -> bool:
    return need <= _usable(free)
