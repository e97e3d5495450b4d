"""The reference's outputs for one verify case, in the reference child (verify/sides.py): the native forward,
the float64 copy where it runs, and the native forward again where the judge needs its run-to-run spread.

The float64 reference is an accuracy aid, not a requirement. Its copy runs with torch's default dtype set to
float64 and the modules' plain tensor attributes upcast (tensors a KernelBench forward makes itself); a
forward that still fails in float64, or runs out of memory, leaves it out, and the case is judged against the
native reference with the native bar (verify/bar.py), floored by the native's own run-to-run spread.
Where the float64 copy runs but PyTorch's native result differs from it by far more than rounding
(bar.ill_conditioned), the native is run twice too and the candidate is held to both references.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from evokernel_mcp.runtime.devmem import release_cached

_OWNED = [False]  # within owned_inputs(): the native forwards run on the inputs themselves


@contextlib.contextmanager
def owned_inputs():
    """The native forwards run on the inputs themselves, not on a copy: for a caller that owns them, needs
    them no further or checks them by digest afterwards (a benchmark check's inputs, device memory)."""
    _OWNED[0] = True
    try:
        yield
    finally:
        _OWNED[0] = False


def _upcast(inputs: list[Any]) -> list[Any]:
    import torch

    def up(t):
        if isinstance(t, torch.Tensor) and t.is_complex():
            return t.to(torch.complex128)
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    return [up(t) for t in inputs]


def _clone(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _native_forward(model, inputs: list[Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(*(inputs if _OWNED[0] else _clone(inputs)))


def _measured_forward(model, inputs: list[Any], device: str) -> tuple[Any, int | None]:
    """The native forward, and on a GPU its working memory: the allocator's peak during the call beyond the
    copies of the inputs and the outputs (what each timed arm's allocator keeps cached after its first call).
    None on the CPU."""
    import torch

    from evokernel_mcp.verify.memory import specs_of

    if device == "cpu" or not torch.cuda.is_available():
        return _native_forward(model, inputs), None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    native = _native_forward(model, inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    held = sum(s.nbytes() for s in specs_of(native, "out"))  # (any structure: what is not a tensor counts 0)
    # the copies of the inputs the forward ran on, made within the call (none where it ran on the inputs
    # themselves: they were allocated before it, and subtracting them again read a loss's 8 GiB of temporaries as 0)
    given = 0 if _OWNED[0] else sum(s.nbytes() for s in specs_of([x for x in inputs
                                                                   if isinstance(x, torch.Tensor) and x.is_cuda]))
    return native, max(0, peak - held - given)


class _DefaultFloat64:
    """torch's default dtype float64 while the float64 copy runs: tensors a forward makes itself
    (torch.zeros(n), torch.randn(...) without a dtype) then match its float64 inputs."""

    def __enter__(self):
        import torch

        self.old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)

    def __exit__(self, *exc):
        import torch

        torch.set_default_dtype(self.old)


def _upcast_attributes(model) -> None:
    """Floating tensors kept as plain attributes of the copy's modules (not parameters or buffers, so
    .double() leaves them: an LSTM's initial state made in __init__) in float64 too."""
    import torch

    for mod in model.modules():
        for name, value in list(vars(mod).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) and \
                    value.is_floating_point() and value.dtype != torch.float64:
                setattr(mod, name, value.double())


def _float64_forward(model, inputs: list[Any]) -> Any:
    import torch

    with torch.no_grad():
        hi_model = copy.deepcopy(model).double()
        if any(isinstance(t, torch.Tensor) and t.is_complex() for t in hi_model.state_dict().values()):
            hi_model = hi_model.to(torch.complex128)
        _upcast_attributes(hi_model)
        with _DefaultFloat64():
            out = hi_model(*_upcast(inputs))
        del hi_model
    return out


def _cut(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


OUT_OF_DEVICE_MEMORY = "float64 forward ran out of device memory"
OUT_OF_HOST_MEMORY = "float64 forward ran out of host memory"
DOES_NOT_FIT = "the float64 copy does not fit"  # the memory plan left it out (verify/sides.py)


def _outputs_why(model, inputs: list[Any], hi: bool, device: str, hi_check=None) -> tuple[Any, Any, str | None, int | None]:
    """(native, float64 or None, why the float64 reference is missing or None, the native forward's working
    memory on a GPU: _measured_forward). The native forward's own
    failure propagates; the float64 copy's (out of memory, or a forward that does not run in float64:
    dtype mixing the copy could not lift) leaves it out. hi_check(native): the reason the float64 copy does not
    fit after all (a case planned before its outputs' sizes were known), or None."""
    import torch

    native, work = _measured_forward(model, inputs, device)
    if not hi:
        return native, None, None, work
    if hi_check is not None and (late := hi_check(native)) is not None:
        return native, None, late, work
    try:
        return native, _float64_forward(model, inputs), None, work
    except torch.OutOfMemoryError:
        why = OUT_OF_DEVICE_MEMORY
    except MemoryError:
        why = OUT_OF_HOST_MEMORY
    except Exception as e:  # noqa: BLE001 - the reference's own code in float64: an accuracy aid, not a must
        host_oom = "can't allocate memory" in str(e) or "not enough memory" in str(e)
        why = OUT_OF_HOST_MEMORY if host_oom else f"float64 forward failed: {type(e).__name__}: {_cut(e, 120)}"
    if device != "cpu":
        torch.cuda.empty_cache()
    return native, None, why, work


def _rng_state(device: str):
    import torch

    return torch.random.get_rng_state(), (torch.cuda.get_rng_state() if device != "cpu" else None)


def _set_rng_state(state, device: str) -> None:
    import torch

    torch.random.set_rng_state(state[0])
    if state[1] is not None and device != "cpu":
        torch.cuda.set_rng_state(state[1])


class _buffers_kept:
    """The model's buffers (BatchNorm running statistics) put back after an extra forward."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.saved = {k: v.detach().clone() for k, v in self.model.named_buffers()}

    def __exit__(self, *exc):
        import torch

        with torch.no_grad():
            for k, v in self.model.named_buffers():
                if k in self.saved:
                    v.copy_(self.saved[k])


def _batch_size(inputs: list[Any]) -> int | None:
    """B when every tensor input has a leading dimension of the same size B >= 2, else None."""
    import torch

    sizes = {t.shape[0] for t in inputs if isinstance(t, torch.Tensor) and t.dim() >= 1}
    return sizes.pop() if len(sizes) == 1 and min(sizes) >= 2 else None


def _sample_error(model, inputs: list[Any], native: Any, rng, device: str, room: int | None,
                  hi_bytes: int, least_one: bool = False) -> tuple[dict[str, float], int, int, dict[str, float]] | None:
    """PyTorch's own error measured on a float64 sample of the batch, when the whole float64 copy does not
    fit: ({output path: max |native - float64| on the first k samples}, k, B, {output path: the native
    run-to-run spread on those k samples}), or None. Only for a batch-separable model: every input and floating
    output leads with the batch, and the native forward on the first k samples gives the full run's first k
    rows (a BatchNorm in training mode does not). The spread comes from the native forward on the k samples
    run twice (same random state): a second full forward, with its outputs and working memory, is what does
    not fit. k: at most a quarter of the batch, and what the free room holds (room None: an eighth); least_one: at
    least one sample (a job within its memory cap, whose room may be none: one sample is still less than the second
    full forward that measures the spread without it)."""
    import torch

    b = _batch_size(inputs)
    if b is None or not _leads_with_batch(native, b):  # known before any forward: a loss's scalar output does
        return None  # not (its float64 forward on a quarter of the batch ran for nothing: 96_HuberLoss, 27 GiB)
    k = max(1, b // 8) if room is None or hi_bytes <= 0 else min(max(1, b // 4), int(b * room // hi_bytes))
    k = max(1, k) if least_one else k
    if k < 1:
        return None
    part = [t[:k] if isinstance(t, torch.Tensor) and t.dim() >= 1 else t for t in inputs]
    try:
        with _buffers_kept(model):
            return _sample_forwards(model, part, native, rng, device, k, b)
    except Exception:  # noqa: BLE001 - the reference's code on a slice (out of memory included): no sample
        release_cached()
        return None


def _sample_forwards(model, part: list[Any], native: Any, rng, device: str, k: int,
                     b: int) -> tuple[dict[str, float], int, int, dict[str, float]] | None:
    """_sample_error's three forwards on the first k of b samples, one at a time: the native rows (checked against
    the full run's first k rows: the model is batch-separable), the native rows again (the run-to-run spread), then,
    with both gone, the float64 rows (PyTorch's error). All three held together took 54_conv_standard_3D's
    reference process to twice the sample's float64 bytes on an H100; one at a time, about the float64 rows'."""
    from evokernel_mcp.verify import bar
    from evokernel_mcp.verify.memory import LEAN_CHUNK
    from evokernel_mcp.verify.outputs import flatten_outputs

    floating = {leaf.path: leaf.tensor for leaf in flatten_outputs(native)
                if leaf.tensor.is_floating_point() or leaf.tensor.is_complex()}

    def forward(fn) -> dict[str, Any]:
        return {leaf.path: leaf.tensor for leaf in flatten_outputs(fn(model, part))}

    _set_rng_state(rng, device)
    rows = forward(_native_forward)
    if not all(_rows_agree(rows.get(path), t, k, b) for path, t in floating.items()):
        return None  # the rows depend on the rest of the batch
    _set_rng_state(rng, device)
    again = forward(_native_forward)
    spread = {path: _spread(rows[path], again.get(path)) for path in floating}
    rows = again = None
    release_cached()  # the rows' blocks back before the float64 forward, which needs blocks of twice their size
    hi = forward(_float64_forward)
    errs = {}
    for path, t in floating.items():
        h = hi.get(path)
        if h is None or tuple(h.shape) != (k, *t.shape[1:]):
            return None
        errs[path] = bar.float64_disagreement(h, t[:k], chunk_elems=LEAN_CHUNK)[0]
    return (errs, k, b, spread) if errs else None


def _rows_agree(r: Any, t: Any, k: int, b: int) -> bool:
    """Whether the sample's native rows r are the full run's output t's first k of b rows (same shape and dtype,
    within the native bar)."""
    from evokernel_mcp.verify import bar
    from evokernel_mcp.verify.memory import LEAN_CHUNK

    if r is None or t.dim() < 1 or t.shape[0] != b or tuple(r.shape) != (k, *t.shape[1:]) or r.dtype != t.dtype:
        return False
    # compared in lean blocks: a sample is taken where memory is short, and with the default blocks its float64
    # arrays took 1.3 GiB for one sample of 54_conv_standard_3D (61 MB of rows) on an H100, more than its forwards
    return bar.judge(r, None, t[:k], dtype_preset=bar.preset_of(t.dtype), chunk_elems=LEAN_CHUNK)["passed"]


def _spread(r: Any, a: Any) -> float:
    from evokernel_mcp.verify import bar
    from evokernel_mcp.verify.memory import LEAN_CHUNK

    return bar.max_abs_diff(r, a, chunk_elems=LEAN_CHUNK) if a is not None and a.shape == r.shape else float("inf")


def _leads_with_batch(native: Any, b: int) -> bool:
    """Whether every floating output leads with the batch (b rows), and there is one: the sample's condition on
    the full run's outputs, checked before the sample's forwards run."""
    from evokernel_mcp.verify.outputs import OutputError, flatten_outputs

    try:
        leaves = [leaf.tensor for leaf in flatten_outputs(native)]
    except OutputError:
        return False
    floating = [t for t in leaves if t.is_floating_point() or t.is_complex()]
    return bool(floating) and all(t.dim() >= 1 and t.shape[0] == b for t in floating)


def _ill_conditioned_paths(native: Any, ref_hi: Any) -> dict[str, float]:
    """{output path: E_torch / RMS} for the floating outputs whose native result differs from float64 by far
    more than rounding (bar.ill_conditioned)."""
    from evokernel_mcp.verify import bar
    from evokernel_mcp.verify.outputs import OutputError, flatten_outputs

    try:
        hi = {leaf.path: leaf.tensor for leaf in flatten_outputs(ref_hi)}
        leaves = flatten_outputs(native)
    except OutputError:
        return {}
    found = {}
    for leaf in leaves:
        t, h = leaf.tensor, hi.get(leaf.path)
        if h is None or tuple(h.shape) != tuple(t.shape) or not (t.is_floating_point() or t.is_complex()):
            continue
        err, rms = bar.float64_disagreement(h, t)
        if bar.ill_conditioned(err, rms, bar.preset_of(t.dtype)):
            found[leaf.path] = err / rms if rms > 0 else float("inf")
    return found


def _native_spread(model, inputs: list[Any], native: Any, rng, device: str, paths: set[str] | None) -> dict:
    """{output path: max |native - native again|} for floating outputs (all, or those in `paths`): the
    native reference run a second time on the same inputs with the same random state (its buffers put back
    after), so what differs is the reference's own nondeterminism."""

    from evokernel_mcp.verify import bar
    from evokernel_mcp.verify.outputs import OutputError, flatten_outputs

    with _buffers_kept(model):
        _set_rng_state(rng, device)
        again = _native_forward(model, inputs)
    try:
        first = flatten_outputs(native)
        second = {leaf.path: leaf.tensor for leaf in flatten_outputs(again)}
    except OutputError:
        return {}
    out = {}
    for leaf in first:
        t = leaf.tensor
        if (paths is None or leaf.path in paths) and (t.is_floating_point() or t.is_complex()):
            b = second.get(leaf.path)
            out[leaf.path] = bar.max_abs_diff(t, b) if b is not None and b.dtype == t.dtype else float("inf")
    return out


def reference_outputs(model, inputs: list[Any], hi: bool, device: str, why_not_hi: str | None = None, *,
                      room_bytes: int | None = None, hi_bytes: int = 0, hi_check=None, least_one: bool = False) -> dict:
    """The reference's outputs for one case: {native, hi, precision, spread, sampled, workspace_bytes}.

    precision: "float64"; "float64 and native run twice (...)" where the native output is ill-conditioned
    (then spread holds the native run-to-run spread of those outputs, and the candidate is held to both);
    "native (why)" where there is no float64 reference (then spread holds every floating output's).
    `why_not_hi`: the memory plan's reason when it left the float64 copy out (hi is then False); then, or when
    the float64 forward ran out of memory, PyTorch's own error is measured on a float64 sample of the batch
    where the model allows (sampled: {output path: error}; room_bytes: free bytes left by the plan,
    hi_bytes: the whole float64 copy's; least_one: at least one sample; hi_check: _outputs_why's)."""
    rng = _rng_state(device)
    native, ref_hi, why, work = _outputs_why(model, inputs, hi, device, hi_check)
    out = _reference_outputs(model, inputs, device, rng, native, ref_hi, why, why_not_hi, room_bytes, hi_bytes,
                             least_one)
    return out | {"workspace_bytes": work}


def _reference_outputs(model, inputs, device, rng, native, ref_hi, why, why_not_hi, room_bytes, hi_bytes,
                       least_one: bool = False) -> dict:
    """reference_outputs' answer but for the working memory, from the forwards already run."""
    if ref_hi is None and not (why or why_not_hi):  # no float64 asked for (benchmark's cases): native alone
        return {"native": native, "hi": None, "precision": "native", "spread": {}, "sampled": {}}
    if ref_hi is None:
        reason = why or why_not_hi
        sample = None
        if why_not_hi or why in (OUT_OF_DEVICE_MEMORY, OUT_OF_HOST_MEMORY) or why.startswith(DOES_NOT_FIT):
            sample = _sample_error(model, inputs, native, rng, device, None if why else room_bytes, hi_bytes,
                                   least_one)
        # short of memory: the run-to-run spread on the sample too (a second full forward is what did not fit)
        spread = sample[3] if sample is not None else _native_spread(model, inputs, native, rng, device, None)
        if sample is not None:
            reason += (f"; PyTorch's own error measured in float64, and its run-to-run spread, on the first "
                       f"{sample[1]} of {sample[2]} samples")
        precision = f"native ({reason})"
        return {"native": native, "hi": None, "precision": precision, "spread": spread,
                "sampled": sample[0] if sample is not None else {}}
    ill = _ill_conditioned_paths(native, ref_hi)
    if not ill:
        return {"native": native, "hi": ref_hi, "precision": "float64", "spread": {}, "sampled": {}}
    worst = max(ill.values())
    return {"native": native, "hi": ref_hi, "spread": _native_spread(model, inputs, native, rng, device, set(ill)),
            "sampled": {},
            "precision": f"float64 and native run twice (ill-conditioned: PyTorch's native output differs from "
                         f"float64 by {worst:.3g}x its RMS)"}
