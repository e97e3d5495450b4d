"""The signed probe: signed, larger inputs of the same shape/dtype; everything else unchanged."""

from __future__ import annotations

import torch

from evokernel_mcp.verify.probe import PROBE_SCALE, signed_probe_inputs


def test_floating_inputs_become_signed_and_larger():
    x = torch.rand(256, 64)
    (p,) = signed_probe_inputs([x], seed=0)
    assert p.shape == x.shape and p.dtype == x.dtype and p.device == x.device
    assert float(p.min()) < -1 and float(p.max()) > 1
    assert float(p.std()) > 0.8 * PROBE_SCALE and float(x.abs().max()) < 1


def test_deterministic_in_seed_and_distinct_across_inputs_and_seeds():
    xs = [torch.rand(8, 8), torch.rand(8, 8)]
    a, b = signed_probe_inputs(xs, seed=3), signed_probe_inputs(xs, seed=3)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], a[1])
    assert not torch.equal(a[0], signed_probe_inputs(xs, seed=4)[0])


def test_non_floating_and_python_values_are_unchanged():
    idx, mask = torch.arange(5), torch.ones(5, dtype=torch.bool)
    out = signed_probe_inputs([idx, mask, 3, 0.5, "mean"], seed=1)
    assert out[0] is idx and out[1] is mask and out[2:] == [3, 0.5, "mean"]


def test_low_precision_and_nested_inputs():
    nested = [(torch.rand(4, 4).bfloat16(), torch.rand(4).half()), torch.rand(3, dtype=torch.float64)]
    pair, d = signed_probe_inputs(nested, seed=2)
    assert isinstance(pair, tuple)
    assert [t.dtype for t in pair] == [torch.bfloat16, torch.float16] and d.dtype == torch.float64
    assert float(pair[0].float().min()) < 0
    fp8 = torch.rand(16).to(torch.float8_e4m3fn)
    (q,) = signed_probe_inputs([fp8], seed=2)
    assert q.dtype == torch.float8_e4m3fn and float(q.float().min()) < 0


def test_a_case_replacing_its_inputs_lets_each_go_before_its_probe_is_drawn(monkeypatch):
    """The reference's probe case (verify/sides.py) gives its freshly made inputs up: each floating one is gone
    before its probe is drawn (one copy of a big input on the device, not two), with the values of
    signed_probe_inputs; non-floating inputs stay the same objects."""
    import gc
    import weakref

    from evokernel_mcp.verify import probe

    xs = [torch.rand(64, 64), torch.arange(5), (torch.rand(4).half(),), torch.rand(8, dtype=torch.float64)]
    want = signed_probe_inputs(xs, seed=5)
    idx = xs[1]
    alive = []
    refs = [weakref.ref(xs[0]), None, None, weakref.ref(xs[3])]
    draw = probe._draw

    def watched(*a, **kw):
        gc.collect()
        alive.append([r() is not None for r in refs if r is not None])
        return draw(*a, **kw)

    monkeypatch.setattr(probe, "_draw", watched)
    got = probe.signed_probe_inputs_replacing(xs, seed=5)
    assert got is xs and got[1] is idx
    assert alive[0] == [False, True] and alive[-1] == [False, False], "each input gone before its probe is drawn"
    assert torch.equal(got[0], want[0]) and torch.equal(got[2][0], want[2][0]) and torch.equal(got[3], want[3])
