"""Device memory pressure: the float64 reference falls back to the native one when its forward runs out
of device memory (a float64 convolution's workspace), and cached reference processes of other sources
are stopped when under half the device is free (seen on the H200 in the KernelBench sweep)."""

from __future__ import annotations

from collections import OrderedDict

import torch

from evokernel_mcp.runtime import spares


class _OomInFloat64(torch.nn.Module):
    def forward(self, x):
        if x.dtype == torch.float64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return x * 2


def test_float64_forward_out_of_memory_falls_back_to_the_native_reference_with_a_note():
    from evokernel_mcp.verify.refout import reference_outputs

    out = reference_outputs(_OomInFloat64(), [torch.ones(4)], True, "cpu")
    assert torch.equal(out["native"], torch.full((4,), 2.0)) and out["hi"] is None
    assert out["precision"].startswith("native (") and "ran out of device memory" in out["precision"]
    out = reference_outputs(torch.nn.Identity(), [torch.ones(4)], True, "cpu")
    assert out["hi"].dtype == torch.float64 and out["precision"] == "float64"


class _FakeChild:
    def __init__(self):
        self.discarded = False

    def discard(self):
        self.discarded = True


def _pool_with_refs(monkeypatch, free_gib: float):
    pool = spares.Spares.__new__(spares.Spares)
    pool.device = "cuda:0"
    a, b = _FakeChild(), _FakeChild()
    pool._refs = OrderedDict([("other", a), ("mine", b)])
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a, **k: (int(free_gib * 2**30), 140 * 2**30))
    return pool, a, b


def test_other_sources_reference_processes_are_stopped_only_when_the_device_is_tight(monkeypatch):
    pool, other, mine = _pool_with_refs(monkeypatch, free_gib=100)
    pool._evict_others_if_tight("mine")
    assert list(pool._refs) == ["other", "mine"] and not other.discarded
    pool, other, mine = _pool_with_refs(monkeypatch, free_gib=40)
    pool._evict_others_if_tight("mine")
    assert list(pool._refs) == ["mine"] and other.discarded and not mine.discarded
