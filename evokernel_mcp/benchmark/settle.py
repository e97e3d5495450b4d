"""Checks on the calls being timed, run beside the candidate (inside its process), read by the runner.

- settled_check: when a call returns, is its output a plain tensor, and is its work done? A snapshot of the
  output taken right at return, in stream order on the current stream (a clone; a digest of a big output), is
  compared with the output after a full device synchronize and a short sleep. If they differ, work was still
  writing the output after the call returned: a kernel on a stream the call did not join back, or a background
  thread (the timed window missed that work) -> work_pending_at_return.
- OutputSampler: a seeded reservoir of a few timed repetitions' outputs (and the inputs they used), kept
  as clones for the runner to compare with the reference: a call that knows it is being timed (call-stack
  inspection, an nth-call switch, memoisation) is caught in the act, not only after timing.
- refill_inputs: copies new values into the rotating input storage between blocks (same addresses, new
  contents), so stale outputs, uninitialised outputs that happen to hold the last answer, and results
  cached by address stop matching.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

SETTLE_SLEEP_S = 0.05


def as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def not_plain(out: Any) -> str | None:
    """Why the output is not plain tensors (a torch.Tensor subclass, a lazy wrapper, a non-tensor), or None.
    nn.Parameter is not accepted either: an output is data, not a module's weight."""
    import torch

    for i, t in enumerate(as_list(out)):
        if type(t) is not torch.Tensor:
            return f"output {i} is a {type(t).__module__}.{type(t).__qualname__}, not a plain torch.Tensor"
    return None


def _snapshot(out: Any) -> list[Any]:
    import torch

    with torch.no_grad():
        return [t.detach().clone() for t in as_list(out)]


SAME_CHUNK_BYTES = 256 << 20  # _same compares this much at a time: its temporaries stay small beside a big output


def _same(a: Any, b: Any) -> bool:
    """Bit-for-bit the same values (NaN where NaN), compared a chunk at a time when both are contiguous."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_contiguous() and b.is_contiguous() and a.device == b.device:
        fa, fb = a.reshape(-1), b.reshape(-1)
        step = max(1, SAME_CHUNK_BYTES // max(1, a.element_size()))
        return all(_same_whole(fa[s:s + step], fb[s:s + step]) for s in range(0, fa.numel(), step))
    return _same_whole(a, b)


def _same_whole(a: Any, b: Any) -> bool:
    import torch

    if a.is_floating_point() or a.is_complex():
        return bool(torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))
                    and torch.equal(torch.isnan(a), torch.isnan(b)))
    return bool(torch.equal(a, b))


# an output above this is fingerprinted at return by a digest (verify/compare.digest: temporaries of one block)
# instead of a clone: the clone of a convolution's 1 GB output, beside the output and the comparison's chunks, was
# the peak of a 1 GB shape's benchmark on an H100 (54_conv_standard_3D: 3.1 GB in the candidate's process)
FINGERPRINT_CLONE_BYTES = 64 << 20


def _at_return(out: Any) -> list[Any]:
    """What settled_check compares the output with after the synchronize: a clone of each tensor, or for a big one
    its digest (two sums over its bits, enqueued on the current stream like the clone: the same moment's values)."""
    import torch

    from evokernel_mcp.verify.compare import digest

    with torch.no_grad():
        return [(t.shape, t.dtype, digest(t.detach())) if t.numel() * t.element_size() > FINGERPRINT_CLONE_BYTES
                else t.detach().clone() for t in as_list(out)]


def _unchanged(early: Any, late: Any) -> bool:
    if isinstance(early, tuple):
        from evokernel_mcp.verify.compare import digest

        shape, dtype, sums = early
        return late.shape == shape and late.dtype == dtype and digest(late.detach()) == sums
    return _same(early, late)


def settled_check(fn: Callable[..., Any], args: Sequence[Any], sync: Callable[[], None] | None = None,
                  sleep_s: float = SETTLE_SLEEP_S) -> dict[str, Any]:
    """One call of fn(*args), checked at return: {plain_tensor, pending, threads_started, detail}.

    `sync` waits for ALL device work (torch.cuda.synchronize on a GPU; None on the CPU path)."""
    import torch

    threads0 = {t.ident for t in threading.enumerate()}
    with torch.no_grad():
        out = fn(*args)
        why = not_plain(out)
        if why:
            return {"plain_tensor": False, "pending": None, "threads_started": None, "detail": why}
        early = _at_return(out)  # in stream order: sees only what the current stream has finished
    if sync:
        sync()
    time.sleep(sleep_s)
    if sync:
        sync()
    late = as_list(out)
    changed = [i for i, (a, b) in enumerate(zip(early, late)) if not _unchanged(a, b)]
    started = [t.name for t in threading.enumerate() if t.ident not in threads0 and t.is_alive()]
    detail = None
    if changed:
        detail = (f"output(s) {changed} changed after the call returned (snapshot at return vs after synchronize "
                  f"+ {sleep_s * 1e3:g} ms)" + (f"; threads started by the call still alive: {started[:5]}"
                                                if started else ""))
    return {"plain_tensor": True, "pending": bool(changed), "threads_started": started, "detail": detail}


class OutputSampler:
    """A seeded reservoir of `size` timed repetitions: offer() each candidate repetition (the LAST one of
    each block, so no later call in the same block can overwrite a reused output buffer); kept ones are
    cloned. samples: [{rep, input_set, inputs, outputs}] for the runner to check against the reference."""

    def __init__(self, size: int = 4, seed: int = 0) -> None:
        self.size, self.rng, self.seen = size, random.Random(seed), 0
        self.samples: list[dict[str, Any]] = []

    def offer(self, rep: int, input_set: int, inputs: Sequence[Any], out: Any) -> bool:
        self.seen += 1
        slot = len(self.samples) if len(self.samples) < self.size else self.rng.randrange(self.seen)
        if slot >= self.size:
            return False
        if slot < len(self.samples):  # the sample it replaces goes first: one sample's copies at a time, not two
            self.samples.pop(slot)
        item = {"rep": rep, "input_set": input_set, "inputs": _snapshot_any(inputs), "outputs": _snapshot(out)}
        self.samples.insert(slot, item)
        return True


def _snapshot_any(xs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in xs]


def clone_inputs(args: Sequence[Any]) -> list[Any]:
    """A copy of an input set (tensors cloned, other arguments as they are)."""
    import torch

    return [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]


def fill_set(args: Sequence[Any], src: Sequence[Any]) -> None:
    """Copy the input content `src` into the input set `args` in place (tensors of equal shape and dtype)."""
    import torch

    with torch.no_grad():
        for t, v in zip(args, src):
            if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape \
                    and t.dtype == v.dtype:
                t.copy_(v)


def refill_inputs(arg_sets: Sequence[Sequence[Any]], pool: Sequence[Sequence[Any]], block: int) -> int:
    """Copy new values into every rotating input set, in place (same storage and addresses): input set j
    takes pool[(block + j) % len(pool)]. The pool holds input sets the task's get_inputs made with other
    seeds (so values keep the task's structure: symmetric, triangular, index ranges). Only tensors of equal
    shape and dtype are refilled; other arguments stay. Returns the tensors refilled."""
    import torch

    n = 0
    if not pool:
        return 0
    with torch.no_grad():
        for j, args in enumerate(arg_sets):
            src = pool[(block + j) % len(pool)]
            for t, v in zip(args, src):
                if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.shape == v.shape \
                        and t.dtype == v.dtype:
                    t.copy_(v)
                    n += 1
    return n
