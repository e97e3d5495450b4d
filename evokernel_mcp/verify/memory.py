"""How many bytes a verify case needs, and the plan that fits it (or a refusal naming the sizes).

Pure arithmetic on shapes/dtypes plus shape inference on meta tensors; no I/O, no allocation of
real data. The runner estimates a case from get_inputs' shapes (`meta_input_specs`) and one dry
forward on meta tensors (`meta_output_specs`), then `plan_case` decides whether the float64
reference fits, how big the comparison blocks are (verify/bar.py), or refuses with a clear message
instead of being SIGKILLed.

What a case holds (all counted where the comparison runs, the device, or the host on CPU):
  inputs              the generated inputs, once per seed
  clones              `clones` x inputs (what the checks copy: the candidate's runs, mutation check)
  outputs             OUTPUT_COPIES x outputs (reference native, candidate runs A and B)
  float64 reference   floating inputs and outputs again in float64 (complex in complex128);
                      integer/bool outputs at their own size (optional: dropped when it does not fit)
  comparison blocks   JUDGE_ARRAYS float64 arrays of chunk_elems each
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel, Field

OUTPUT_COPIES = 3
JUDGE_ARRAYS = 8
DEFAULT_CHUNK = 2**24
LEAN_CHUNK = 2**22  # a job within its memory cap: the judge's float64 blocks ~256 MiB, not ~1 GiB
MIN_CHUNK = 2**16
HEADROOM = 0.9  # plan within this fraction of the free memory reported


class TensorSpec(BaseModel):
    """Shape and dtype of one tensor (no data)."""

    shape: list[int]
    dtype: str = Field(description="torch dtype name without 'torch.', e.g. 'float32'.")
    path: str | None = Field(default=None, description="Where it sits, e.g. 'out[0]' (outputs) or 'in[1]'.")

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def itemsize(self) -> int:
        import torch

        return getattr(torch, self.dtype).itemsize

    def nbytes(self) -> int:
        return self.numel() * self.itemsize()

    def is_floating(self) -> bool:
        import torch

        dt = getattr(torch, self.dtype)
        return dt.is_floating_point or dt.is_complex

    def hi_bytes(self) -> int:
        """Bytes of this tensor in float64 (complex128 for complex dtypes)."""
        import torch

        return self.numel() * (16 if getattr(torch, self.dtype).is_complex else 8)


def spec_of(t: Any, path: str | None = None) -> TensorSpec:
    return TensorSpec(shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."), path=path)


def specs_of(obj: Any, path: str = "in") -> list[TensorSpec]:
    """Specs of every tensor in a (nested) list/tuple/dict; other values (Python numbers) are skipped."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [spec_of(obj, path)]
    if isinstance(obj, (list, tuple)):
        return [s for i, x in enumerate(obj) for s in specs_of(x, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [s for k, x in obj.items() for s in specs_of(x, f"{path}[{k!r}]")]
    return []


class CaseEstimate(BaseModel):
    """Bytes one verify case needs, by part (see the module docstring)."""

    input_bytes: int
    clone_bytes: int
    output_bytes: int = Field(description=f"{OUTPUT_COPIES} copies: reference native, candidate runs A and B.")
    ref_hi_bytes: int = Field(description="The float64 reference (inputs and outputs); 0 when not counted.")

    @property
    def base_bytes(self) -> int:
        return self.input_bytes + self.clone_bytes + self.output_bytes

    @property
    def total_bytes(self) -> int:
        return self.base_bytes + self.ref_hi_bytes


def estimate_case(input_specs: list[TensorSpec], output_specs: list[TensorSpec], *, ref_hi: bool = True,
                  clones: int = 2) -> CaseEstimate:
    """The bytes of a case by part; ref_hi=False leaves the float64 reference out (0 bytes)."""
    if clones < 0:
        raise ValueError(f"clones must be >= 0, got {clones}")
    inputs = sum(s.nbytes() for s in input_specs)
    outputs = sum(s.nbytes() for s in output_specs)
    hi = sum(s.hi_bytes() for s in input_specs if s.is_floating()) + \
        sum(s.hi_bytes() if s.is_floating() else s.nbytes() for s in output_specs)
    return CaseEstimate(input_bytes=inputs, clone_bytes=clones * inputs, output_bytes=OUTPUT_COPIES * outputs,
                        ref_hi_bytes=hi if ref_hi else 0)


def estimate_case_bytes(input_specs: list[TensorSpec], output_specs: list[TensorSpec], *, ref_hi: bool,
                        clones: int) -> int:
    """Total bytes of a case (estimate_case(...).total_bytes)."""
    return estimate_case(input_specs, output_specs, ref_hi=ref_hi, clones=clones).total_bytes


class Plan(BaseModel):
    """How to run a case within the memory free now, or why not."""

    ref_hi: bool = Field(description="Compute the reference in float64 (else judge against the native one).")
    chunk_elems: int = Field(description="Elements per comparison block (verify/bar.py).")
    refuse: str | None = Field(default=None, description="Set when the case cannot fit: what to do instead.")
    where: str = Field(description="'device' or 'host': where the case's tensors live.")
    needed_bytes: int
    budget_bytes: int
    ref_hi_bytes: int = Field(default=0, description="Bytes of the whole float64 reference (inputs and outputs), "
                              "kept or not: a float64 sample of the batch is sized from it (verify/refout.py).")
    pristine: bool = Field(default=True, description="The candidate keeps a pristine copy of its inputs; False: "
                           "a digest of them (a job planned within its memory cap: runtime/devplan.py).")
    cap_bytes: int | None = Field(default=None, description="The tensors' bytes the job was planned within "
                                  "(runtime/devplan.data_cap); None: the free memory alone.")
    input_bytes: int = Field(default=0, description="The case's inputs, as planned (0: not known).")
    output_bytes: int = Field(default=0, description="Its outputs, as planned (0: not known).")
    largest_bytes: int = Field(default=0, description="Its largest tensor, input or output (0: not known).")


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _refusal(est: CaseEstimate, where: str, free: int, workspace: int, hint: dict | None) -> str:
    parts = [f"inputs {_gb(est.input_bytes)}", f"input clones {_gb(est.clone_bytes)}",
             f"outputs x{OUTPUT_COPIES} {_gb(est.output_bytes)}", f"comparison blocks {_gb(workspace)}"]
    total = est.base_bytes + workspace
    fix = (f"name a smaller shape set in shapes (get_task lists them), or for a KernelBench reference pass "
           f"{f'overrides={hint!r}' if hint else 'overrides={...} with smaller size constants (e.g. batch_size)'}")
    dropped = f" (the float64 reference, {_gb(est.ref_hi_bytes)} more, is already left out)" if est.ref_hi_bytes else ""
    return (f"this case does not fit: {' + '.join(parts)} = {_gb(total)} > {HEADROOM:.0%} of free {where} memory "
            f"{_gb(free)}{dropped}; {fix}, or run it on a machine with more {where} memory")


def plan_case(est: CaseEstimate, free_device: int | None, free_host: int, *, chunk_elems: int = DEFAULT_CHUNK,
              suggested_overrides: dict | None = None) -> Plan:
    """Decide where the case runs, whether the float64 reference fits, and the comparison block size.

    free_device: free bytes on the device (None: CPU-only, the case lives on the host). free_host: free
    host bytes; on a device the host must still hold the inputs while they are generated. Plans within
    HEADROOM of each. The float64 reference is kept when everything fits with it; else dropped; blocks
    are halved (down to MIN_CHUNK) before refusing. `suggested_overrides` goes into the refusal.
    """
    where = "host" if free_device is None else "device"
    free = free_host if free_device is None else free_device
    budget = int(HEADROOM * free)
    if free_device is not None and est.input_bytes > HEADROOM * free_host:
        msg = (f"this case does not fit: inputs {_gb(est.input_bytes)} are generated on the host, > {HEADROOM:.0%} "
               f"of free host memory {_gb(free_host)}; name a smaller shape set in shapes (get_task lists them), or "
               f"for a KernelBench reference pass "
               f"{'overrides=' + repr(suggested_overrides) if suggested_overrides else 'smaller sizes in overrides'}")
        return Plan(ref_hi=False, chunk_elems=chunk_elems, refuse=msg, where=where,
                    needed_bytes=est.input_bytes, budget_bytes=int(HEADROOM * free_host))
    chunk = chunk_elems
    while True:
        workspace = JUDGE_ARRAYS * 8 * chunk
        if est.total_bytes + workspace <= budget:
            return Plan(ref_hi=est.ref_hi_bytes > 0, chunk_elems=chunk, where=where,
                        needed_bytes=est.total_bytes + workspace, budget_bytes=budget, ref_hi_bytes=est.ref_hi_bytes)
        if est.base_bytes + workspace <= budget:
            return Plan(ref_hi=False, chunk_elems=chunk, where=where, needed_bytes=est.base_bytes + workspace,
                        budget_bytes=budget, ref_hi_bytes=est.ref_hi_bytes)
        if chunk <= MIN_CHUNK:
            return Plan(ref_hi=False, chunk_elems=chunk, where=where, needed_bytes=est.base_bytes + workspace,
                        budget_bytes=budget, refuse=_refusal(est, where, free, workspace, suggested_overrides))
        chunk //= 2


def verify_needs(input_specs: list[TensorSpec], output_specs: list[TensorSpec], *,
                 chunk_elems: int = DEFAULT_CHUNK):
    """The case's tensors by process on one device (runtime/devplan.VerifyNeeds); the comparison blocks are
    counted with the runner's mask."""
    from evokernel_mcp.runtime.devplan import VerifyNeeds

    specs = [*input_specs, *output_specs]
    return VerifyNeeds(
        input_bytes=sum(s.nbytes() for s in input_specs), output_bytes=sum(s.nbytes() for s in output_specs),
        hi_input_bytes=sum(s.hi_bytes() for s in input_specs if s.is_floating()),
        hi_output_bytes=sum(s.hi_bytes() if s.is_floating() else s.nbytes() for s in output_specs),
        largest_bytes=max((s.nbytes() for s in specs), default=0),
        mask_bytes=max((s.numel() for s in output_specs), default=0) + JUDGE_ARRAYS * 8 * chunk_elems)


VERIFY_PROCESSES = 3  # the runner, the reference and the candidate: their CUDA contexts count against the cap


def plan_device_case(input_specs: list[TensorSpec], output_specs: list[TensorSpec], free_device: int,
                     free_host: int, *, total_device: int | None = None, want_hi: bool = True,
                     suggested_overrides: dict | None = None, memory_factor: float = 0.0) -> Plan:
    """plan_case for a case on a device, made from what every process of the job holds at the peak
    (runtime/devplan.plan_verify: reference, runner, candidate, a tensor in transfer) against the device's free
    memory across all processes: the float64 reference kept whole where that fits, else left out (PyTorch's
    error then measured on a float64 sample of the batch where the model allows), else a refusal naming the
    bytes needed, the bytes the device has and the overrides that shrink it. The host must still hold the
    inputs while they are generated. A job of more than 1 GB of its own is planned within memory_factor x its
    own bytes where it can (runtime/devplan.data_cap): the float64 reference then sampled, the inputs checked by
    digest, not copied, and the comparison blocks smaller (LEAN_CHUNK)."""
    from evokernel_mcp.runtime.devplan import data_cap, plan_verify

    est = estimate_case(input_specs, output_specs, ref_hi=want_hi, clones=2)
    if est.input_bytes > HEADROOM * free_host:
        return plan_case(est, free_device, free_host, suggested_overrides=suggested_overrides)
    cap = data_cap(sum(s.nbytes() for s in [*input_specs, *output_specs]), memory_factor, VERIFY_PROCESSES)
    chunk = DEFAULT_CHUNK if cap is None else LEAN_CHUNK
    needs = verify_needs(input_specs, output_specs, chunk_elems=chunk)
    if not want_hi:
        needs = needs.model_copy(update={"hi_input_bytes": 0, "hi_output_bytes": 0})
    dp = plan_verify(needs, free_device, total_device, [], suggested_overrides, cap=cap)
    return Plan(ref_hi=want_hi and dp.float64 == "whole", chunk_elems=chunk, where="device",
                needed_bytes=dp.needed_bytes, budget_bytes=int(HEADROOM * free_device), refuse=dp.too_big,
                ref_hi_bytes=est.ref_hi_bytes if want_hi else 0, pristine=dp.pristine, cap_bytes=cap,
                input_bytes=needs.input_bytes, output_bytes=needs.output_bytes, largest_bytes=needs.largest_bytes)


BOUND_FACTOR = 4  # a declared-shape case's outputs are assumed up to this many times the declared bound
SMALL_FRACTION = 8  # ... and planned so only where the case then needs at most 1/8 of the memory it may use


def bounded_output_specs(input_specs: list[TensorSpec], declared_bytes: float | None) -> list[TensorSpec]:
    """A generous stand-in for a declared-shape task's outputs, without running anything: one tensor of
    BOUND_FACTOR x the larger of the inputs' bytes and the outputs' share of the task's declared DRAM bytes
    (its `bytes` expression: inputs read once, outputs written once), in the narrowest floating input dtype
    (the largest float64 copy per byte). Used only for cases small enough that the bound's slack cannot matter
    (`small_bound_plan`); other cases get their outputs from a forward on meta tensors."""
    floats = [s for s in input_specs if s.is_floating()] or input_specs
    dtype = min(floats, key=lambda s: s.itemsize()).dtype if floats else "float32"
    in_bytes = sum(s.nbytes() for s in input_specs)
    out_bytes = max(in_bytes, int(declared_bytes or 0) - in_bytes, 1)
    spec = TensorSpec(shape=[], dtype=dtype, path="out (bound)")
    n = -(-BOUND_FACTOR * out_bytes // spec.itemsize())
    return [spec.model_copy(update={"shape": [n]})]


def small_bound_plan(plan: Plan, input_specs: list[TensorSpec], output_specs: list[TensorSpec], want_hi: bool) -> bool:
    """Whether a plan made from bounded_output_specs can stand: nothing refused, the float64 reference kept
    where asked for, and the case (with the float64 copies) within 1/SMALL_FRACTION of the budget."""
    if plan.refuse or (want_hi and not plan.ref_hi):
        return False
    total = estimate_case(input_specs, output_specs, ref_hi=True, clones=4).total_bytes
    return total * SMALL_FRACTION <= plan.budget_bytes


def _to_meta(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to("meta")
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_to_meta(x) for x in obj)
    return obj


def meta_output_specs(model: Any, inputs: list[Any]) -> list[TensorSpec] | None:
    """Output shapes/dtypes from one forward on meta tensors (no data, no allocation), or None where
    meta is unsupported (data-dependent shapes, .item(), tensors held outside parameters/buffers).

    The model itself is not modified: its parameters and buffers are swapped for meta copies through
    torch.func.functional_call, so buffers updated in forward (BatchNorm statistics) stay untouched.
    """
    import torch
    from torch.func import functional_call

    from evokernel_mcp.verify.outputs import flatten_outputs

    try:
        state = {k: _to_meta(v) for k, v in itertools.chain(model.named_parameters(), model.named_buffers())}
        with torch.no_grad():
            out = functional_call(model, state, tuple(_to_meta(x) for x in inputs))
        leaves = flatten_outputs(out, allow_meta=True)
    except Exception:  # noqa: BLE001 - any failure (OutputError included) means "meta cannot tell"
        return None
    return [spec_of(leaf.tensor, leaf.path) for leaf in leaves]


def meta_input_specs(get_inputs: Any) -> list[TensorSpec] | None:
    """Input shapes/dtypes by calling get_inputs with meta as the default device (factories that
    name a device explicitly still allocate there); None when that fails."""
    import torch

    try:
        with torch.device("meta"):
            inputs = get_inputs()
    except Exception:  # noqa: BLE001
        return None
    return specs_of(list(inputs))
