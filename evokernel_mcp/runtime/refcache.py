"""The cache of reference processes, one per reference source (a mixin of spares.Spares): the child that has
loaded a reference source is kept for the next job of that source, at most REF_CACHE of them, least recently used
dropped; a benchmark's baseline arm is a fresh one, never cached."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from evokernel_mcp.runtime.child_proc import Child, ChildFailed, note

Purpose = Literal["verify", "bench", "any"]
REF_CACHE = 2
TIGHT_FREE_FRACTION = 0.5  # below this free fraction of the device, other sources' reference processes go


class RefCache:
    """Needs of the class it is mixed into: device, _refs (an OrderedDict), take(purpose) and _free_memory()."""

    def reference(self, task, *, timeout_s: float) -> Child:
        """The child holding this task's reference source (loaded now if needed)."""
        key = hashlib.sha256(json.dumps([task.reference_source, task.name], sort_keys=True).encode()).hexdigest()
        self._evict_others_if_tight(key)
        child = self._refs.get(key)
        if child is not None and not child.dead and child.proc.poll() is None:
            self._refs.move_to_end(key)
            return child
        if child is not None:
            self.drop_reference(child)
        child = self.fresh_reference(task, timeout_s=timeout_s, purpose="verify")
        child.source_key = key
        self._refs[key] = child
        while len(self._refs) > REF_CACHE:
            _, old = self._refs.popitem(last=False)
            old.discard()
        return child

    def fresh_reference(self, task, *, timeout_s: float, purpose: Purpose = "bench") -> Child:
        """A fresh child with this task's reference loaded, for one job only (never cached): a timed arm
        (the PyTorch baseline, its control copy) runs in a process built exactly like the candidate's, so
        that the two differ only in the code they run (a long-lived process's allocation history, its
        other models and buffers, shift its kernels' times by tenths of a percent and more)."""
        child = self.take(purpose)
        try:
            child.request({"op": "load", "role": "reference", "task": task.model_dump()}, timeout_s=timeout_s,
                          max_bytes=1 << 20)
        except ChildFailed as e:
            child.discard()
            raise e.again("harness" if e.kind in ("exception", "bad_candidate") else e.kind,
                          f"the reference failed to load: {e.message}") from e
        return child

    def trim_references(self) -> list[str]:
        """Cached reference processes count against a host-memory budget (limits.ref_cache_bytes): after a
        job, the least recently used go until the rest fit; what went, for the job's events."""
        from evokernel_mcp.runtime import limits

        budget = limits.ref_cache_bytes()
        if budget is None or not self._refs:
            return []
        sizes = {k: limits.tree_rss(c.proc.pid) for k, c in self._refs.items()}
        gone = []
        for k in list(self._refs):
            if sum(sizes.values()) <= budget:
                break
            c = self._refs.pop(k)
            gone.append(f"cached reference process {c.proc.pid} ({sizes.pop(k) / 2**20:.0f} MiB resident) stopped: "
                        f"the cache is over its budget of {limits.gib(budget)}")
            c.discard()
        for g in gone:
            note("%s", g)
        return gone

    def _evict_others_if_tight(self, key: str) -> None:
        """Cached reference processes of other sources hold device memory (context, weights, what their
        allocator kept): when under half the device is free, they go before this job starts."""
        if self.device == "cpu" or not any(k != key for k in self._refs):
            return
        mem = self._free_memory()
        if mem is None or mem[0] >= mem[1] * TIGHT_FREE_FRACTION:  # (no device view here: keep the cache)
            return
        free, total = mem
        for k, c in list(self._refs.items()):
            if k != key:
                del self._refs[k]
                c.discard()
        note("device %.0f of %.0f GiB free: cached reference processes of other sources stopped",
              free / 2**30, total / 2**30)

    def drop_reference(self, child: Child) -> None:
        for k, c in list(self._refs.items()):
            if c is child:
                del self._refs[k]
        child.discard()
