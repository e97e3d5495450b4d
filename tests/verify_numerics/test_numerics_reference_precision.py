"""What the float64 reference is and when it is used: a forward that makes its own float32 tensors, one that
cannot run in float64 (judged against the native reference, and saying so), an ill-conditioned model (also held
to the native reference run twice), a float64 copy that does not fit the memory plan; and the margin and
error-vs-PyTorch figures of each case. In-process on the CPU (tests/verify_numerics/refcase.py)."""

from __future__ import annotations

import weakref

import pytest
import torch
from refcase import run_case, same_and_perturbed

from evokernel_mcp.kb_candidates import same_code
from evokernel_mcp.verify import bar, memory, refout, refplan, sides

HEAD = "import torch\nimport torch.nn as nn\n"
TAIL = '''
def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return [32, 16]
'''

MADE_IN_FORWARD = HEAD + '''
class Model(nn.Module):
    """An LSTM-like initial state kept as a plain attribute, and a tensor made in forward (float32 both)."""
    def __init__(self, n, h):
        super().__init__()
        self.lin = nn.Linear(n, h)
        self.h0 = torch.randn(1, h)

    def forward(self, x):
        pad = torch.zeros(x.shape[0], 4)
        return torch.cat([torch.tanh(self.lin(x) + self.h0), pad], dim=1)
''' + TAIL

NO_FLOAT64 = HEAD + '''
class Model(nn.Module):
    """Casts to float32 inside forward: the float64 copy mixes dtypes and fails."""
    def __init__(self, n, h):
        super().__init__()
        self.lin = nn.Linear(n, h)

    def forward(self, x):
        return torch.relu(self.lin(x.to(torch.float32))) * 2.0 - 1.0
''' + TAIL

ILL_CONDITIONED = HEAD + '''
class Model(nn.Module):
    """Batch normalisation of features that ride on a large offset: float32 keeps a few bits of them, so its
    output differs from float64's by more than the output's own scale."""
    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(x * 1e-3 + 1e5)

def get_inputs():
    return [torch.randn(4, 3, 8, 8)]

def get_init_inputs():
    return [3]
'''


def test_a_forward_that_makes_float32_tensors_still_gets_a_float64_reference(tmp_path):
    same, pert = same_and_perturbed(MADE_IN_FORWARD, tmp_path, "made")
    assert same["reference_precision"] == "float64" and same["reference"] == "float64", same["note"]
    assert same["passed"] is True and pert["passed"] is False and pert["mismatches"] > 0


def test_a_forward_that_fails_in_float64_is_judged_against_the_native_reference_and_says_so(tmp_path):
    same, pert = same_and_perturbed(NO_FLOAT64, tmp_path, "nof64")
    assert same["reference_precision"].startswith("native (float64 forward failed: RuntimeError"), same
    assert "float64 reference left out" in same["note"] and same["reference"] == "native"
    assert same["passed"] is True and same["native_spread_abs_err"] == 0.0 and same["margin"] == 0.0
    assert same["error_vs_pytorch"] is None  # no float64: PyTorch's own error is unknown
    assert pert["passed"] is False and pert["mismatches"] > 0 and pert["margin"] > 1


def test_the_native_forward_failing_is_still_a_harness_error(tmp_path):
    broken = NO_FLOAT64.replace("return torch.relu", "raise ValueError('boom')\n        return torch.relu")
    with pytest.raises(sides.HarnessError, match="boom"):
        run_case(broken, same_code(broken), tmp_path, tag="broken")


def test_an_ill_conditioned_model_holds_the_candidate_to_the_native_reference_too(tmp_path):
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 1e-3 + 1e5
    bn = torch.nn.BatchNorm2d(3)
    native, hi = bn(x).detach(), bn.double()(x.double()).detach()
    err, rms = bar.float64_disagreement(hi, native)
    assert err > rms and bar.ill_conditioned(err, rms, "fp32"), "float32 is off by more than the output's scale"
    loose = bar.judge(native * 1.01 + 1e-2, hi, native, dtype_preset="fp32")
    assert loose["passed"] is True, "the float64 bar alone: its floor (2x PyTorch's error) admits a 1% change"

    same, pert = same_and_perturbed(ILL_CONDITIONED, tmp_path, "ill")
    assert same["reference_precision"].startswith("float64 and native run twice (ill-conditioned"), same
    assert same["passed"] is True and same["native_spread_abs_err"] == 0.0 and "ill-conditioned" in same["note"]
    assert pert["passed"] is False and pert["mismatches"] > 0 and pert["margin"] > 1


def test_well_conditioned_outputs_are_not_called_ill_conditioned():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    for fn in (lambda t: t @ t.T, lambda t: torch.softmax(t, 1), lambda t: t.cumsum(1), lambda t: t.sum(1)):
        err, rms = bar.float64_disagreement(fn(x.double()), fn(x))
        assert not bar.ill_conditioned(err, rms, "fp32"), (err, rms)


def test_margin_and_error_vs_pytorch_tell_comfortable_from_close():
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(2))
    native, hi = x @ x.T, x.double() @ x.double().T
    same = bar.judge(native.clone(), hi, native, dtype_preset="fp32")
    assert same["passed"] and same["margin"] < 1 and same["error_vs_pytorch"] == pytest.approx(1.0)
    rms = float(hi.pow(2).mean().sqrt())
    nudged = native + 0.5 * bar.DEFAULT_TOL["fp32"] * rms  # half the bar's absolute part: passes, less comfortably
    close = bar.judge(nudged, hi, native, dtype_preset="fp32")
    assert close["passed"] and same["margin"] < close["margin"] < 1 and close["error_vs_pytorch"] > 1
    far = bar.judge(native * 1.01, hi, native, dtype_preset="fp32")
    assert not far["passed"] and far["margin"] > 1
    exact = bar.judge(hi.clone(), hi, native, dtype_preset="fp32")
    assert exact["passed"] and exact["error_vs_pytorch"] == 0.0


def test_cases_carry_margin_and_error_vs_pytorch(tmp_path):
    same = run_case(MADE_IN_FORWARD, same_code(MADE_IN_FORWARD), tmp_path, tag="margin")
    assert same["passed"] and 0 <= same["margin"] < 1 and same["error_vs_pytorch"] <= 1.0 + 1e-9


def test_a_float64_copy_that_does_not_fit_the_plan_falls_back_to_the_native_reference(tmp_path, monkeypatch):
    x = torch.empty(8, 32)
    est = memory.estimate_case(memory.specs_of([x]), memory.specs_of([torch.empty(8, 20)]), ref_hi=True, clones=4)
    workspace = memory.JUDGE_ARRAYS * 8 * memory.MIN_CHUNK
    free = int((est.base_bytes + workspace + est.ref_hi_bytes // 2) / memory.HEADROOM)  # without float64 only
    monkeypatch.setattr(refplan, "_host_free", lambda: free)
    same, pert = same_and_perturbed(NO_FLOAT64.replace("x.to(torch.float32)", "x"), tmp_path, "tight")
    assert same["reference_precision"].startswith("native (the float64 copy does not fit"), same
    assert same["passed"] is True and same["reference"] == "native"
    assert pert["passed"] is False and pert["reference_precision"] == same["reference_precision"]


ROWWISE = HEAD + '''
class Model(nn.Module):
    """Row-wise sums that nearly cancel: PyTorch's float32 error is above the fp32 tolerance."""
    def __init__(self, n, h):
        super().__init__()
        self.lin = nn.Linear(n, h)

    def forward(self, x):
        y = self.lin(x) * 10 + 1e6
        return (y - 1e6).sum(dim=1, keepdim=True)
''' + TAIL.replace("torch.randn(8, 32)", "torch.randn(16, 32)")


def _tight(monkeypatch, n_in: int, n_out: int, fraction: float) -> None:
    """Free host memory for the plan: everything but the float64 copy, plus `fraction` of that copy."""
    est = memory.estimate_case(memory.specs_of([torch.empty(n_in)]), memory.specs_of([torch.empty(n_out)]),
                               ref_hi=True, clones=4)
    workspace = memory.JUDGE_ARRAYS * 8 * memory.MIN_CHUNK
    free = int((est.base_bytes + workspace + fraction * est.ref_hi_bytes) / memory.HEADROOM)
    monkeypatch.setattr(refplan, "_host_free", lambda: free)


def test_without_room_for_float64_pytorchs_error_is_measured_on_a_sample_of_the_batch(tmp_path, monkeypatch):
    _tight(monkeypatch, 16 * 32, 16, 0.5)
    same, pert = same_and_perturbed(ROWWISE, tmp_path, "rows")
    assert ("PyTorch's own error measured in float64, and its run-to-run spread, on the first 4 of 16 samples"
            in same["reference_precision"])
    assert same["passed"] is True and same["torch_max_abs_err"] > 0 and "float64 sample" in same["bar"]
    assert pert["passed"] is False
    accurate = ROWWISE + """
class ModelNew(Model):
    def forward(self, x):
        return self.lin(x).sum(dim=1, keepdim=True) * 10
"""
    better = run_case(ROWWISE, accurate, tmp_path, tag="rows_acc")
    assert better["passed"] is True and better["torch_max_abs_err"] > 0
    monkeypatch.setattr(refout, "_sample_error", lambda *a, **k: None)
    unsampled = run_case(ROWWISE, accurate, tmp_path, tag="rows_acc2")
    assert unsampled["passed"] is False, "more accurate than PyTorch: it passes only through the sampled floor"


def test_short_of_memory_the_run_to_run_spread_comes_from_the_sample_not_a_second_full_forward():
    """A case without room for the float64 copy has none for a second full forward either (its outputs and
    working memory: max pooling's indices are twice its output): the spread is measured on the sample's rows,
    run twice; a model that cannot be sampled still gets its spread from the full forward run again."""

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.batches = torch.nn.Linear(32, 16), []

        def forward(self, x, *_rest):
            self.batches.append(x.shape[0])
            return self.lin(x)

    m = Counting()
    out = refout.reference_outputs(m, [torch.randn(16, 32)], False, "cpu",
                                   why_not_hi=f"{refout.DOES_NOT_FIT}: 9 GB", room_bytes=10**9, hi_bytes=10**6)
    assert m.batches == [16, 4, 4], "one full forward, the sample's rows twice (the float64 one on a copy)"
    assert out["spread"] == {"out": 0.0} and out["sampled"]["out"] > 0
    assert "run-to-run spread, on the first 4 of 16 samples" in out["precision"]
    m.batches.clear()
    coupled = refout.reference_outputs(m, [torch.randn(16, 32), torch.randn(3)], False, "cpu",
                                       why_not_hi=f"{refout.DOES_NOT_FIT}: 9 GB", room_bytes=10**9, hi_bytes=10**6)
    assert m.batches == [16, 16] and coupled["spread"] == {"out": 0.0} and "samples" not in coupled["precision"]


def test_the_samples_comparisons_run_in_lean_blocks(monkeypatch):
    """A sample is taken where memory is short; in the judge's default blocks its float64 arrays took 1.3 GiB for one
    sample of 54_conv_standard_3D (61 MB of rows) on an H100, more than the forwards: every comparison of the sample
    runs in memory.LEAN_CHUNK blocks."""
    chunks = []

    def spy(fn):
        def wrapped(*a, **k):
            chunks.append((fn.__name__, k.get("chunk_elems")))
            return fn(*a, **k)
        return wrapped
    for name in ("judge", "float64_disagreement", "max_abs_diff"):
        monkeypatch.setattr(bar, name, spy(getattr(bar, name)))
    out = refout.reference_outputs(torch.nn.Linear(32, 16), [torch.randn(16, 32)], False, "cpu",
                                   why_not_hi=f"{refout.DOES_NOT_FIT}: 9 GB", room_bytes=10**9, hi_bytes=10**6)
    assert out["sampled"] and sorted(chunks) == [("float64_disagreement", memory.LEAN_CHUNK),
                                                 ("judge", memory.LEAN_CHUNK), ("max_abs_diff", memory.LEAN_CHUNK)]


def test_the_samples_native_rows_are_gone_before_its_float64_forward():
    """The sample's three forwards run one at a time: its native rows and their second run are compared and let go
    before the float64 forward (all three held together took 54_conv_standard_3D's reference process on an H100 to
    twice the sample's float64 bytes, over its memory cap); the full run's outputs stay, as the judge needs them."""
    made: list = []
    alive_at_float64: list = []

    class Rows(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(32, 16)

        def forward(self, x):
            if x.dtype == torch.float64:
                alive_at_float64.append([r() is not None for r in made])
            y = self.lin(x)
            made.append(weakref.ref(y))
            return y

    out = refout.reference_outputs(Rows(), [torch.randn(16, 32)], False, "cpu",
                                   why_not_hi=f"{refout.DOES_NOT_FIT}: 9 GB", room_bytes=10**9, hi_bytes=10**6)
    assert out["sampled"]["out"] > 0 and out["spread"] == {"out": 0.0}
    assert alive_at_float64 == [[True, False, False]], "full run kept; the sample's native rows and rerun let go"


def test_a_loss_whose_output_does_not_lead_with_the_batch_runs_no_sample_forwards():
    """The sample needs every floating output to lead with the batch; a loss's scalar does not, and that is known
    from the full run's output: no forward runs on a slice of the batch, in float64 or not (on an H100 these held
    96_HuberLoss's reference at 27 GiB for 8 GiB of inputs, for a sample then thrown away)."""

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.batches = []

        def forward(self, a, b):
            self.batches.append((a.shape[0], a.dtype))
            return torch.nn.functional.smooth_l1_loss(a, b)

    m = Loss()
    out = refout.reference_outputs(m, [torch.randn(16, 32), torch.randn(16, 32)], False, "cpu",
                                   why_not_hi=f"{refout.DOES_NOT_FIT}: 9 GB", room_bytes=10**9, hi_bytes=10**6)
    assert m.batches == [(16, torch.float32)] * 2, "the full forward and its run-to-run spread, nothing on a slice"
    assert out["sampled"] == {} and "samples" not in out["precision"]


def test_a_batch_coupled_model_gets_no_float64_sample(tmp_path, monkeypatch):
    _tight(monkeypatch, 4 * 3 * 8 * 8, 4 * 3 * 8 * 8, 0.5)
    same = run_case(ILL_CONDITIONED, same_code(ILL_CONDITIONED), tmp_path, tag="coupled")
    assert same["reference_precision"].startswith("native (the float64 copy does not fit")
    assert "samples" not in same["reference_precision"] and same["passed"] is True


class _HostOomInFloat64(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 16)

    def forward(self, x):
        if x.dtype == torch.float64 and x.shape[0] > 2:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
        return self.lin(x)


def test_float64_out_of_host_memory_falls_back_and_samples_the_batch():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    ref = refout.reference_outputs(_HostOomInFloat64(), [x], True, "cpu")
    assert ref["hi"] is None and ref["precision"].startswith("native (float64 forward ran out of host memory")
    assert "first 2 of 16 samples" in ref["precision"] and ref["sampled"]["out"] > 0


HALF_GEMM = '''import torch
class Model(torch.nn.Module):
    def forward(self, a, b):
        return (a @ b).float()
def get_inputs():
    return [torch.randn(64, 256).to(torch.bfloat16), torch.randn(256, 64).to(torch.bfloat16)]
def get_init_inputs():
    return []
'''


def test_a_candidate_more_accurate_than_a_narrow_dtype_reference_passes(tmp_path):
    """A model that computes in a narrower dtype and returns fp32 (a bf16 GEMM, .float()) differs from float64 by
    its rounding, not by its scale: not ill-conditioned, so an fp32-accumulating candidate is not held to the
    reference's rounding; a 1 % perturbation still fails."""
    better = "import torch\ndef run(a, b):\n    return a.float() @ b.float()\n"
    case = run_case(HALF_GEMM, better, tmp_path, tag="better")
    assert case["passed"], case
    assert "ill-conditioned" not in (case.get("reference_precision") or "")
    same, pert = same_and_perturbed(HALF_GEMM, tmp_path, "half")
    assert same["passed"] and not pert["passed"]


def test_within_a_memory_cap_the_float64_sample_fits_what_the_cap_leaves_and_is_never_none():
    """A job within its memory cap sizes its float64 sample from what the cap leaves, not from the free device (a
    quarter of a 1 GB convolution's batch in float64 took its reference process to 3 GB on an H100), and takes at
    least one sample where the cap leaves nothing: the spread then comes from that sample run twice, not from a second
    full forward. Without a cap, no room still means no sample."""
    from evokernel_mcp.verify.memory import Plan
    from evokernel_mcp.verify.refplan import _sample_room

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.batches = torch.nn.Linear(32, 16), []

        def forward(self, x):
            self.batches.append(x.shape[0])
            return self.lin(x)

    capped = Plan(ref_hi=False, chunk_elems=1, where="device", needed_bytes=4 << 30, budget_bytes=70 << 30,
                  ref_hi_bytes=2 << 30, pristine=False, cap_bytes=1 << 30)
    room = _sample_room(capped)
    assert room == {"room_bytes": -(3 << 30), "hi_bytes": 2 << 30, "least_one": True}
    free = _sample_room(capped.model_copy(update={"cap_bytes": None}))
    assert free["room_bytes"] == 66 << 30 and free["least_one"] is False, "no cap: the free device sizes it"
    why = f"{refout.DOES_NOT_FIT}: 4 GB"
    m = Counting()
    out = refout.reference_outputs(m, [torch.randn(16, 32)], False, "cpu", why_not_hi=why, **room)
    assert m.batches == [16, 1, 1] and "on the first 1 of 16 samples" in out["precision"]
    m.batches.clear()
    refout.reference_outputs(m, [torch.randn(16, 32)], False, "cpu", why_not_hi=why,
                             **{**room, "least_one": False})
    assert m.batches == [16, 16], "no room and no cap: no sample, the full forward again for the spread"


def test_the_reference_outputs_of_a_check_wait_on_the_host_only_where_a_device_copy_passes_the_cap():
    """devplan.outputs_on_host: a 1 GB convolution (50 MB in, 980 MB out) keeps them on the host; a 13 GB activation
    (half inputs, half outputs) and a matmul of 1 GB of inputs and small outputs fit their cap with the device copy;
    a job of at most 1 GB has no cap; the forward's working memory (the reference's number: anything but an int
    counts as none) counts beside the copies. Where the candidate's reply arrives beside the device copy (verify),
    its export counts too: a tall-skinny matmul's 4 GiB of outputs and a 1.6 GB transposed convolution's 1 GiB go to
    the host there, not in the benchmark's checks."""
    from evokernel_mcp.runtime.devplan import outputs_on_host

    mb = 1 << 20
    assert outputs_on_host(50 * mb, 980 * mb, 3.0)
    assert not outputs_on_host(6440 * mb, 6440 * mb, 3.0)
    assert not outputs_on_host(6440 * mb, 6440 * mb, 3.0, reply_beside=True)
    assert not outputs_on_host(1020 * mb, 4 * mb, 3.0)
    assert not outputs_on_host(100 * mb, 800 * mb, 3.0) and not outputs_on_host(50 * mb, 980 * mb, 0.0)
    assert not outputs_on_host(8 * mb, 4096 * mb, 3.0) and outputs_on_host(8 * mb, 4096 * mb, 3.0, reply_beside=True)
    # a transposed convolution of 1.6 GB: its two output copies fit, not with its forward's 1 GB of working memory
    assert not outputs_on_host(512 * mb, 1050 * mb, 3.0) and outputs_on_host(512 * mb, 1050 * mb, 3.0, 1 << 30)
    assert outputs_on_host(512 * mb, 1050 * mb, 3.0, reply_beside=True)
    assert not outputs_on_host(512 * mb, 1050 * mb, 3.0, "1e12") and not outputs_on_host(512 * mb, 1050 * mb, 3.0, True)
    # an 8 GiB reduction with small outputs, the export beside: its forward's 20 GiB of working memory count, not 4
    assert not outputs_on_host(8192 * mb, 64 * mb, 3.0, 4 << 30, reply_beside=True)
    assert outputs_on_host(8192 * mb, 64 * mb, 3.0, 20 << 30, reply_beside=True)


def test_a_capped_verify_hands_its_inputs_over_from_the_host_only_where_two_device_copies_pass_the_cap():
    """devplan.inputs_from_host: a matmul of 1 GiB of inputs and small outputs (6_Matmul_with_large_K) goes through
    the host; a reduction's 8 GiB keep the device path (two copies are 2.2x its bytes); a job of at most 1 GB has no
    cap, nor one with the factor 0."""
    from evokernel_mcp.runtime.devplan import inputs_from_host

    mb = 1 << 20
    assert inputs_from_host(1024 * mb, 1, 3.0)
    assert not inputs_from_host(8192 * mb, 2 * mb, 3.0)
    assert not inputs_from_host(900 * mb, 1, 3.0) and not inputs_from_host(1024 * mb, 1, 0.0)
