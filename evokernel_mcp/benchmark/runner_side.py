"""Op "benchmark" in the runner (harness code only; never imports agent code).

Per shape set: the reference child makes the inputs (fresh, never zeros); the candidate, in a fresh
child of its own, times itself with our loop on copies of them; the baseline is timed in a second fresh
child (the reference loaded afresh for baseline "pytorch", else the baseline source) and the control arm,
on request, in a third (the same baseline again): every arm runs in a process built the same way, so
they differ only in their code, and nothing runs in any arm's process before its timing but the load and
the arm's own set-up; then the candidate's outputs on its last timed input storage refilled with new values,
on fresh inputs and on verify's signed probe inputs are compared HERE with the reference's outputs for the
same inputs, by verify's judge (verify/case.py), and one call on the fresh inputs is checked for a plain
tensor output whose work is done at return (settle.settled_check). If the activity clock worked for one series
and not the other, both are re-timed with events, so a speedup never compares two clocks. Returns raw times; the
statistics, speedup, roofline, flags and verdict are computed in the server (api.py).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from evokernel_mcp import settings
from evokernel_mcp.benchmark.arms import POOL_FULL_BYTES, Arms, interleave
from evokernel_mcp.benchmark.messages import BenchmarkRequest
from evokernel_mcp.benchmark.room import control_out_of_cap, hand_over, meta, room_for_arms
from evokernel_mcp.benchmark.shape_case import every_shape_capped, make_case
from evokernel_mcp.benchmark.work import runner_counts
from evokernel_mcp.runtime import cpus
from evokernel_mcp.runtime.context import RunnerContext
from evokernel_mcp.runtime.devmem import on_host, release_cached, release_host, trim_between_cases
from evokernel_mcp.runtime.devplan import (
    BIG_BENCH_BYTES,
    host_staged,
    inputs_from_host,
    last_arm_from_host,
    outputs_on_host,
    reported_bytes,
)
from evokernel_mcp.runtime.spares import ChildFailed, note, wall_deadline
from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.memory import LEAN_CHUNK
from evokernel_mcp.verify.runner_side import OUTPUT_SLACK, _nbytes, load_candidate, tensor_device

CHECK_SEED_OFFSET = 7919
REFILL_SEED_OFFSET = 104729
HI_CHECK_BYTES = 1 << 30  # post-timing checks against a float64 reference up to this output size


def expected(arms, ref, x: Any, seed: int, hi: bool, staged: bool = False, to_host: bool = False) -> dict[str, Any]:
    """The reference's outputs on inputs x (op "expected"), with x itself as the inputs (an arg-reduction's judge
    reads the values its indices select there: the runner's own copy, not one sent back, which took a second device
    copy in the reference while it sent 8 GiB back). Without the float64 copy, on a GPU, the reference runs on its
    received copy of x itself, not on a second one (device memory: a check's inputs can be gigabytes); a reference
    that modifies its inputs is then asked again, with the copy. to_host: its outputs arrive in host memory
    (devplan.outputs_on_host), never on the runner's device beside the candidate's."""
    from evokernel_mcp.verify.sides import MODIFIED_INPUTS

    req = {"op": "expected", "inputs": x, "seed": seed, "hi": hi}
    dev = "cpu" if to_host else None
    reply = None
    if not hi and arms.dev != "cpu":
        try:
            reply = arms.ask(ref, {**req, "own_inputs": True}, max_bytes=1 << 42, handed=staged, device=dev)
        except ChildFailed as e:
            if MODIFIED_INPUTS not in str(e.message):
                raise
    if reply is None:
        reply = arms.ask(ref, req, max_bytes=1 << 42, handed=staged, device=dev)
    return {**reply, "inputs": x}


def checks_hi(input_bytes: int, output_bytes: int) -> bool:
    """Whether the post-timing checks (and the probe bar) ask the reference for float64 outputs: they guard
    against cheating, not precision, so only while the outputs are small (HI_CHECK_BYTES), and not for a shape
    planned within the job's memory cap (more than 1 GB of its own: runtime/devplan.data_cap), where the
    reference's float64 copy of the inputs alone (twice their bytes in float32) would take what the cap leaves."""
    from evokernel_mcp.runtime.devplan import data_cap

    if output_bytes > HI_CHECK_BYTES:
        return False
    return data_cap(input_bytes + output_bytes, settings.get().memory_factor, 1) is None


def _check(task: Task, got: Any, expected: dict[str, Any], dev: str = "cpu", chunk: int | None = None,
           ref_in_place: bool = False) -> dict[str, Any]:
    """The candidate's output vs the reference's for the same inputs, with verify's bar (verify/case.py:
    RMS-floored, PyTorch's own error as the floor, outputs of every kind, arg-reductions by the values
    selected), compared on the runner's device. `expected`: a reply of the reference's "case" or
    "expected" op (native, hi or None when the float64 copy did not fit, arg_reductions, inputs); `dev`: where
    the runner compares (verify/runner_side.py tensor_device); `chunk`: the comparison's block (elements), else
    the plan's or the judge's default; ref_in_place: the reference's outputs are judged where they are (host
    memory), block by block."""
    from evokernel_mcp.verify.case import judge_outputs

    plan = expected.get("plan") or {}
    m = judge_outputs(task, expected["native"], expected.get("hi"), got, None, inputs=expected.get("inputs"),
                      arg=expected.get("arg_reductions"), chunk=chunk or plan.get("chunk_elems"), device=dev,
                      native_spread=expected.get("native_spread"), sampled_torch_err=expected.get("sampled_torch_err"),
                      ref_in_place=ref_in_place)
    out = {k: m.get(k) for k in ("passed", "max_abs_err", "rel_l2_err", "mismatches", "nan_count", "note", "bar")}
    if m.get("passed") is False and m.get("max_rel_err") is not None and m.get("tol"):
        vs = m.get("error_vs_pytorch")
        out["note"] = "; ".join(x for x in (out["note"], (
            f"accuracy below the problem's dtype: max_rel_err {m['max_rel_err']:.3g} against verify's bar "
            f"(tol {m['tol']:.1e}" + (f", {vs:.3g}x PyTorch's own error)" if vs is not None else ")"))) if x)
    return out


def _probe_check(arms: Arms, ref, shape: str, seed: int, case: dict, hi: bool, limit: int,
                 staged: bool = False, host: bool = False, chunk: int | None = None) -> dict[str, Any]:
    """verify's signed probe case (verify/probe.py: floating inputs randn x 4) run by the candidate after timing
    and judged by verify's bar: a computation in a lower precision than the problem's dtype (TF32, fp16 or
    bf16 for an fp32 problem) can pass on the task's own inputs (all >= 0: no cancellation) and fails here,
    as it fails verify_vs_pytorch's probe case. A reference that cannot run on signed inputs leaves it unjudged."""
    x = arms.inputs(ref, {"shape": shape, "seed": seed + CHECK_SEED_OFFSET, "probe": True}, staged)
    try:
        exp = expected(arms, ref, x, seed, hi, staged, host)
    except ChildFailed as e:  # the reference's forward raised (its child lives on); anything else stands
        if e.kind != "exception":
            raise
        return {"passed": None, "note": f"not judged: the reference failed on signed probe inputs ({e})"[:300]}
    # the candidate's reply comes beside the runner's copy of the expected outputs: on the host while it arrives (a
    # staged shape, or one whose reply beside it would pass the cap: _reply_beside)
    beside = not staged and not host and _reply_beside(arms.dev, _nbytes(x), _nbytes(exp["native"]), case)
    if (staged or beside) and not host:  # (a big shape: no cached block kept)
        exp["native"] = on_host(exp["native"])
        release_cached()
    got = arms.ask(arms.cand, {"op": "bench_checks", "fresh": x, "init_inputs": case["init_inputs"],
                               "state": case["state"], "seed": seed}, max_bytes=limit, handed=staged)
    return _check(arms.task, got.pop("fresh"), exp, arms.dev, chunk=chunk, ref_in_place=host)


def _reply_beside(dev: str, i_b: int, o_b: int, case: dict) -> bool:
    """Whether one side's reply to a check (its outputs, and their export: a second device copy in its process until
    the runner has them) beside the runner's device copy of the other side's outputs would take the job past its cap
    (devplan.outputs_on_host with reply_beside): 7_Matmul_with_small_K_dimension_'s 4 GiB of outputs, three device
    copies at once, read 3.4x its own bytes on an H200. The runner's copy then waits on the host while the reply
    arrives."""
    return dev != "cpu" and outputs_on_host(i_b, o_b, settings.get().memory_factor, case.get("workspace_bytes"),
                                            reply_beside=True)


def _sampled(arms: Arms, ref, samples: list, seed: int, hi: bool, staged: bool = False,
             host: bool = False, chunk: int | None = None) -> dict[str, Any] | None:
    """Outputs kept from random timed repetitions, checked against the reference on the same inputs (staged: the
    sample's inputs and outputs on the host while the reference runs, as they are where the reference's reply beside
    them would pass the cap: _reply_beside; host: the reference's outputs arrive there)."""
    if not samples:
        return None
    worst: dict[str, Any] = {"passed": True, "checked": 0}
    while samples:
        s = samples.pop(0)
        if staged or _reply_beside(arms.dev, _nbytes(s["inputs"]), _nbytes(s["outputs"]), {}):
            s = on_host(s)  # (a big shape: its device copies' cached blocks go too)
            release_cached()
        exp = expected(arms, ref, s["inputs"], seed, hi, staged, host)
        chk = _check(arms.task, s["outputs"] if len(s["outputs"]) != 1 else s["outputs"][0], exp, arms.dev,
                     chunk=chunk, ref_in_place=host)
        worst["checked"] += 1
        if not chk.get("passed"):
            return {**chk, "checked": worst["checked"], "rep": s["rep"]}
    return worst


def _bench_shape(arms: Arms, ref, shape: str, seed: int, opt: dict, progress, gpu: bool, ctx=None,
                 made: dict | None = None, plan: dict | None = None) -> dict:
    """One shape: its case (shape_case.make_case; `made`: already made, before the arms' processes started; `plan`:
    its memory plan, already asked), the arms' plan within the device's memory, the refill pool and probe bar, the
    interleaved timing, then the checks."""
    made = made or make_case(arms.ask, ref, shape, seed, gpu, ctx,
                             lambda plan: control_out_of_cap(ctx, arms, plan) or arms.control_skipped, plan)
    case, room, arms.via_host = made["case"], made["room"], made["via_host"]
    work = runner_counts(case)
    i_b, o_b = _nbytes(case["inputs"]), _nbytes(case["native"])
    n_pool, sample = (2 if i_b <= POOL_FULL_BYTES or not gpu else 1), (2 if i_b + o_b <= POOL_FULL_BYTES else 1)
    big = gpu and i_b + o_b > BIG_BENCH_BYTES
    host, staged = _on_host(big, i_b, o_b, case)
    beside = big and not host and _reply_beside(arms.dev, i_b, o_b, case)  # (the checks below: _reply_beside)
    chunk = LEAN_CHUNK if big else None  # every check's judge blocks (float64: 8 arrays of 16 M elements are 1 GiB)
    trim = release_cached if big else trim_between_cases  # a big shape's runner keeps no cache between its steps
    hand = big and ctx is not None and arms.base_is_reference
    park = False
    if gpu and ctx is not None:  # graph replays keep their buffers' addresses: those arms cannot park
        p = room_for_arms(ctx, arms, ref, case, room, n_pool, sample, can_park=big and not opt.get("use_graph"),
                          hand_over=hand)
        n_pool, sample, park = p.refill_sets, p.sample_size, p.park_idle_arms
    if staged:  # the runner's copy of the case's inputs waits on the host from here, not from the arms' set-up: made
        case["inputs"] = on_host(case["inputs"])  # beside it, the refill pool's (the reference's copy and its export)
        release_cached()  # took 4_Matrix_vector_multiplication_ to 3 copies of its 8 GiB on an H100 (3.2x its bytes)
    pool = [arms.inputs(ref, {"shape": shape, "seed": seed + 1 + i}, staged) for i in range(n_pool)]
    out: dict[str, Any] = {"shape": shape, "input_bytes": _nbytes(case["inputs"]), "refill_pool_sets": n_pool,
                           "work": work}
    if room.get("notes"):
        out["memory_notes"] = room["notes"]
    limit = 2 * OUTPUT_SLACK * _nbytes(case["native"]) + (16 << 20)
    bar = _probe_bar(arms, ref, case, pool, seed, gpu, handed=staged) if pool else None
    if gpu:
        trim()  # the bar's float64 copies of the reference's outputs: freed before the arms start
    # a staged shape's refill check inputs are made now, before any arm holds its inputs, and wait on the host: made
    # after timing, the reference's export of them (a second device copy while it sends) came beside the
    # candidate's timed storage (49_Max_reduction_over_a_dimension, 52_Argmin on an H100: 3.2x their own bytes)
    early = {"refill": arms.inputs(ref, {"shape": shape, "seed": seed + REFILL_SEED_OFFSET}, True)} if staged else {}
    if hand:
        ref = hand_over(ctx, arms, ref, out)
    t0 = time.monotonic()
    bplan = room.get("plan")
    from_host = big and bplan is not None and last_arm_from_host(
        i_b, o_b, len(arms.children()), reported_bytes(case.get("workspace_bytes")), bplan.cap_bytes)
    timed = interleave(arms, case, pool, seed, opt, progress, gpu, bar, sample=sample, release_inputs=big,
                        staged=staged, park=park, last_from_host=from_host)
    if room.get("plan") is not None:
        out["memory_plan"] = room["plan"].model_dump(exclude={"notes", "too_big"})
    out.update({k: v for k, v in timed.items() if k != "samples"})
    note("benchmark %s: arms set up and timed in %.2f s", shape, time.monotonic() - t0)
    case["inputs"], pool = None, None  # every arm has its copies: device memory for the checks below
    trim()
    hi = checks_hi(out["input_bytes"], _nbytes(case["native"]))
    out["check_sampled"] = _sampled(arms, ref, timed.pop("samples", None) or [], seed, hi, staged, host, chunk)
    trim()
    # inputs of other seeds, but the expected outputs from the model of the TIMED seed: a model with weights
    # (nn.Conv3d, nn.Linear) is built per seed, and the candidate's checks run the timed seed's model
    # One check at a time (inputs made, run by the candidate, judged, freed): device memory. The refill
    # check runs first, on the storage of the candidate's last timed input set; then fresh inputs.
    # a staged shape's refill values go in host memory (memfd), not handed over as a device copy, where that copy
    # beside the candidate's timed storage would take the job past its cap (devplan.inputs_from_host): the candidate
    # copies them into that storage in place (benchmark/sides.cand_checks), its only device copy of them then
    # (6_Matmul_with_large_K on an H100: 1 GiB handed over beside 1 GiB of timed storage, 3.0x its own bytes). An 8 GiB
    # reduction keeps the device path: the host's copies cost it 7-9 s, for a job at 2.2x either way.
    refill_in_host = staged and inputs_from_host(i_b, o_b, settings.get().memory_factor)
    for key, name, off in (("check_timed", "refill", REFILL_SEED_OFFSET), ("check_fresh", "fresh", CHECK_SEED_OFFSET)):
        # staged: the inputs wait on the host, each process gets its own device copy in turn
        x = early.pop(name, None) or arms.inputs(ref, {"shape": shape, "seed": seed + off}, staged)
        if name == "fresh":  # is the output a plain tensor, its work done at return? Asked only after timing: a
            # call before timing gives the candidate's process a history the baseline's have not (on an H100, with
            # this check before timing, a strided sum of 64 MB timed 2-4 % slower in the candidate's arm in every
            # call, and as fast as the baseline without it). Asked before the check's outputs exist: the runner
            # holds only the inputs then (after the check, a big output's run twice beside them: 9 of 4 GiB)
            out["settled"] = arms.ask(arms.cand, {"op": "settled", "inputs": x, "seed": seed,
                                                  "init_inputs": case["init_inputs"], "state": case["state"]},
                                      handed=staged)
        got = arms.ask(arms.cand, {"op": "bench_checks", name: x, "init_inputs": case["init_inputs"],
                                   "state": case["state"], "seed": seed}, max_bytes=limit,
                       handed=staged and not (name == "refill" and refill_in_host))
        out["output_dtype"] = out.get("output_dtype") or got.get("output_dtype")
        if name == "refill":  # its timed storage served the refill check: gone before the reference's forward
            arms.ask(arms.cand, {"op": "arm_close", "name": "candidate"})  # (94_MSELoss: 8 of 27 GiB at the peak)
        if staged or beside:  # the reference's reply comes next, beside this copy
            got = on_host(got)
            trim()
        exp = expected(arms, ref, x, seed, hi, staged, host)
        if not exp.get("arg_reductions"):  # the judge needs the inputs only for an arg-reduction's values
            exp["inputs"] = x = None
            trim()
        out[key] = _check(arms.task, got.pop(name), exp, arms.dev, chunk=chunk, ref_in_place=host)
        exp = got = x = None
        trim()
    out["check_probe"] = _probe_check(arms, ref, shape, seed, case, hi, limit, staged, host, chunk)
    trim()
    return out


def _on_host(big: bool, i_b: int, o_b: int, case: dict) -> tuple[bool, bool]:
    """(host, staged) for a shape of i_b bytes of inputs and o_b of outputs. host: the reference's outputs of every
    check arrive in host memory (devplan.outputs_on_host). staged: the runner's copies of the inputs wait there while
    it passes them on, and a check's outputs while the reference runs its forward: a big shape whose inputs are most
    of its bytes (devplan.host_staged), or one whose checks' outputs are on the host (a transposed convolution's arm
    took 4.1 GB at its first call beside the runner's inputs). A check's inputs count beside the reference's forward
    as its working memory does: the runner holds them there unless staged (41_Max_Pooling_1D on an H100: its 3 GiB
    of inputs and the candidate's 3 GiB of outputs beside a 12.7 GB forward, 3.2x its own bytes)."""
    work = reported_bytes(case.get("workspace_bytes")) + i_b
    host = big and outputs_on_host(i_b, o_b, settings.get().memory_factor, work)
    return host, big and (host_staged(i_b, o_b) or host)


def _probe_bar(arms: Arms, ref, case: dict, pool: list, seed: int, gpu: bool = False, handed: bool = False):
    """The expected probe values of every input content the arms time with (the case's inputs, then the
    pool's), from the reference's outputs on them (float64 where they fit: verify's bar), one content's
    outputs at a time. GPU: chunk sums only (no position table). handed: the inputs wait in host memory, and the
    reference's copy made from them is its own (courier.handing_over)."""
    from evokernel_mcp.benchmark.probes import ProbeBar, position_table

    hi = checks_hi(_nbytes(case["inputs"]), _nbytes(case["native"]))
    outs = (expected(arms, ref, x, seed, hi, handed) for x in [case["inputs"], *pool])
    return ProbeBar(arms.task, outs, None if gpu else position_table(seed))


def runner_benchmark(ctx: RunnerContext, req: BenchmarkRequest, progress) -> dict[str, Any]:
    """Op "benchmark" (benchmark/messages.py): raw times per shape and the checks (BenchmarkReply)."""
    # no interpreter starts in the background while arms are timed: on a host of few cores, for the whole job
    # (after the starts in flight); on a GPU host with cores to spare, only around the shapes' timing, so the
    # children this job took are replaced while it loads its sources (spares.waits_in_quiet)
    whole = ctx.spares.waits_in_quiet()
    with ctx.spares.quiet() if whole else contextlib.nullcontext():
        return _benchmark(ctx, req, progress, timing_quiet=not whole)


def _benchmark(ctx: RunnerContext, payload: BenchmarkRequest, progress, timing_quiet: bool = False) -> dict[str, Any]:
    from evokernel_mcp.benchmark.clocks import ShapeClocks, read_clocks
    from evokernel_mcp.benchmark.worker_info import ceilings_for, device_info

    task = payload.task
    deadline = time.monotonic() + payload.budget_s
    info = device_info()
    t0 = time.monotonic()
    result: dict[str, Any] = {"device_info": info, "shapes": [], "clocks_before": None, "clocks_after": None,
                              "ceilings": ceilings_for(payload.ceilings, progress)}
    note("benchmark: device info and ceilings in %.2f s", time.monotonic() - t0)
    ctx.spares.wait_retired_if_tight()
    try:
        ref = ctx.spares.reference(task, timeout_s=wall_deadline(deadline))
    except ChildFailed as e:
        result["error"] = e.info()
        return result
    cand, base, ctrl = None, None, None
    result["isolation"] = ctx.spares.isolation()
    gpu = info.get("backend") in ("cuda", "rocm")
    claim = contextlib.ExitStack()  # host timing: one CPU for every arm, this job's until its arms are gone
    shapes, seed, opt = list(payload.shapes), payload.seed, dict(payload.options)
    capped = False
    try:
        cpu = None if gpu else claim.enter_context(cpus.claim_arm_cpu())
        made, plans = None, every_shape_capped(ref, shapes, seed, deadline) if gpu else None
        capped = plans is not None
        if capped:  # the first shape's case before any arm's process is up (shape_case.py); no control arm started
            note("benchmark: waited %.2f s for retired children", ctx.spares.wait_retired())
            try:
                made = make_case(lambda child, req, max_bytes, device=None: child.request(
                    req, timeout_s=wall_deadline(deadline), max_bytes=max_bytes, device=device),
                    ref, shapes[0], seed, gpu, ctx, lambda plan: payload.control, plans[0])
            except ChildFailed as e:
                result["error"] = {**e.info(), "shape": shapes[0]}
                return result
        cand = ctx.spares.take("bench")
        load_candidate(ctx, cand, payload.candidate, task, deadline)
        base = _baseline_child(ctx, payload.baseline, task, deadline)
        if payload.control and not capped:
            ctrl = _baseline_child(ctx, payload.baseline, task, deadline)
        note("benchmark: reference, candidate and baseline loaded at %.2f s", time.monotonic() - t0)
        arms = Arms(cand, base, task, deadline, ctrl, cpu=cpu, dev=tensor_device(ctx) or "cpu",
                    base_is_reference=payload.baseline == "pytorch")
        arms.control_skipped = payload.control and capped
        clocks = ShapeClocks(read_clocks, info)
        for i, shape in enumerate(shapes):
            ref = _reference_again(ctx, arms, ref, task, deadline)
            before = clocks.before()
            result["clocks_before"] = result["clocks_before"] or before

            def prog(done, total, msg, i=i):
                progress(i + min(done / max(total, 1e-9), 0.999), len(shapes), f"{shape}: {msg}")
            # retired children gone first: the last job's (the case's memory plan reads what is free) and a
            # confirm's (the whole-job quiet of a host of few cores waits for nothing once it has begun)
            note("benchmark %s: waited %.2f s for retired children", shape, ctx.spares.wait_retired())
            try:
                with ctx.spares.quiet(wait=False) if timing_quiet else contextlib.nullcontext():
                    raw = _bench_shape(arms, ref, shape, seed, opt, prog, gpu, ctx, made if i == 0 else None,
                                       plans[i] if capped else None)
            except ChildFailed as e:
                result["error"] = {**e.info(), "shape": shape}
                break
            raw["clocks_before"], raw["clocks_after"] = before, clocks.after()
            note("benchmark %s: done at %.2f s", shape, time.monotonic() - t0)
            result["shapes"].append(raw)
            if payload.confirm:
                ref = _reference_again(ctx, arms, ref, task, deadline)
                quiet = (lambda: ctx.spares.quiet(wait=False)) if timing_quiet else contextlib.nullcontext
                result["shapes"][-1]["confirm"] = _confirm(ctx, payload, task, ref, shape, seed, opt, deadline, gpu,
                                                           quiet, arms.cpu)
                clocks.stale()
        result["clocks_after"] = clocks.final()
    except ChildFailed as e:
        result["error"] = e.info()
    finally:
        result["stdout"], result["stderr"] = cand.output() if cand is not None else ("", "")
        big = capped or bool(getattr(ref, "capped", False))  # (the next job waits for such arms to be gone)
        for c in (cand, base, ctrl):
            if c is not None:
                ctx.spares.retire(c, big=big)
        claim.close()
        release_host()  # the pinned host memory of staged shapes (on_host), whatever ended the job
        note("benchmark: arms retired at %.2f s", time.monotonic() - t0)
    progress(len(payload.shapes), len(payload.shapes), "benchmark done")
    return result


def _reference_again(ctx: RunnerContext, arms: Arms, ref, task: Task, deadline: float):
    """The cached reference, loaded again where the last shape's checks were the baseline arm's (room.hand_over)."""
    if not arms.reference_gone:
        return ref
    arms.reference_gone = False
    return ctx.spares.reference(task, timeout_s=wall_deadline(deadline))


def _confirm(ctx: RunnerContext, payload: BenchmarkRequest, task: Task, ref, shape: str, seed: int, opt: dict, deadline: float,
             gpu: bool, quiet=contextlib.nullcontext, cpu: int | None = None) -> dict[str, Any]:
    """Re-time the candidate in a SECOND fresh process with fresh inputs (another seed), interleaved with
    the baseline again: a time a process reports about itself is only trusted when another agrees."""
    child, base, big = ctx.spares.take("bench"), None, False
    try:
        load_candidate(ctx, child, payload.candidate, task, deadline)
        base = _baseline_child(ctx, payload.baseline, task, deadline)
        arms = Arms(child, base, task, deadline, cpu=cpu, dev=tensor_device(ctx) or "cpu")
        s2 = seed + 31337
        case = arms.ask(ref, {"op": "case", "shape": shape, "seed": s2, "hi": False,
                              "memory_factor": settings.get().memory_factor}, max_bytes=1 << 42)
        big = gpu and _nbytes(case["inputs"]) + _nbytes(case["native"]) > BIG_BENCH_BYTES
        if big:  # nothing here reads the outputs' values: only the arms' copies of the inputs take room
            case["native"] = meta(case["native"])
            release_cached()
        pool, bar = [], None
        if not big:  # the same contents and per-repetition checks as the first run (GPU: refilled between blocks)
            pool = [arms.ask(ref, {"op": "case", "shape": shape, "seed": s2 + 1 + i, "inputs_only": True},
                             max_bytes=1 << 42)["inputs"] for i in range(2)]
            bar = _probe_bar(arms, ref, case, pool, s2, gpu)
        with quiet():  # the children are taken and loaded first: only the timing holds spares back
            timed = interleave(arms, case, pool, s2, opt, lambda *a: None, gpu, bar, sample=0, release_inputs=big,
                                staged=_on_host(big, _nbytes(case["inputs"]), _nbytes(case["native"]), case)[1])
        return {"rounds": timed["rounds"], "timer": timed["candidate"].get("timer"),
                "runner_bound": timed.get("runner_bound"), "check_probes": timed.get("check_probes")}
    except ChildFailed as e:
        return {"error": e.info()}
    finally:
        for c in (child, base):
            if c is not None:
                ctx.spares.retire(c, big=big)


def _baseline_child(ctx: RunnerContext, base_src: str, task: Task, deadline: float):
    """A fresh child hosting the baseline: the task's reference loaded afresh (base_src "pytorch"), else the
    baseline source loaded as a candidate is."""
    if base_src == "pytorch":
        return ctx.spares.fresh_reference(task, timeout_s=wall_deadline(deadline), purpose="bench")
    child = ctx.spares.take("bench")
    try:
        load_candidate(ctx, child, base_src, task, deadline)
    except ChildFailed as e:
        child.discard()
        raise e.again(e.kind, f"baseline: {e.message}") from e
    return child
