"""Op "benchmark" in the runner (harness code only; never imports agent code).

Per shape set: the reference child makes the inputs (fresh, never zeros); the candidate, in a fresh
child of its own, times itself with our loop on copies of them; the baseline is timed in the reference's
child (baseline "pytorch") or in a second fresh child (a baseline source); then the candidate's outputs
on its last timed input storage refilled with new values and on fresh inputs are compared HERE with the
reference's outputs for the same inputs. If the activity clock worked for one series and not the
other, both are re-timed with events, so a speedup never compares two clocks. Returns raw times; the
statistics, speedup, roofline, flags and verdict are computed in the server (api.py).
"""

from __future__ import annotations

import time
from typing import Any

from evokernel_mcp.runtime.spares import ChildFailed, wall_deadline
from evokernel_mcp.tasks import Task
from evokernel_mcp.verify.runner_side import OUTPUT_SLACK, _nbytes, load_candidate

CHECK_SEED_OFFSET = 7919
REFILL_SEED_OFFSET = 104729


def _check(task: Task, got: Any, expected: dict[str, Any]) -> dict[str, Any]:
    from evokernel_mcp.verify.case import _plain_outputs, tolerance_for
    from evokernel_mcp.verify.compare import as_tensors, compare, merge

    outs, note = _plain_outputs(got)
    ref64, native = as_tensors(expected["hi"]), as_tensors(expected["native"])
    if outs is None:
        return {"passed": False, "note": note}
    if len(outs) != len(ref64):
        return {"passed": False, "note": f"candidate returned {len(outs)} tensors, the reference {len(ref64)}"}
    atol, rtol = tolerance_for(task, str(native[0].dtype).removeprefix("torch."), None)
    m = merge([compare(g, r, g, atol, rtol) for g, r in zip(outs, ref64)])
    return {k: m.get(k) for k in ("passed", "max_abs_err", "rel_l2_err", "mismatches", "nan_count", "note")}


class _Arms:
    """The candidate and baseline children of one job and how to time them."""

    def __init__(self, cand, base, task: Task, deadline: float):
        self.cand, self.base, self.task, self.deadline = cand, base, task, deadline

    def time(self, child, case: dict, seed: int, opt: dict) -> dict[str, Any]:
        return child.request({"op": "time", "inputs": case["inputs"], "init_inputs": case["init_inputs"],
                              "state": case["state"], "seed": seed, "options": opt},
                             timeout_s=wall_deadline(self.deadline), max_bytes=1 << 20)


def _bench_shape(arms: _Arms, ref, shape: str, seed: int, opt: dict, progress, step: int, total: int) -> dict:
    deadline, task = arms.deadline, arms.task
    case = ref.request({"op": "case", "shape": shape, "seed": seed, "hi": False},
                       timeout_s=wall_deadline(deadline), max_bytes=1 << 42)
    out: dict[str, Any] = {"shape": shape, "input_bytes": _nbytes(case["inputs"])}
    progress(step, total, f"{shape} candidate")
    out["candidate"] = arms.time(arms.cand, case, seed, opt)
    refill = ref.request({"op": "case", "shape": shape, "seed": seed + REFILL_SEED_OFFSET, "hi": True},
                         timeout_s=wall_deadline(deadline), max_bytes=1 << 42)
    fresh = ref.request({"op": "case", "shape": shape, "seed": seed + CHECK_SEED_OFFSET, "hi": True},
                        timeout_s=wall_deadline(deadline), max_bytes=1 << 42)
    limit = 2 * OUTPUT_SLACK * _nbytes(case["native"]) + (16 << 20)
    got = arms.cand.request({"op": "bench_checks", "refill": refill["inputs"], "fresh": fresh["inputs"],
                             "init_inputs": case["init_inputs"], "state": case["state"], "seed": seed},
                            timeout_s=wall_deadline(deadline), max_bytes=limit)
    out["check_timed"] = _check(task, got["refill"], refill)
    out["check_fresh"] = _check(task, got["fresh"], fresh)
    out["output_dtype"] = got.get("output_dtype")
    progress(step + 1, total, f"{shape} baseline")
    out["baseline"] = arms.time(arms.base, case, seed, opt)
    used = {out["candidate"].get("timer"), out["baseline"].get("timer")}
    if len(used) > 1:  # one series fell back to events: time both with events, so the speedup compares like
        ev = {**opt, "timer": "events"}
        note = {"timers_unified": f"candidate {out['candidate'].get('timer')}, baseline "
                f"{out['baseline'].get('timer')}: both re-timed with events"}
        if out["candidate"].get("timer") != "events":
            out["candidate"] = arms.time(arms.cand, case, seed, ev)
        else:
            out["baseline"] = arms.time(arms.base, case, seed, ev)
        out["candidate"]["extra"].update(note)
        out["baseline"]["extra"].update(note)
    return out


def runner_benchmark(payload: dict[str, Any], progress) -> dict[str, Any]:
    """Op "benchmark". payload: task, candidate, baseline ('pytorch' or source), shapes, options
    (TimingOptions fields), seed, ceilings, budget_s. Returns raw times per shape and the checks."""
    from evokernel_mcp.benchmark.clocks import read_clocks
    from evokernel_mcp.benchmark.worker_info import ceilings_for, device_info
    from evokernel_mcp.runtime.runner import context

    ctx = context()
    task = Task(**payload["task"])
    deadline = time.monotonic() + float(payload.get("budget_s", 280))
    info = device_info()
    result: dict[str, Any] = {"device_info": info, "shapes": [], "clocks_before": None, "clocks_after": None,
                              "ceilings": ceilings_for(payload, progress)}
    try:
        ref = ctx.spares.reference(task, timeout_s=wall_deadline(deadline))
    except ChildFailed as e:
        result["error"] = e.info()
        return result
    cand, base = ctx.spares.take(), None
    result["isolation"] = ctx.spares.isolation()
    try:
        load_candidate(ctx, cand, payload["candidate"], task, deadline)
        base_src = payload.get("baseline", "pytorch")
        if base_src != "pytorch":
            base = ctx.spares.take()
            try:
                load_candidate(ctx, base, base_src, task, deadline)
            except ChildFailed as e:
                raise ChildFailed(e.kind, f"baseline: {e.message}", e.detail) from e
        arms = _Arms(cand, base or ref, task, deadline)
        result["clocks_before"] = _clocks(read_clocks, info)
        shapes, seed = list(payload["shapes"]), int(payload.get("seed", 0))
        opt = dict(payload["options"])
        for i, shape in enumerate(shapes):
            try:
                result["shapes"].append(_bench_shape(arms, ref, shape, seed, opt, progress, 2 * i, 2 * len(shapes)))
            except ChildFailed as e:
                result["error"] = {**e.info(), "shape": shape}
                break
        result["clocks_after"] = _clocks(read_clocks, info)
    except ChildFailed as e:
        result["error"] = e.info()
    finally:
        result["stdout"], result["stderr"] = cand.output()
        for c in (cand, base):
            if c is not None:
                c.discard()
    total = 2 * len(payload["shapes"])
    progress(total, total, "benchmark done")
    return result


def _clocks(read_clocks, info: dict[str, Any]) -> dict[str, Any] | None:
    c = read_clocks(info["backend"], 0) if info["backend"] in ("cuda", "rocm") else None
    return c.model_dump() if c is not None else None

