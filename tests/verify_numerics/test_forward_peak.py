"""verify/forward_peak.py: the peak bytes of the tensors a forward makes, counted on meta tensors (the floor of
what PyTorch's own forward needs beside its inputs)."""

from __future__ import annotations

import torch

from evokernel_mcp.verify.forward_peak import forward_peak_bytes

N = 1 << 20  # float32 elements: 4 MiB a tensor


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _peak(fn, *shapes) -> int | None:
    with torch.device("meta"):
        xs = [torch.empty(s) for s in shapes]
    return forward_peak_bytes(_Fn(fn), xs)


def test_a_loss_holds_its_difference_and_its_square_at_once():
    # (a - b) and its square at once; (a - b) is gone before the mean is made
    assert _peak(lambda a, b: torch.mean((a - b) ** 2), (N,), (N,)) == 2 * 4 * N


def test_temporaries_freed_along_the_way_do_not_add_up():
    def chain(x):
        for _ in range(5):
            x = x * 2  # each step's input goes as the next is made: two at once, never five
        return x
    assert _peak(chain, (N,)) == 2 * 4 * N


def test_views_and_in_place_ops_on_the_inputs_make_nothing():
    assert _peak(lambda x: x.view(-1, 4).t().relu_(), (N,)) == 0
    assert _peak(lambda x: x.reshape(2, -1)[0], (N,)) == 0


def test_a_forward_that_cannot_run_on_meta_says_so():
    assert _peak(lambda x: x * float(x.sum().item()), (N,)) is None


def test_the_model_is_left_as_it_was():
    lin = torch.nn.Linear(64, 32)
    w = lin.weight.detach().clone()
    with torch.device("meta"):
        x = torch.empty(128, 64)
    assert forward_peak_bytes(lin, [x]) == 128 * 32 * 4
    assert lin.weight.device.type == "cpu" and torch.equal(lin.weight, w)
