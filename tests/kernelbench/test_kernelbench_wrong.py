"""Wrong outputs on the real level-1 files (sizes set by `overrides`): each must fail,
and the correct candidate next to it must pass, so the bar is neither too loose nor too tight."""

from __future__ import annotations

from kbkit import problem, same_code, summary, verify

ZEROS_SOFTMAX = '''
class ModelNew(Model):
    def forward(self, x):
        return torch.zeros_like(x)
'''
IDENTITY = '''
class ModelNew(Model):
    def forward(self, x):
        return x.clone()
'''
PARTIAL_CUMPROD = '''
class ModelNew(Model):
    def forward(self, x):
        out = torch.zeros_like(x)
        out[:, :32] = torch.cumprod(x[:, :32], dim=self.dim)
        return out
'''
EVAL_BATCHNORM = '''
class ModelNew(Model):
    def forward(self, x):
        return x / (1.0 + self.bn.eps) ** 0.5
'''
BATCH_STATS_BATCHNORM = '''
class ModelNew(Model):
    def forward(self, x):
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
        w, b = self.bn.weight.view(1, -1, 1, 1), self.bn.bias.view(1, -1, 1, 1)
        return (x - mean) / torch.sqrt(var + self.bn.eps) * w + b
'''


def test_all_zeros_softmax_fails_at_the_full_row_length():
    # 393216 columns as in the file: every output is ~2.5e-6, under the old fixed atol of 1e-4
    _, src = problem(23)
    ov = {"batch_size": 2}
    r = verify(src + ZEROS_SOFTMAX, src, overrides=ov, probe=False)
    assert r.passed is False and r.error is None, summary(r)
    c = r.cases[0]
    assert c.mismatches == c.numel == 2 * 393216 and c.reference == "float64" and "rms-floored" in c.bar
    assert r.overrides_applied == ov
    ok = verify(same_code(src), src, overrides=ov)
    assert ok.passed is True, summary(ok)


def test_identity_passes_relu_on_its_own_inputs_and_fails_the_signed_probe():
    _, src = problem(19)
    ov = {"batch_size": 4, "dim": 4096}
    r = verify(src + IDENTITY, src, overrides=ov, seeds=2)
    assert r.passed is False, summary(r)
    seeds, probes = [c for c in r.cases if not c.probe], [c for c in r.cases if c.probe]
    assert len(seeds) == 2 and all(c.passed for c in seeds), "torch.rand inputs are >= 0: identity == ReLU there"
    assert len(probes) == 1 and not probes[0].passed and probes[0].mismatches > 0
    assert "beyond the reference's own input distribution" in probes[0].note
    off = verify(src + IDENTITY, src, overrides=ov, probe=False)
    assert off.passed is True and not any(c.probe for c in off.cases), "probe=false leaves the probe case out"


def test_partial_cumprod_fails():
    _, src = problem(90)
    ov = {"batch_size": 4, "input_shape": (4096,)}
    r = verify(src + PARTIAL_CUMPROD, src, overrides=ov)
    assert r.passed is False, summary(r)
    ok = verify(same_code(src), src, overrides=ov)
    assert ok.passed is True, summary(ok)


def test_eval_mode_batchnorm_fails_and_batch_statistics_pass():
    # KernelBench never calls .eval(): BatchNorm2d normalises with the batch's own statistics
    _, src = problem(33)
    ov = {"batch_size": 4, "features": 8, "dim1": 32, "dim2": 32}
    bad = verify(src + EVAL_BATCHNORM, src, overrides=ov)
    assert bad.passed is False and bad.cases[0].mismatches > 0, summary(bad)
    good = verify(src + BATCH_STATS_BATCHNORM, src, overrides=ov)
    assert good.passed is True, summary(good)


def test_argmax_same_code_passes_and_a_shifted_index_fails():
    _, src = problem(51)
    ov = {"batch_size": 4, "dim1": 64, "dim2": 63}
    ok = verify(same_code(src), src, overrides=ov)
    assert ok.passed is True and "arg-reduction" in ok.cases[0].bar, summary(ok)
    shifted = src + ("\nclass ModelNew(Model):\n    def forward(self, x):\n"
                     "        return (super().forward(x) + 1) % x.shape[self.dim]\n")
    bad = verify(shifted, src, overrides=ov, probe=False)
    assert bad.passed is False and bad.cases[0].mismatches > 0, summary(bad)
