"""Candidates that check a harness on a KernelBench-style problem file (a `Model`, get_inputs,
get_init_inputs): the same code as `ModelNew` (must pass verify, and benchmark at ~1x) and a perturbed
copy (outputs * 1.01 + 1e-3 for floating outputs and Python floats, index + 1 for integer ones: must
fail). Used by bench/kernelbench_sweep.py and the KernelBench CI tests."""

from __future__ import annotations

PERTURB = '''
def _evk_perturb(o, given):
    if isinstance(o, torch.Tensor):
        if not o.is_floating_point():
            return o + 1
        if o.untyped_storage().data_ptr() in given:  # an input's or a parameter's storage: one new tensor
            return o.mul(1.01).add_(1e-3)
        return o.mul_(1.01).add_(1e-3)  # the forward's own output: in place, no second copy of it
    if isinstance(o, (tuple, list)):
        return type(o)(_evk_perturb(v, given) for v in o)
    return o * 1.01 + 1e-3 if isinstance(o, float) else o


class ModelNew(Model):
    def forward(self, *args, **kwargs):
        given = {t.untyped_storage().data_ptr() for t in [*args, *kwargs.values(), *self.parameters(),
                                                          *self.buffers()] if isinstance(t, torch.Tensor)}
        return _evk_perturb(super().forward(*args, **kwargs), given)
'''


def same_code(src: str) -> str:
    """The problem file with `class ModelNew(Model): pass` appended."""
    return src + "\nclass ModelNew(Model):\n    pass\n"


def perturbed(src: str) -> str:
    """The problem file with a ModelNew whose outputs are slightly off."""
    return src + PERTURB
