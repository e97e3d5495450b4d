"""The peak bytes of the tensors a forward makes, from one forward on meta tensors (no data, no device).

PyTorch's own forward needs its inputs, its outputs and its temporaries at once: `torch.mean((a - b) ** 2)`
holds `a - b` and its square together, twice its inputs' bytes beyond them. A harness that runs the reference
at all cannot hold less than that in the reference's process, so it is the floor against which the harness's
own overhead is read (bench/kernelbench_sweep.py: peak_over_floor).

Counted: every tensor an aten op returns while the forward runs, by storage (a view adds nothing), from its
creation until its last Python reference is gone, on top of the inputs and parameters the forward was given.
Not seen: what one op holds inside itself and gives back before it returns (cuDNN/cuBLAS workspaces, a fused
loss's elementwise terms: smooth_l1_loss on meta makes only its scalar) and the allocator's rounding. So the
figure is a lower bound of what the forward needs on a device.
"""

from __future__ import annotations

import weakref
from typing import Any


def forward_peak_bytes(model: Any, inputs: list[Any]) -> int | None:
    """Peak bytes of the tensors `model(*inputs)` makes (outputs included), run on meta copies of its inputs,
    parameters and buffers (the model is not modified); None where the forward cannot run on meta."""
    import itertools

    import torch
    from torch.func import functional_call
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def meta(x: Any) -> Any:
        return x.to("meta") if isinstance(x, torch.Tensor) else x

    class _Peak(TorchDispatchMode):
        def __init__(self, given: set[int]) -> None:
            super().__init__()
            self.given, self.refs, self.live, self.peak = given, {}, 0, 0

        def _gone(self, key: int, nbytes: int) -> None:
            self.refs[key] -= 1
            if not self.refs[key]:
                del self.refs[key]
                self.live -= nbytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key, nbytes = storage._cdata, storage.nbytes()
                if key in self.given:  # an input's or a parameter's storage (in place, or a view of it)
                    continue
                if key not in self.refs:
                    self.refs[key] = 0
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
                self.refs[key] += 1
                weakref.finalize(t, self._gone, key, nbytes)
            return out

    try:
        state = {k: meta(v) for k, v in itertools.chain(model.named_parameters(), model.named_buffers())}
        args = tuple(meta(x) for x in inputs)
        given = {t.untyped_storage()._cdata for t in [*state.values(), *args] if isinstance(t, torch.Tensor)}
        mode = _Peak(given)
        with torch.no_grad(), mode:
            out = functional_call(model, state, args)
        del out
        return int(mode.peak)
    except Exception:  # noqa: BLE001 - data-dependent shapes, .item(), explicit devices: meta cannot tell
        return None
