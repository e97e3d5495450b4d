"""The correctness bar (verify/bar.py) on the cases that once passed wrongly, reproduced on CPU at reduced size."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evokernel_mcp.verify.argjudge import judge_arg_reduction
from evokernel_mcp.verify.bar import DEFAULT_TOL, effective_tolerance, judge, preset_of
from evokernel_mcp.verify.probe import signed_probe_inputs


def _refs(fn, *inputs):
    """(native, float64) reference outputs of fn, as the reference process computes them."""
    native = fn(*inputs)
    hi = fn(*[x.double() if x.is_floating_point() else x for x in inputs])
    return native, hi


def _judge(out, native, hi, **kw):
    return judge(out, hi, native, dtype_preset=preset_of(native.dtype), **kw)


OPS = {
    "softmax": lambda x: torch.softmax(x, dim=1),
    "log_softmax": lambda x: torch.log_softmax(x, dim=1),
    "cumsum": lambda x: torch.cumsum(x, dim=1),
    "cumprod": lambda x: torch.cumprod(x, dim=1),
    "matmul": lambda x: x @ x.T,
    "layer_norm": lambda x: F.layer_norm(x, x.shape[1:]),
    "sum": lambda x: x.sum(dim=1),
    "gelu": F.gelu,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", sorted(OPS))
def test_native_reference_passes_itself_on_every_seed(op, dtype):
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.rand(32, 256, generator=g).to(dtype)
        for inputs in ([x], signed_probe_inputs([x], seed)):
            native, hi = _refs(OPS[op], *inputs)
            res = _judge(native, native, hi)
            assert res["passed"], (op, dtype, seed, res["bar"], res["mismatch_examples"])


def test_all_zeros_softmax_over_393216_columns_fails():
    x = torch.rand(1, 393216, generator=torch.Generator().manual_seed(0))
    native, hi = _refs(OPS["softmax"], x)
    assert float(hi.max()) < 1e-4  # every output is below the old fixed atol (1e-4): that bar passed zeros
    res = _judge(torch.zeros_like(native), native, hi)
    assert not res["passed"] and res["mismatches"] == native.numel()
    assert res["max_abs_err"] == pytest.approx(float(hi.max()))


def test_partial_cumprod_fails():
    x = torch.rand(4, 32768, generator=torch.Generator().manual_seed(1))
    native, hi = _refs(OPS["cumprod"], x)
    copies = native.clone()
    copies[:, 32:] = x[:, 32:]
    assert not _judge(copies, native, hi)["passed"]
    unwritten = torch.zeros_like(native, dtype=torch.bool)
    unwritten[:, 32:] = True  # left as allocated: poison survivors reported by the caller
    res = _judge(native.clone(), native, hi, unwritten=unwritten)
    assert not res["passed"] and res["unwritten_count"] == unwritten.sum()
    # zeros: on rand inputs the products underflow (< 1e-14 after 32 columns), so only the signed probe
    # (magnitudes that grow) tells zeros from the truth
    (xp,) = signed_probe_inputs([x], 7)
    native, hi = _refs(OPS["cumprod"], xp)
    assert _judge(native, native, hi)["passed"]
    zeros = native.clone()
    zeros[:, 32:] = 0
    res = _judge(zeros, native, hi)
    assert not res["passed"] and res["first_mismatch_index"][1] >= 32


@pytest.mark.parametrize("act", [torch.relu, lambda x: F.leaky_relu(x, 0.01), F.elu, F.hardtanh])
def test_identity_passes_activation_on_rand_but_fails_on_signed_probe(act):
    x = torch.rand(64, 1024, generator=torch.Generator().manual_seed(2))
    native, hi = _refs(act, x)
    assert _judge(x.clone(), native, hi)["passed"]  # why the probe exists: rand inputs are all >= 0
    (xp,) = signed_probe_inputs([x], 2)
    native, hi = _refs(act, xp)
    assert not _judge(xp.clone(), native, hi)["passed"]


def test_batchnorm_training_mode_rejects_eval_style_output():
    x = torch.rand(8, 16, 32, 32, generator=torch.Generator().manual_seed(3))
    bn = torch.nn.BatchNorm2d(16)  # KernelBench never calls .eval(): batch statistics
    native = bn(x).detach()
    hi = bn.double()(x.double()).detach()
    eval_style = x / (1 + bn.eps) ** 0.5
    assert not _judge(eval_style, native, hi)["passed"]
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    manual = (x - mean) / torch.sqrt(var + bn.eps)  # a correct candidate, another summation order
    assert _judge(manual, native, hi)["passed"]


def _gemm_sum(x, w):  # level2/14_Gemm_Divide_Sum_Scaling_ResidualAdd's math
    return (torch.matmul(x, w.T) / 2).sum(dim=1, keepdim=True) * 1.5


def _gemm_case(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(128, 2048, generator=g)
    w = torch.randn(2048, 2048, generator=g)
    w = 4.5 * (w - 0.995 * w.mean(dim=0))  # rows that nearly cancel: sums ~8 built from terms ~100
    return x, w


@pytest.mark.parametrize("seed", range(3))
def test_gemm_sums_with_torch_error_pass_thanks_to_the_floor(seed):
    x, w = _gemm_case(seed)
    native, hi = _refs(_gemm_sum, x, w)
    err = (native.double() - hi).abs()
    rms = float(hi.pow(2).mean().sqrt())
    assert 2 < float(hi.abs().mean()) < 64 and float(err.max()) > 1e-3  # magnitude ~8-30, torch error >1e-3
    bare = DEFAULT_TOL["fp32"] * (rms + hi.abs())
    assert (err > bare).any()  # without the floor PyTorch's own result would fail
    res = _judge(native, native, hi)
    assert res["passed"] and "floor=2x torch native error" in res["bar"]
    assert res["torch_max_abs_err"] == pytest.approx(float(err.max()))
    halves = _gemm_sum(x[:, :1024], w[:, :1024]) + _gemm_sum(x[:, 1024:], w[:, 1024:])  # another order
    assert _judge(halves, native, hi)["passed"]
    assert not _judge(native * 1.01, native, hi)["passed"]  # a 1% error is not rounding


def test_without_float64_reference_the_bar_says_so_and_doubles_tol():
    x = torch.rand(32, 256, generator=torch.Generator().manual_seed(4))
    native = torch.softmax(x, dim=1)
    res = judge(native, None, native, dtype_preset="fp32")
    assert res["passed"] and res["reference"] == "native"
    assert "native-dtype reference" in res["bar"] and res["torch_max_abs_err"] is None
    assert not judge(torch.zeros_like(native), None, native, dtype_preset="fp32")["passed"]
    rms = float(native.double().pow(2).mean().sqrt())
    off = native + 1.5 * DEFAULT_TOL["fp32"] * (rms + native.abs())  # inside 2x tol, outside 1x
    assert judge(off, None, native, dtype_preset="fp32")["passed"]
    assert not judge(off, native.double(), native, dtype_preset="fp32")["passed"]


def test_bar_string_names_dtype_and_tol():
    x = torch.rand(16, 64, generator=torch.Generator().manual_seed(5)).bfloat16()
    native, hi = _refs(OPS["softmax"], x)
    res = _judge(native, native, hi)
    assert res["bar"].startswith("rms-floored tol=1.6e-02 (bf16)") and res["tol"] == DEFAULT_TOL["bf16"]


def test_integer_and_bool_outputs_match_exactly():
    ref = torch.arange(100).reshape(10, 10)
    assert judge(ref.clone(), None, ref, dtype_preset="fp32")["passed"]
    bad = ref.clone()
    bad[3, 4] += 1
    res = judge(bad, None, ref, dtype_preset="fp32")
    assert not res["passed"] and res["mismatches"] == 1 and res["first_mismatch_index"] == [3, 4]
    assert res["max_abs_err"] == 1.0 and res["bar"].startswith("exact match")
    mask = ref % 3 == 0
    assert judge(mask.clone(), None, mask, dtype_preset="fp32")["passed"]
    assert judge(~mask, None, mask, dtype_preset="fp32")["mismatches"] == 100


def test_nan_and_inf_must_match_the_reference():
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    hi = ref.double()
    assert judge(ref.clone(), hi, ref, dtype_preset="fp32")["passed"]
    out = torch.tensor([float("nan"), 0.0, float("inf"), float("inf"), 2.0])
    res = judge(out, hi, ref, dtype_preset="fp32")
    assert res["mismatch_indices"] == [[0], [1], [3]] and res["nan_count"] == 1 and res["inf_count"] == 2


def test_native_overflow_where_float64_is_finite_passes_itself():
    x = torch.full((4, 200), 3.0)
    native, hi = _refs(OPS["cumprod"], x)  # 3**200 overflows fp32, not float64
    res = _judge(native, native, hi)
    assert res["passed"] and res["torch_overflow_count"] > 0
    assert not _judge(torch.zeros_like(native), native, hi)["passed"]


def test_chunked_results_equal_whole_and_noncontiguous():
    g = torch.Generator().manual_seed(6)
    native, hi = _refs(OPS["softmax"], torch.rand(48, 40, generator=g))
    out = native.clone()
    out[5, 7] += 1e-2
    out[30, 1] = float("nan")
    whole = _judge(out, native, hi)
    small = _judge(out, native, hi, chunk_elems=7)
    for key in ("passed", "mismatches", "mismatch_indices", "nan_count", "max_abs_err", "rel_l2_err"):
        assert whole[key] == pytest.approx(small[key]) if isinstance(whole[key], float) else whole[key] == small[key]
    assert whole["mismatch_indices"] == [[5, 7], [30, 1]]
    t = _judge(out.T.contiguous().T, native, hi, chunk_elems=5)  # non-contiguous views
    assert t["mismatch_indices"] == [[5, 7], [30, 1]]
    tr = _judge(out.T, native.T, hi.T, chunk_elems=3)
    assert tr["mismatch_indices"] == [[1, 30], [7, 5]]


def test_shape_mismatch_fails_without_judging():
    res = judge(torch.ones(3, 2), None, torch.ones(2, 3), dtype_preset="fp32")
    assert not res["passed"] and "shape" in res["note"]


def test_effective_tolerance_only_tightens():
    assert effective_tolerance("fp32", None) == (1e-4, False, "default tol for fp32")
    tol, custom, note = effective_tolerance("bf16", 1e-3)
    assert (tol, custom) == (1e-3, True) and "tighter" in note
    tol, custom, note = effective_tolerance("fp32", 0.5)
    assert (tol, custom) == (1e-4, False) and "capped" in note
    assert effective_tolerance("fp16", {"atol": 1e-4, "rtol": 5e-4})[0] == 5e-4
    for bad in (-1.0, float("nan"), {"x": 1}):
        with pytest.raises(ValueError):
            effective_tolerance("fp32", bad)
    with pytest.raises(ValueError, match="preset"):
        effective_tolerance("int8", None)


def test_looser_override_does_not_loosen_the_judgement():
    native, hi = _refs(OPS["softmax"], torch.rand(8, 64, generator=torch.Generator().manual_seed(8)))
    res = _judge(native * 1.01, native, hi, tol=0.5)
    assert not res["passed"] and "capped" in res["tol_note"]
    assert not _judge(native * (1 + 1e-5), native, hi, tol=1e-7)["passed"]  # a tighter one applies


def test_arg_reduction_accepts_ties_and_rejects_wrong_indices():
    values = torch.tensor([[1.0, 5.0, 5.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, -1.0, 3.0, 3.0]])
    ref = torch.argmax(values, dim=1)
    tie = torch.tensor([2, 3, 3])
    res = judge_arg_reduction(tie, ref, values, 1)
    assert res["passed"] and res["index_differences"] == 3
    wrong = torch.tensor([0, 1, 2])
    res = judge_arg_reduction(wrong, ref, values, 1)
    assert not res["passed"] and res["mismatches"] == 1 and res["first_mismatch_index"] == [0]
    out_of_range = torch.tensor([1, 9, -1])
    res = judge_arg_reduction(out_of_range, ref, values, 1)
    assert not res["passed"] and res["out_of_range_count"] == 2


def test_arg_reduction_keepdim_dim0_and_flattened():
    values = torch.rand(5, 6, generator=torch.Generator().manual_seed(9))
    ref = torch.argmin(values, dim=0, keepdim=True)
    assert judge_arg_reduction(ref.clone(), ref, values, 0)["passed"]
    assert not judge_arg_reduction((ref + 1) % 5, ref, values, 0)["passed"]
    flat = torch.argmax(values)
    assert judge_arg_reduction(flat.clone(), flat, values, None)["passed"]
    assert not judge_arg_reduction(flat - 1, flat, values, None)["passed"]
    assert not judge_arg_reduction(ref.float(), ref, values, 0)["passed"]
