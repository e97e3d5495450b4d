"""The reference child's memory plan for one verify case (verify/sides.py's ref_case and ref_plan): the free
device and host memory this process may use, the case's input and output shapes from meta tensors (or a bound on
small ones), memory.plan_case / plan_device_case against them, and what sizes the float64 sample of the batch
where the plan leaves the whole float64 copy out."""

from __future__ import annotations

import os
import resource
from typing import Any

from evokernel_mcp import candidate as cand


class TooBig(Exception):
    """The case cannot fit in the free memory (reported as kind 'too_big', with the sizes)."""

    kind = "too_big"


def _host_free() -> int:
    """Bytes this process may still allocate on the host: MemAvailable, the cgroup's limit, RLIMIT_AS, RLIMIT_DATA."""
    free = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            lim = f.read().strip()
        if lim != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                free.append(int(lim) - int(f.read().strip()))
    except (OSError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            free.append(soft - used)
        except (OSError, ValueError):
            pass
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)  # the per-job memory limit (runtime/limits.py)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/status") as f:
                used = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmData:"))
            free.append(soft - used)
        except (OSError, ValueError, StopIteration):
            pass
    return max(0, min(free)) if free else 1 << 62


def _device_free(device: str) -> int | None:
    import torch

    if device == "cpu":
        return None
    free, _ = torch.cuda.mem_get_info()
    return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())


def _free_here(device: str) -> int:
    """Free bytes where this process keeps tensors: its device, else the host."""
    free = _device_free(device) if device != "cpu" else None
    return _host_free() if free is None else free


def _meta_inputs(loaded, shape: str) -> list[Any] | None:
    """The case's inputs as meta tensors (no data), or None when get_inputs cannot run on meta."""
    import torch

    task = loaded.task
    if task.kind == "kernelbench" or not task.inputs:
        try:
            with torch.device("meta"):
                raw = list(loaded.module.get_inputs())
        except Exception:  # noqa: BLE001 - explicit devices, data-dependent code: plan from the real inputs
            return None
        if any(isinstance(t, torch.Tensor) and t.device.type != "meta" for t in raw):
            return None
        return raw
    ss = task.shape_set(shape)
    return [torch.empty(ss.input_shapes[s.name], dtype=cand.torch_dtype(s.dtype), device="meta") for s in task.inputs]


def _plan(loaded, model, shape: str, inputs: list[Any] | None, want_hi: bool):
    """The memory plan of one case (memory.plan_case); `inputs` None: from meta shapes. None when the
    shapes cannot be known before the inputs exist. Returns (plan, note, bound): bound is the output bytes the
    plan assumed without knowing them (None: known), to hold the real outputs to before the float64 forward."""
    from evokernel_mcp.verify import memory

    meta = _meta_inputs(loaded, shape) if inputs is None else inputs
    if meta is None:
        return None, None, None
    in_specs = memory.specs_of(list(meta))
    spec = cand.is_spec_task(loaded.task)
    if inputs is None and (spec or loaded.device == "cpu"):
        # a process's first forward on meta tensors imports torch._dynamo (1-4 s; on the host about as much as
        # importing torch): a small case plans from a generous bound on its outputs instead (a declared-shape
        # task's from its declared bytes, else from its inputs'), and only a case where the bound's slack could
        # matter runs the meta forward. Without a declared size the real outputs are checked against the bound
        # once the native forward has made them (_outputs_check), before any float64 copy
        bound = memory.bounded_output_specs(in_specs, loaded.task.shape_set(shape).bytes if spec else None)
        plan = _plan_specs(loaded, in_specs, bound, want_hi)
        if memory.small_bound_plan(plan, in_specs, bound, want_hi):
            return plan, None, None if spec else sum(s.nbytes() for s in bound)
    out_specs = memory.meta_output_specs(model, list(meta))
    note = None
    if out_specs is None:
        out_specs, note = in_specs, "output sizes unknown (no meta forward): assumed the inputs' size"
    return _plan_specs(loaded, in_specs, out_specs, want_hi), note, None


def _outputs_check(loaded, inputs: list[Any], want_hi: bool, bound: int):
    """For reference_outputs(hi_check=): the case planned from a bound on its outputs; once the native forward
    made them, outputs over the bound are planned again from their real sizes (too_big when even the native
    reference does not fit; the reason the float64 copy is left out when only it does not)."""
    from evokernel_mcp.verify import memory

    def check(native) -> str | None:
        out_specs = memory.specs_of(native, "out")  # (what is not a tensor the judge refuses; nothing to size)
        if sum(s.nbytes() for s in out_specs) <= bound:
            return None
        plan = _plan_specs(loaded, memory.specs_of(list(inputs)), out_specs, want_hi)
        if plan.refuse:
            raise TooBig(plan.refuse)
        return _no_room_for_hi(plan) if want_hi and not plan.ref_hi else None
    return check


def _no_room_for_hi(plan) -> str:
    """Why a plan left the float64 copy out (refout.DOES_NOT_FIT and the sizes)."""
    from evokernel_mcp.verify.refout import DOES_NOT_FIT

    cap = (f", {plan.cap_bytes / 1e9:.2f} GB within the job's memory cap (memory_factor x its own bytes)"
           if plan.cap_bytes is not None else "")
    return (f"{DOES_NOT_FIT}: {plan.needed_bytes / 1e9:.2f} GB planned without it, "
            f"{plan.budget_bytes / 1e9:.2f} GB usable on the {plan.where}{cap}")


def _plan_specs(loaded, in_specs: list[Any], out_specs: list[Any], want_hi: bool):
    """memory.plan_case (plan_device_case on a device) for these input and output specs."""
    from evokernel_mcp.verify import memory

    on_device = loaded.device != "cpu"
    hint = None
    if loaded.task.kind == "kernelbench":
        try:
            from evokernel_mcp.overrides import scaled_overrides

            hint = scaled_overrides(loaded.task.reference_source, max_elems=2**26) or None
        except Exception:  # noqa: BLE001 - only a hint in the refusal
            hint = None
    if on_device:  # every process of the job on one device, against what is free there across all processes
        import torch

        return memory.plan_device_case(in_specs, out_specs, _device_free(loaded.device), _host_free(),
                                       total_device=int(torch.cuda.mem_get_info()[1]), want_hi=want_hi,
                                       suggested_overrides=hint, memory_factor=getattr(loaded, "memory_factor", 0.0))
    est = memory.estimate_case(in_specs, out_specs, ref_hi=want_hi, clones=4)
    return memory.plan_case(est, None, _host_free(), suggested_overrides=hint)


def _sample_room(plan) -> dict[str, Any]:
    """What sizes the float64 sample of the batch (refout._sample_error) where the plan left the whole float64 copy
    out: the bytes the plan leaves free, within the job's memory cap where it has one (a quarter of a 1 GB
    convolution's batch in float64, beside its native outputs, took its reference process to 3 GB), and then at
    least one sample."""
    free = plan.budget_bytes - plan.needed_bytes
    if plan.cap_bytes is not None:
        free = min(free, plan.cap_bytes - plan.needed_bytes)
    return {"room_bytes": free, "hi_bytes": plan.ref_hi_bytes, "least_one": plan.cap_bytes is not None}
