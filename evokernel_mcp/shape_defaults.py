"""Which shape sets of a task a call runs when it names none: the default of the device the job runs on.

On a GPU every shape set; on the CPU path (torch on the host, Triton's interpreter) those small enough to
run in reasonable time, by task.yaml's byte and FLOP counts, the first always. Named `shapes` always run.
The choice says which ran, which were left out and why (results carry it: shapes_run, shapes_skipped,
shape_rule). Pure: no torch, no runtime.
"""

from __future__ import annotations

from pydantic import Field

from evokernel_mcp.errors import BadInput
from evokernel_mcp.models import Model
from evokernel_mcp.tasks import ShapeSet, Task

# The CPU path (torch on the host, Triton's interpreter) runs a shape set in reasonable time when it is about
# this small (task.yaml's bytes and flops). Triton's interpreter takes about 1 us per element on a 2-core host
# (vector_add's 2^20 elements, 12.6 MB: 0.4-1.2 s a call), and a default benchmark makes 20+ calls per arm and a
# verify 8 per shape set: the small shape sets (kB) run in seconds, the medium ones (4-19 MB) take minutes
# under load, the full ones (GB) more memory than a small host has. A GPU runs them all.
CPU_DEFAULT_MAX_BYTES = 1e6
CPU_DEFAULT_MAX_FLOPS = 1e9
_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
             "int32": 4, "int64": 8, "bool": 1}


class SkippedShape(Model):
    shape: str
    reason: str = Field(description="Why it did not run: not a default on this device (with its size), or "
                        "too_big (it did not fit in the free memory).")


class ShapeChoice(Model):
    """The shape sets a call runs (small -> full) and those it leaves out, with the rule that chose them."""

    shapes: list[str]
    skipped: list[SkippedShape] = Field(default_factory=list)
    rule: str


def is_gpu_device(device: str) -> bool:
    """A pool device id ('cpu', 'cuda:0', 'rocm:1', or a Ray actor's 'cuda:0@host') names a GPU."""
    return device.split("@")[0].split(":")[0].strip().lower() not in ("cpu", "")


def _size(task: Task, ss: ShapeSet) -> tuple[float | None, float | None]:
    """(bytes, flops) of a shape set: task.yaml's counts, else the inputs' bytes and no FLOP count."""
    if ss.bytes is not None:
        return ss.bytes, ss.flops
    dtypes = {i.name: i.dtype for i in task.inputs}
    nbytes = 0.0
    for name, shape in ss.input_shapes.items():
        n = 1
        for d in shape:
            n *= d
        nbytes += n * _ITEMSIZE.get(dtypes.get(name, "float32"), 4)
    return (nbytes or None), ss.flops


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB" if n >= 1e6 else f"{n:.0f} B"


def choose_shapes(task: Task, shapes: list[str] | None, device: str | None) -> ShapeChoice:
    """The shape sets to run, in the task's order. Named `shapes` always run (BadInput for unknown or none).
    Without them: on a GPU (or an unknown device) every shape set; on the CPU path those within
    CPU_DEFAULT_MAX_BYTES and CPU_DEFAULT_MAX_FLOPS (the first always), the others listed as skipped."""
    if shapes is not None:
        if not shapes:
            raise BadInput(f"shapes=[] names no shape set; omit it for the device's default or name some of "
                           f"{', '.join(task.shape_names())}")
        for n in shapes:
            task.shape_set(n)  # BadInput for an unknown name
        order = [s for s in task.shape_names() if s in shapes]
        return ShapeChoice(shapes=order, rule="as requested (shapes)")
    if device is None or is_gpu_device(device):
        where = f"on {device}" if device else "on an unnamed device"
        return ShapeChoice(shapes=task.shape_names(), rule=f"default {where}: every shape set")
    limit = f"{_fmt_bytes(CPU_DEFAULT_MAX_BYTES)} and {CPU_DEFAULT_MAX_FLOPS / 1e9:g} GFLOP"
    run, skipped = [], []
    for i, ss in enumerate(task.shape_sets):
        nbytes, flops = _size(task, ss)
        big = []
        if nbytes is not None and nbytes > CPU_DEFAULT_MAX_BYTES:
            big.append(f"{_fmt_bytes(nbytes)} moved")
        if flops is not None and flops > CPU_DEFAULT_MAX_FLOPS:
            big.append(f"{flops / 1e9:.3g} GFLOP")
        if i == 0 or not big:
            run.append(ss.name)
        else:
            skipped.append(SkippedShape(shape=ss.name, reason=(
                f"not run by default on the CPU path: {' and '.join(big)} (task.yaml), over its default of at most "
                f"{limit} per shape set; pass shapes={[*run, ss.name]!r} to run it anyway")))
    return ShapeChoice(shapes=run, skipped=skipped, rule=(
        f"default on {device} (the CPU path): shape sets of at most {limit} (task.yaml bytes, flops), the first "
        "always; on a GPU every shape set; name others in shapes"))
