"""A spec task's input draws, kept in the reference process between cases and jobs.

Drawing a spec task's inputs happens on the host (so a seed gives the same numbers on every device) and is
slow for big inputs: the flagship's [1,512,61,45,80] bf16 input took 0.7-0.8 s a draw on the H200's host,
and every candidate's verify and benchmark asked for the same eight (shape set, seed) pairs again: about
6 of a candidate's 10 s. The draw is a pure function of the task's input specs, the shape set and the seed
(candidate.spec_draws), so the reference process, which serves one reference source for many jobs, keeps
what it drew where it uses it (on its device: a copy there is a device-to-device clone, where a host copy
moved 225 MB over PCIe for every case) and hands out copies: least recently used first out, within a byte
budget (DEFAULT_MB, 4096; never more than an eighth of the free memory where they are
kept). A case that does not fit empties the cache first (verify/sides.py).

Only spec tasks: a KernelBench get_inputs is the reference's own code (it may keep state) and draws on the
device, where it is fast. Copies, never the kept tensors: a reference that writes into its inputs must not
change the next case's.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

DEFAULT_MB = 4096


def budget_bytes(free: int) -> int:
    """The cache's byte budget: DEFAULT_MB, never more than an eighth of `free` (the memory still free where
    the draws are kept)."""
    return max(0, min(DEFAULT_MB << 20, free // 8))


def key(task: Any, shape: str, seed: int, device: str = "cpu") -> str:
    """What the draw depends on: the input specs, the shape set's dims and input shapes, the seed (and where
    the tensors are kept)."""
    ss = task.shape_set(shape)
    blob = json.dumps({"inputs": [s.model_dump(mode="json") for s in task.inputs], "dims": ss.dims,
                       "shapes": ss.input_shapes, "seed": int(seed), "device": device}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _nbytes(raw: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in raw if hasattr(t, "element_size"))


class DrawCache:
    """key -> the tensors drawn for it, where the process uses them (LRU within a byte budget); hits and
    misses counted (tests read them)."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, list[Any]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def get(self, k: str, draw: Callable[[], list[Any]], budget: int) -> tuple[list[Any], bool]:
        """(the draw for k, whether it is kept): the kept one, else draw(), kept when it fits the budget. The
        caller copies a kept draw before use, and only a kept one (a big case's memory plan counts no copy)."""
        raw = self._items.get(k)
        if raw is not None:
            self._items.move_to_end(k)
            self.hits += 1
            return raw, True
        self.misses += 1
        raw = draw()
        size = _nbytes(raw)
        if size > budget:
            return raw, False
        while self._items and self.bytes + size > budget:
            _, old = self._items.popitem(last=False)
            self.bytes -= _nbytes(old)
        self._items[k] = raw
        self.bytes += size
        return raw, True

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0


CACHE = DrawCache()


def inputs(task: Any, shape: str, seed: int, device: str, free_bytes: Callable[[], int]) -> list[Any]:
    """A spec task's inputs for (shape, seed) on `device`, from the kept draw when there is one; a kept draw is
    handed out as copies. free_bytes: the memory still free where the draws are kept (the device's, or the
    host's)."""
    import torch

    from evokernel_mcp import candidate as cand

    def draw() -> list[Any]:
        return [t.to(device) if isinstance(t, torch.Tensor) else t for t in cand.spec_draws(task, shape, seed)]

    raw, kept = CACHE.get(key(task, shape, seed, device), draw, budget_bytes(free_bytes()))
    return [t.clone() if kept and isinstance(t, torch.Tensor) else t for t in raw]
