"""Op "benchmark", inside the device's worker: time the candidate and the baseline per shape set with our
loop (timing.py), then check the timed callable's output against the reference again.

Returns RAW times only; the statistics, speedup, roofline and flags are computed in the server
(api.py), out of the candidate's reach. The order per shape set: fresh inputs (never zeros), clones
for every use (the reference never sees an input the candidate touched), candidate timing, baseline
timing, then two checks with verify's comparison (verify_compare.compare): a call on the last timed
input set's own storage refilled with new values (catches results cached by tensor address), and a
fresh call on fresh inputs (another seed). If the activity clock worked for one series and not the
other, both are timed with events, so a speedup never compares two clocks.
"""

from __future__ import annotations

import copy
import dataclasses
import platform
import traceback
from typing import Any

from evokernel_mcp.benchmark import timing  # binds the host timer at import, before any candidate loads
from evokernel_mcp.runtime import protocol
from evokernel_mcp.tasks import Task

CHECK_SEED_OFFSET = 7919
REFILL_SEED_OFFSET = 104729


def _clone(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _nbytes(inputs: list[Any]) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    if not torch.cuda.is_available():
        return {**info, "backend": "none", "name": f"cpu ({platform.machine()})", "arch": None}
    p = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    arch = (getattr(p, "gcnArchName", "") or "").split(":")[0] if hip else f"sm_{p.major}{p.minor}"
    return {**info, "backend": "rocm" if hip else "cuda", "name": p.name, "arch": arch,
            "hip": hip, "cuda": torch.version.cuda, "l2_bytes": int(getattr(p, "L2_cache_size", 0) or 0)}


def _ceilings(payload: dict[str, Any], progress) -> dict[str, Any] | None:
    import torch

    if not payload.get("ceilings", True) or not torch.cuda.is_available():
        return None  # the CPU path has no device roofline: host timings are not compared to ceilings
    from evokernel_mcp.benchmark.ceilings import ensure

    try:
        return ensure(refresh=False, progress=progress).model_dump(mode="json")
    except Exception as e:  # noqa: BLE001 - ceilings are an extra: never fail the benchmark for them
        if protocol.classify_text(f"{type(e).__name__}: {e}"):
            raise
        return {"error": f"{type(e).__name__}: {e}"}


def _check(fn, ref_model, inputs: list[Any], out: Any, task: Task) -> dict[str, Any]:
    """Compare out (fn's output on `inputs`) with the float64 reference on pristine clones of `inputs`."""
    import torch

    from evokernel_mcp.verify.case import _upcast, tolerance_for
    from evokernel_mcp.verify.compare import as_tensors, compare, merge

    with torch.no_grad():
        ref64 = as_tensors(copy.deepcopy(ref_model).double()(*_upcast(_clone(inputs))))
        native = as_tensors(ref_model(*_clone(inputs)))
    got = as_tensors(out)
    if len(got) != len(ref64):
        return {"passed": False, "note": f"candidate returned {len(got)} tensors, the reference {len(ref64)}"}
    atol, rtol = tolerance_for(task, str(native[0].dtype).removeprefix("torch."), None)
    parts = [compare(g, r, g, atol, rtol) for g, r in zip(got, ref64)]
    m = merge(parts)
    return {k: m.get(k) for k in ("passed", "max_abs_err", "rel_l2_err", "mismatches", "nan_count", "note")}


def _refill(targets: list[Any], values: list[Any]) -> list[Any]:
    """Copy new values into the existing input tensors (same storage, same addresses); returns the inputs
    the refilled set now holds (non-tensor arguments stay as they were)."""
    import torch

    now = []
    with torch.no_grad():
        for t, v in zip(targets, values):
            same = isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape
            if same:
                t.copy_(v)
            now.append(v.clone() if same else t)
    return now


def _timed(fn, arg_sets, opt, gpu: bool, flusher, progress_fn):
    import torch

    with torch.no_grad():
        if gpu:
            return timing.time_device(fn, arg_sets, opt, progress=progress_fn, flusher=flusher)
        return timing.time_host(fn, arg_sets, opt, progress=progress_fn)


def _bench_shape(ctx: dict[str, Any], shape: str, step: int, total: int) -> dict[str, Any]:
    import torch

    from evokernel_mcp import candidate as cand

    task, seed, dev, gpu, opt = ctx["task"], ctx["seed"], ctx["device"], ctx["gpu"], ctx["opt"]
    inputs = cand.make_inputs(task, shape, seed, dev, ctx["ref_mod"])
    ref_model = cand.build_reference(task, ctx["ref_mod"], seed, dev)
    fn = cand.build_candidate(ctx["cand_mod"], task, ctx["ref_mod"], ref_model, seed, dev)
    base = ref_model if ctx["base_mod"] is None else cand.build_candidate(
        ctx["base_mod"], task, ctx["ref_mod"], ref_model, seed, dev)
    k = 1
    if gpu and opt.cold_cache:
        free = torch.cuda.mem_get_info()[0]
        k = timing.copies_for(_nbytes(inputs), ctx["cache_bytes"], free)
    arg_sets = [_clone(inputs) for _ in range(k)]

    def prog(label: str, i: int):
        return lambda frac, msg: ctx["progress"](step + i + frac, total, f"{shape} {label}: {msg}")

    out: dict[str, Any] = {"shape": shape, "input_bytes": _nbytes(inputs)}
    out["candidate"] = _timed(fn, arg_sets, opt, gpu, ctx["flusher"], prog("candidate", 0)).to_dict()
    # the output of a timed call on the SAME input storage refilled with new values: a callable that caches
    # its result by tensor address (or otherwise skips work on inputs it has seen) fails here
    j = (len(out["candidate"]["times_ms"]) - 1) % k
    refill = cand.make_inputs(task, shape, seed + REFILL_SEED_OFFSET, dev, ctx["ref_mod"])
    refill = _refill(arg_sets[j], refill)
    with torch.no_grad():
        last = fn(*arg_sets[j])
    out["check_timed"] = _check(fn, ref_model, refill, last, task)
    del arg_sets, last
    base_sets = [_clone(inputs) for _ in range(k)]
    out["baseline"] = _timed(base, base_sets, opt, gpu, ctx["flusher"], prog("baseline", 1)).to_dict()
    used = {out["candidate"].get("timer"), out["baseline"].get("timer")}
    if len(used) > 1:  # one series fell back to events: time both with events, so the speedup compares like
        ev = dataclasses.replace(opt, timer="events")
        note = {"timers_unified": f"candidate {out['candidate'].get('timer')}, baseline "
                f"{out['baseline'].get('timer')}: both re-timed with events"}
        if out["candidate"].get("timer") != "events":
            c_sets = [_clone(inputs) for _ in range(k)]
            out["candidate"] = _timed(fn, c_sets, ev, gpu, ctx["flusher"], prog("candidate", 0)).to_dict()
            del c_sets
        else:
            out["baseline"] = _timed(base, base_sets, ev, gpu, ctx["flusher"], prog("baseline", 1)).to_dict()
        out["candidate"]["extra"].update(note)
        out["baseline"]["extra"].update(note)
    del base_sets
    fresh = cand.make_inputs(task, shape, seed + CHECK_SEED_OFFSET, dev, ctx["ref_mod"])
    with torch.no_grad():
        fresh_out = fn(*_clone(fresh))
    out["check_fresh"] = _check(fn, ref_model, fresh, fresh_out, task)
    out["output_dtype"] = str(_first_tensor(fresh_out).dtype).removeprefix("torch.")
    if gpu:
        torch.cuda.synchronize()
    return out


def _first_tensor(out: Any):
    return out if not isinstance(out, (list, tuple)) else out[0]


def worker_benchmark(payload: dict[str, Any], progress) -> dict[str, Any]:
    """Op "benchmark". payload: task (Task dict), candidate, baseline ('pytorch' or source), shapes,
    options (TimingOptions fields), seed, ceilings (bool). Returns raw times per shape and checks."""
    import torch

    from evokernel_mcp import candidate as cand
    from evokernel_mcp.benchmark.clocks import read_clocks

    gpu = torch.cuda.is_available()
    if gpu:
        timing._bind_event_api()
        prime = timing.prepare_activity_clock()  # before the reference or candidate code is loaded
    info = device_info()
    if gpu:
        info["activity_profiler"] = prime or "ok"
    task = Task(**payload["task"])
    shapes = list(payload["shapes"])
    result: dict[str, Any] = {"device_info": info, "shapes": [], "clocks_before": None, "clocks_after": None}
    result["ceilings"] = _ceilings(payload, progress)
    ref_mod = cand.load_module(task.reference_source, "reference", ".")
    try:
        cand_mod = cand.load_candidate_module(payload["candidate"], ".")
        base_src = payload.get("baseline", "pytorch")
        base_mod = None if base_src == "pytorch" else _load_baseline(cand, base_src)
    except cand.CandidateError as e:
        result["error"] = {"kind": "bad_candidate", "message": str(e), "detail": _tb(e)}
        return result
    opt = timing.TimingOptions(**payload["options"])
    ctx = {"task": task, "seed": int(payload.get("seed", 0)), "device": "cuda" if gpu else "cpu", "gpu": gpu,
           "opt": opt, "ref_mod": ref_mod, "cand_mod": cand_mod, "base_mod": base_mod, "progress": progress,
           "flusher": None, "cache_bytes": 0}
    if gpu:
        l2, mall, _ = timing.cache_bytes(0)
        ctx["cache_bytes"] = l2 + mall
        ctx["flusher"] = timing.CacheFlusher(0) if opt.cold_cache else None
    result["clocks_before"] = _clocks(read_clocks, info)
    total = 2 * len(shapes)
    for i, shape in enumerate(shapes):
        try:
            result["shapes"].append(_bench_shape(ctx, shape, 2 * i, total))
        except cand.CandidateError as e:
            result["error"] = {"kind": "bad_candidate", "message": str(e), "detail": _tb(e), "shape": shape}
            break
        except Exception as e:  # noqa: BLE001
            if protocol.classify_text(f"{type(e).__name__}: {e}"):
                raise  # CUDA/HIP error or OOM: the worker is replaced (runtime/worker.py)
            result["error"] = {"kind": "exception", "message": f"{type(e).__name__}: {e}"[:2000],
                               "detail": _tb(e), "shape": shape}
            break
    result["clocks_after"] = _clocks(read_clocks, info)
    ctx["flusher"] = None
    progress(total, total, "benchmark done")
    return result


def _load_baseline(cand, source: str):
    """A second candidate as the baseline; its load errors are reported as such."""
    import tempfile

    try:
        return cand.load_candidate_module(source, tempfile.mkdtemp(prefix="baseline_", dir="."))
    except cand.CandidateError as e:
        raise cand.CandidateError(f"baseline: {e}") from e


def _clocks(read_clocks, info: dict[str, Any]) -> dict[str, Any] | None:
    c = read_clocks(info["backend"], 0) if info["backend"] in ("cuda", "rocm") else None
    return c.model_dump() if c is not None else None


def _tb(e: BaseException) -> str:
    return protocol.tail("".join(traceback.format_exception(type(e), e, e.__traceback__)), 4000)
