"""The reference's case of one benchmark shape (harness code in the runner): its memory plan first (op "plan", meta
tensors only), our idle processes given back within the shape's cap before the reference's peak, the control arm
stopped (or never started) where the cap leaves it no room. Where every shape of a job is planned within its cap, the
first shape's case is made before any arm's process starts (runner_side._benchmark): made beside two idle arms and a
control arm being stopped, a 1-2 GB shape's case took 3.3-3.9x its own bytes on an H100 (6_Matmul_with_large_K_dimension_,
54_conv_standard_3D, 85_conv_depthwise_2D), their contexts 0.8x of it. Plans are the reference's numbers (agent code's):
they pick only where copies go and which idle processes stop, never a verdict."""

from __future__ import annotations

from typing import Any

from evokernel_mcp import settings
from evokernel_mcp.benchmark.room import NO_CONTROL_NOTE
from evokernel_mcp.runtime.devplan import host_staged, reported_bytes, through_host
from evokernel_mcp.runtime.spares import wall_deadline


def _plan_req(shape: str, seed: int) -> dict[str, Any]:
    return {"op": "plan", "shape": shape, "seed": seed, "hi": False, "memory_factor": settings.get().memory_factor}


def every_shape_capped(ref, shapes: list[str], seed: int, deadline: float) -> list[dict] | None:
    """The reference's plan of every shape of the job (op "plan"), where each is within the job's memory cap
    (cap_bytes set), else None. Then no benchmark plan keeps a control arm (it is never started), the first shape's
    case is made before the arms' processes are up, and each shape's case uses its plan from here (make_case)."""
    from evokernel_mcp.verify.runner_side import plan_of

    plans = []
    for shape in shapes:
        plan = plan_of(ref.request(_plan_req(shape, seed), timeout_s=wall_deadline(deadline), max_bytes=1 << 20))
        if plan is None or plan.get("cap_bytes") is None:
            return None
        plans.append(plan)
    return plans or None


def via_host(plan: Any) -> bool:
    """A staged shape over its cap (devplan.host_staged and through_host, from the plan's sizes): the reference sends
    its inputs through host memory, where the runner keeps them anyway, its device copy gone before the export is
    made (6_Matmul_with_large_K_dimension_: 1 GiB, and its export 0.5 GiB more, beside four contexts)."""
    if not isinstance(plan, dict):
        return False
    i, o, largest = (reported_bytes(plan.get(k)) for k in ("input_bytes", "output_bytes", "largest_bytes"))
    return host_staged(i, o) and through_host(i, o, largest, settings.get().memory_factor)


def make_case(ask, ref, shape: str, seed: int, gpu: bool, ctx, drop_control, plan: dict | None = None) -> dict[str, Any]:
    """The shape's case: {"case", "room" (gave_back, plan, notes), "via_host"}. ask(child, req, max_bytes=, device=):
    one request (Arms.ask, or the reference's own before any arm exists); drop_control(plan): whether a control arm
    went (or never came) for this shape's cap; plan: the shape's plan where every_shape_capped asked it already."""
    from evokernel_mcp.verify.runner_side import plan_of, with_room, within_cap

    room: dict[str, Any] = {}
    no_ctrl, host = False, False
    if gpu and ctx is not None:  # a shape over the memory cap: our idle processes go before the reference's peak
        plan = plan or plan_of(ask(ref, _plan_req(shape, seed), max_bytes=1 << 20))
        host = via_host(plan)
        if within_cap(ctx, ref, plan, room, spares_room=False):
            room["notes"] = [f"within the shape's memory cap (memory_factor x its own bytes): "
                             f"{room['gave_back']['what']}"]
        no_ctrl = drop_control(plan)

    def case() -> dict:
        return ask(ref, {"op": "case", "shape": shape, "seed": seed, "hi": False, "work": True,
                         "memory_factor": settings.get().memory_factor,  # its plan within the cap: no copy
                         "through_host": host}, max_bytes=1 << 42, device="cpu" if host else None)
    made = with_room(ctx, case, (ref,), room) if ctx is not None else case()
    if "gave_back" in room and not room.get("notes"):
        room["notes"] = [f"device memory given back for this shape: {room['gave_back']['what']}"]
    if no_ctrl:
        room.setdefault("notes", []).append(NO_CONTROL_NOTE)
    return {"case": made, "room": room, "via_host": host}
