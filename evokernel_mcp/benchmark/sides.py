"""The halves of benchmark that run INSIDE sandboxed children (runtime/child.py), where the kernels
launch. An "arm" is one callable timed block by block (blocks.BlockTimer, timing.py bound at the child's
start, before any agent code loaded), one arm per fresh child: the candidate, the baseline (the PyTorch
reference loaded afresh, or a baseline source) and, on request, the control (the baseline again). The
runner interleaves the arms' blocks (interleave.py) and checks what they report. Times are
raw: statistics, speedup and the verdict are computed in the runner and the server."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.benchmark import flush, settle, timing
from evokernel_mcp.verify.cand_side import candidate_fn
from evokernel_mcp.verify.sides import _model, _plain, _sync, _to

CPU_COPIES = 4


def _clone(inputs: list[Any]) -> list[Any]:
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _nbytes(inputs: list[Any]) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))


def _callable(loaded, req: dict[str, Any]):
    if loaded.role == "reference":
        return _model(loaded, int(req["seed"]))
    return candidate_fn(loaded, req)


def arm_init(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Set up arm req['name']: copies of req['inputs'] (enough rotating sets to defeat the caches), the
    refill pool (input sets of other seeds, copied into the same storage between blocks), warm-up by time."""
    import torch

    from evokernel_mcp.benchmark.blocks import BlockTimer

    gpu = loaded.device != "cpu"
    fn = _callable(loaded, req)
    inputs = _to(req["inputs"], loaded.device)
    opt = timing.TimingOptions(**req["options"])
    k, flusher = (1 if gpu else CPU_COPIES), None  # host: a few rotating copies average out placement effects
    copies_note = None
    if gpu and opt.cold_cache:
        l2, mall, _ = flush.cache_bytes(0)
        free = torch.cuda.mem_get_info()[0]
        k, want = flush.copies_for(_nbytes(inputs), l2 + mall, free), flush.copies_for(_nbytes(inputs), l2 + mall)
        if k < want:
            copies_note = (f"{k} timed input set(s) rotated instead of {want}: device memory is short "
                           f"({free / 1e9:.1f} GB free, {_nbytes(inputs) / 1e9:.2f} GB per set)")
        flusher = flush.CacheFlusher(0, flush.lean_flush_bytes(l2, mall) if req.get("lean") else None)
    pool = loaded.__dict__["bench_pool"] = [_to(p, loaded.device) for p in req.get("refill_pool") or []]
    arms = loaded.__dict__.setdefault("arms", {})
    sets = [inputs] + [_clone(inputs) for _ in range(k - 1)]  # the received inputs are this arm's own
    timer = arms[req["name"]] = BlockTimer(fn, sets, opt, gpu=gpu, refill_pool=pool if not opt.use_graph else [],
                                           sample_size=int(req.get("sample_size", 2)), seed=int(req["seed"]),
                                           flusher=flusher, probe_table=req.get("probe_table"),
                                           probe_chunks=req.get("probe_chunks"))
    if gpu and opt.use_graph:  # replay captured graphs (launch-bound callables): the graph owns its buffers
        timer.calls = timing._make_graphs(fn, sets)
    warm = timer.warm_up()
    overhead = None
    if gpu and opt.timer == "events" and opt.subtract_overhead:
        overhead = timing.event_overhead_ms(flusher, timer.api, 50)
    _sync(loaded.device)
    timer.lean = bool(req.get("lean")) and gpu
    timer.give_back()  # a lean arm waits for its first block beside the others holding its inputs only
    if req.get("park"):  # ... or holding nothing: its data waits on the host while the next arm sets up
        timer.park()
    return {"copies": k, "warmup_calls": warm, "flush_bytes": flusher.nbytes if flusher else None,
            "event_overhead_ms": overhead, "graph": bool(gpu and opt.use_graph), "copies_note": copies_note,
            "host_enqueue_s": timer.host_enqueue_s}


def arm_ready(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """A lean arm (a big shape: arms.interleave) before its block, off the runner's clock around it:
    one untimed call makes again the allocations its last block gave back (blocks.BlockTimer.ready)."""
    loaded.arms[req["name"]].ready()
    return {}


def arm_park(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """A lean arm whose turn has passed, where the arms do not fit the device together: its input sets and
    refill pool wait in host memory until its next arm_ready (blocks.BlockTimer.park)."""
    loaded.arms[req["name"]].park()
    return {}


def arm_block(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """Time k repetitions of arm req['name'] (GPU: behind a GPU sleep of req['cushion_ms'] when given):
    {times (ms), first_rep, probes ([k, width] float64 tensor of the outputs at the runner's positions and
    their chunk sums, or None)}. With req['defer']: run them to completion and answer {ran: k} at once; the
    times follow on "arm_times" (the runner's clock around the block stops at this answer)."""
    timer = loaded.arms[req["name"]]
    cushion = req.get("cushion_ms")
    timer.run_block(int(req["k"]), float(cushion) if cushion is not None else None)
    if req.get("defer"):
        return {"ran": int(req["k"])}
    return arm_times(loaded, req)


def arm_times(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The times of the block just run (arm_block): {times, first_rep, probes}."""
    timer = loaded.arms[req["name"]]
    first = timer.rep
    times = timer.finish_block()
    rows = timer.block_probes  # plain numbers: a tensor in a reply costs a shared-memory transfer per block
    rows = rows.tolist() if rows is not None else None
    timer.give_back()  # a lean arm: the next arm's block runs beside its inputs alone
    return {"times": times, "first_rep": first, "probes": rows}


def arm_report(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The arm's marks, clock and sampled timed repetitions (inputs + outputs, for the runner to check). The
    samples go with the reply: the arm keeps no copy of them (their device memory is back once they are sent)."""
    timer = loaded.arms[req["name"]]
    rep = timer.report()
    sampler = getattr(timer, "sampler", None)
    if sampler is not None:
        sampler.samples = []
    if not req.get("samples", True):
        rep["samples"] = []
    else:
        rep["samples"] = [{"rep": s["rep"], "inputs": s["inputs"], "outputs": _plain_list(s["outputs"])}
                          for s in rep["samples"]]
    return rep


def _plain_list(outs: Any) -> Any:
    return [_plain(o) for o in outs] if isinstance(outs, list) else _plain(outs)


def arm_close(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The arm's input sets, pool and outputs go now: a timer refers to itself through its calls (a cycle that
    only the collector frees), and the checks that follow need the device memory, the allocator's cache included:
    a check's inputs arrive in an allocation of their own (courier.py), which no cached block serves (inferred, not
    measured: on an H100 a reduction's baseline arm, answering for the reference after timing, read 16.4 GiB for
    8 GiB of inputs)."""
    import gc

    from evokernel_mcp.runtime.devmem import release_cached

    arms = loaded.__dict__.get("arms", {})
    timer = arms.pop(req["name"], None)
    if timer is not None:
        timer.calls, timer.arg_sets, timer.pool, timer.contents, timer.last = [], [], [], [], None
    if not arms:
        loaded.__dict__.pop("bench_pool", None)
    if loaded.role == "reference":  # its timed model goes too: a reference's expected outputs after timing
        loaded.models.clear()  # (benchmark/room.hand_over) come from the seed's model built afresh, as a cached one's
    timer = None
    gc.collect()
    release_cached()
    return {}


def cand_settled(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """One call checked at return: is the output a plain tensor, is its work (or a thread's) done?"""
    import torch

    sync = torch.cuda.synchronize if loaded.device != "cpu" else None
    return settle.settled_check(candidate_fn(loaded, req), _to(req["inputs"], loaded.device), sync)


def _refill_in_place(target: list[Any], values: list[Any]) -> None:
    """Each tensor of `target` (an arm's timed input set) given the values of its counterpart in `values`, where the
    shapes match, one tensor at a time, each value let go once copied: values in host memory (the runner sends a big
    shape's that way) are copied straight into the storage, with no second device copy of the set beside it."""
    import torch

    for i in range(min(len(target), len(values))):
        t, v, values[i] = target[i], values[i], None
        if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape:
            t.copy_(v)
        v = None  # (its device memory, where it came that way, back before the next tensor's)


def cand_checks(loaded, req: dict[str, Any]) -> dict[str, Any]:
    """The candidate's outputs (1) on the storage of its last timed input set, refilled in place with
    req['refill'] (a callable that caches by tensor address fails here) and/or (2) on req['fresh'],
    fresh inputs (the runner sends one at a time: device memory)."""
    import torch

    fn = _callable(loaded, req)
    reply: dict[str, Any] = {}
    with torch.no_grad():
        if "refill" in req:
            values, req["refill"] = list(req["refill"]), None
            timer = loaded.__dict__.get("arms", {}).get("candidate")
            if timer is not None:  # a parked arm's timed storage back on the device first
                timer.unpark()
                target = timer.arg_sets[(max(timer.rep, 1) - 1) % len(timer.arg_sets)]
                _refill_in_place(target, values)
            else:
                target = _to(values, loaded.device)
            values = None
            reply["refill"] = _plain(fn(*target))
            _sync(loaded.device)
        if "fresh" in req:
            reply["fresh"] = _plain(fn(*_to(req["fresh"], loaded.device)))
            _sync(loaded.device)
    last = reply.get("fresh", reply.get("refill"))
    first = last[0] if isinstance(last, (list, tuple)) else last
    reply["output_dtype"] = str(first.dtype).removeprefix("torch.") if isinstance(first, torch.Tensor) else None
    return reply
