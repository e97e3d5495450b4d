"""The device memory of one benchmark shape, in the runner: the fullest plan that fits (runtime/devplan.py
plan_benchmark) against the device's free memory, our idle processes given back first when it is short, what the
plan cut applied to the job's arms, and too_big before anything runs. Harness code only."""

from __future__ import annotations

from typing import Any

from evokernel_mcp import settings
from evokernel_mcp.runtime.devmem import map_tensors, trim_between_cases
from evokernel_mcp.runtime.spares import ChildFailed
from evokernel_mcp.verify.refplan import _host_free
from evokernel_mcp.verify.runner_side import _nbytes


def room_for_arms(ctx, arms, ref, case: dict, room: dict, refill_sets: int = 1, sample_size: int = 1,
                  can_park: bool = False, hand_over: bool = False):
    """Before any arm gets its inputs: the fullest benchmark that fits the device's free memory (all processes),
    counted part by part (devplan.plan_benchmark); when that is less than asked, our idle processes give theirs
    back first (once per shape) and it is planned again; then what the plan cut is applied (the control arm
    retired, the refill pool and the sampled repetitions fewer, the runner's device copy of the outputs let go)
    and said in the notes; a shape of more than 1 GB of its own is planned within settings.memory_factor x it
    (devplan.data_cap), which cuts the same aids and gives our idle processes' memory back the same way;
    too_big, naming the bytes, the device's and the overrides, before anything runs. hand_over: the reference's
    process goes before the arms get their inputs (hand_over below), so its context is not counted.
    Returns the plan (also in room["plan"])."""
    import torch

    from evokernel_mcp.runtime import devplan
    from evokernel_mcp.verify.runner_side import give_back

    i, o = _nbytes(case["inputs"]), _nbytes(case["native"])
    per_rep = devplan.per_rep_check_bytes(i, o)  # a per-repetition output check's device bytes per arm
    work = devplan.reported_bytes(case.get("workspace_bytes"))

    # the runner, the reference (unless it hands over) and each arm hold a context: counted against the job's cap
    cap = devplan.data_cap(i + o, settings.get().memory_factor, (1 if hand_over else 2) + 2 + (arms.ctrl is not None))

    def plan(freed: int = 0, hint: dict | None = None) -> devplan.BenchPlan:
        free, total = torch.cuda.mem_get_info()
        return devplan.plan_benchmark(i, o, free, total, arms.ctrl is not None, refill_sets, sample_size,
                                      per_rep, overrides=hint, reclaimed=freed, workspace_bytes=min(work, total),
                                      cap=cap, can_park=can_park, park_big=can_park and host_holds_parked(i))

    p = plan()
    full = (p.control == (arms.ctrl is not None) and p.refill_sets == refill_sets and p.sample_size == sample_size
            and not p.park_idle_arms)
    if not full:
        g = room.get("gave_back") or give_back(ctx, (ref,), room)
        freed = int(g.get("freed_bytes") or 0)
        p = plan(freed, _hint(arms))
        if p.too_big is None:
            room.setdefault("notes", []).append(f"device memory given back before timing: {g['what']}")
    if p.too_big is not None:
        raise ChildFailed("too_big", p.too_big)
    if arms.ctrl is not None and not p.control:
        ctrl, arms.ctrl = arms.ctrl, None
        ctx.spares.retire(ctrl)
        ctx.spares.wait_retired()  # its CUDA context goes before the arms get their inputs, not while they time
    if not p.runner_keeps_outputs:  # its sizes stay (meta tensors): the checks ask the reference afresh
        case["native"] = meta(case["native"])
        trim_between_cases()
    room.setdefault("notes", []).extend(p.notes)
    room["plan"] = p
    return p


def host_holds_parked(input_bytes: int) -> bool:
    """Whether the host has room for a big shape's parked inputs (devplan.plan_benchmark's park_big): four times
    them free to this process (two arms' copies, twice over), and each arm's process allowed twice them
    (limits.memory_bytes: its parked copy is pinned host memory of its own)."""
    from evokernel_mcp.runtime import limits

    allowed = limits.memory_bytes()
    return _host_free() >= 4 * input_bytes and (allowed is None or allowed >= 2 * input_bytes)


NO_CONTROL_NOTE = ("control arm left out (the job's memory cap: three arms' inputs are over it): the noise floor is the "
                   "least band two processes of identical code differ by (1.5 % on a GPU), not measured by a "
                   "byte-identical third arm")


def control_out_of_cap(ctx, arms, plan: dict | None) -> bool:
    """A shape the reference planned within the job's memory cap (op "plan": cap_bytes set): three arms of its
    inputs are over the cap, so no benchmark plan keeps the control arm; its process (and CUDA context) goes now,
    before the reference's forward makes the case, not after. Whether it went."""
    if arms.ctrl is None or not isinstance(plan, dict) or plan.get("cap_bytes") is None:
        return False
    ctrl, arms.ctrl = arms.ctrl, None
    ctx.spares.retire(ctrl)
    ctx.spares.wait_retired()
    return True


def hand_over(ctx, arms, ref, out: dict):
    """A shape planned within the job's memory cap (more than 1 GB of its own) against PyTorch: once the cached
    reference process has made the case, the refill pool and the probe bar, it goes, and the baseline arm's process
    (the same reference source, loaded afresh for this job) answers the post-timing checks after its timing: one
    CUDA context fewer while the arms time and the candidate is checked. The next job of this reference (or the
    next shape) loads it again. Returns the process that answers for the reference now."""
    ctx.spares.drop_reference(ref)
    arms.reference_gone = True
    out.setdefault("memory_notes", []).append(
        "the cached reference process stopped before timing (device memory: one CUDA context fewer); the baseline "
        "arm's process, the same reference loaded afresh, made the post-timing checks' inputs and expected outputs")
    return arms.base


def _hint(arms) -> dict | None:
    try:
        from evokernel_mcp.overrides import scaled_overrides  # AST only: nothing of the reference runs here

        return scaled_overrides(arms.task.reference_source, max_elems=2**26) or None
    except Exception:  # noqa: BLE001 - only a hint
        return None


def meta(x: Any) -> Any:
    """The same structure with every tensor on the meta device (shape and dtype kept, no memory)."""
    import torch

    return map_tensors(x, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"))
