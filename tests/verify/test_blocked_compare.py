"""The runner's comparisons of whole outputs (verify/compare.py bitwise_equal and unwritten_mask) work in flat
blocks: no boolean index (an int64 index of ndim x the selected elements: 32 bytes per element of a 4-d output)
and no temporary the size of the output, only of a block. Checked by recording the size of every tensor the
aten ops make (TorchDispatchMode), on a 4-d output several blocks long."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from evokernel_mcp.verify.compare import SENTINEL, bitwise_equal, unwritten_mask  # noqa: E402

BLOCK = 1000


class _Biggest(TorchDispatchMode):
    """The largest tensor any op made (bytes) and the ops called."""

    def __init__(self):
        super().__init__()
        self.biggest, self.ops = 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func.overloadpacket))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.inputs:
                self.biggest = max(self.biggest, t.numel() * t.element_size())
        return out


def _watch(*tensors):
    mode = _Biggest()
    mode.inputs = {t.untyped_storage().data_ptr() for t in tensors}
    return mode


def test_masked_bitwise_equality_is_right_and_never_makes_an_index_or_an_output_sized_temporary():
    a = torch.randn(4, 3, 20, 50)  # 12000 elements, 12 blocks
    b = a.clone()
    written = torch.ones(a.shape, dtype=torch.bool)
    b[3, 2, 19, 49] = 7.0
    written[3, 2, 19, 49] = False
    with _watch(a, b, written) as mode:
        assert bitwise_equal(a, b, written, block_elems=BLOCK) is True  # the differing element is not written
    assert "aten.nonzero" not in mode.ops and "aten.index" not in mode.ops, mode.ops
    assert mode.biggest <= BLOCK * 4, f"a temporary of {mode.biggest} bytes: more than a block's"
    written[3, 2, 19, 49] = True
    assert bitwise_equal(a, b, written, block_elems=BLOCK) is False
    nan = torch.full((2, 3), float("nan"))
    assert bitwise_equal(nan, nan.clone()) is True, "the same NaN bits are equal"
    assert bitwise_equal(torch.zeros(3), -torch.zeros(3)) is False, "0.0 and -0.0 differ in their bits"
    assert bitwise_equal(torch.arange(6), torch.arange(6)) and not bitwise_equal(torch.arange(6), torch.arange(6) + 1)
    assert bitwise_equal(a, b.double()) is False and bitwise_equal(a, b[:1]) is False


def test_unwritten_mask_finds_the_poison_left_in_both_runs_block_by_block():
    a = torch.randn(3, 4, 25, 40)
    b = a.clone()
    a[1, 2, 3, 4], b[1, 2, 3, 4] = float("nan"), SENTINEL  # never written: the poison of each run
    a[2, 0, 0, 0] = float("nan")  # NaN in run A only: the candidate wrote a NaN, not the poison
    with _watch(a, b) as mode:
        m = unwritten_mask(a, b, block_elems=BLOCK)
    assert m.shape == a.shape and m.dtype == torch.bool
    assert m.sum() == 1 and bool(m[1, 2, 3, 4])
    assert mode.biggest <= a.numel(), "only the bool mask itself is the output's size"
    z = torch.complex(a, torch.zeros_like(a)), torch.complex(b, torch.zeros_like(b))
    assert unwritten_mask(*z).sum() == 1
