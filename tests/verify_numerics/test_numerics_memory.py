"""Case memory estimates, plans and refusals, and shapes from meta tensors."""

from __future__ import annotations

import torch

from evokernel_mcp.verify.memory import (
    JUDGE_ARRAYS,
    MIN_CHUNK,
    OUTPUT_COPIES,
    TensorSpec,
    bounded_output_specs,
    estimate_case,
    estimate_case_bytes,
    meta_input_specs,
    meta_output_specs,
    plan_case,
    small_bound_plan,
    specs_of,
)

GB = 10**9


def _spec(shape, dtype="float32"):
    return TensorSpec(shape=list(shape), dtype=dtype)


def test_estimate_counts_each_part():
    ins = [_spec((1000, 1000)), _spec((1000,), "int64")]        # 4 MB + 8 kB
    outs = [_spec((1000, 1000), "bfloat16"), _spec((10,), "bool")]  # 2 MB + 10 B
    est = estimate_case(ins, outs, ref_hi=True, clones=2)
    assert est.input_bytes == 4_008_000 and est.clone_bytes == 2 * 4_008_000
    assert est.output_bytes == OUTPUT_COPIES * 2_000_010
    assert est.ref_hi_bytes == 8_000_000 + 8_000_000 + 10  # float64 copies of floating tensors only
    assert estimate_case_bytes(ins, outs, ref_hi=True, clones=2) == est.total_bytes
    assert estimate_case_bytes(ins, outs, ref_hi=False, clones=2) == est.base_bytes


def test_plan_keeps_float64_when_it_fits_and_drops_it_when_not():
    est = estimate_case([_spec((10**6,))], [_spec((10**6,))], ref_hi=True, clones=2)
    assert est.base_bytes == 24 * 10**6 and est.ref_hi_bytes == 16 * 10**6
    roomy = plan_case(est, free_device=100 * GB, free_host=10 * GB)
    assert roomy.ref_hi and roomy.refuse is None and roomy.where == "device"
    workspace = JUDGE_ARRAYS * 8 * 2**16
    tight = plan_case(est, free_device=None, free_host=int((est.base_bytes + workspace) / 0.9) + 10,
                      chunk_elems=2**16)
    assert not tight.ref_hi and tight.refuse is None and tight.where == "host"


def test_plan_shrinks_blocks_before_refusing():
    est = estimate_case([_spec((10**6,))], [_spec((10**6,))], ref_hi=False, clones=0)
    budget = est.total_bytes + JUDGE_ARRAYS * 8 * 2**18
    plan = plan_case(est, free_device=int(budget / 0.9) + 100, free_host=GB)
    assert plan.refuse is None and MIN_CHUNK <= plan.chunk_elems <= 2**18


def test_refusal_names_the_sizes_and_the_fix():
    # 19_ReLU unchanged: 4096 x 393216 fp32 in, same out
    spec = _spec((4096, 393216))
    est = estimate_case([spec], [spec], ref_hi=True, clones=2)
    plan = plan_case(est, free_device=None, free_host=16 * GB, suggested_overrides={"batch_size": 16})
    assert plan.refuse is not None and not plan.ref_hi
    for text in ("inputs 6.4 GB", "input clones 12.9 GB", "outputs x3 19.3 GB", "free host memory 16.0 GB",
                 "float64 reference, 25.8 GB", "overrides={'batch_size': 16}", "smaller shape set in shapes"):
        assert text in plan.refuse, (text, plan.refuse)
    assert plan_case(est, free_device=141 * GB, free_host=64 * GB).refuse is None


def test_device_plan_refuses_when_host_cannot_generate_the_inputs():
    est = estimate_case([_spec((4096, 393216))], [_spec((4096,))], ref_hi=True, clones=2)
    plan = plan_case(est, free_device=141 * GB, free_host=4 * GB)
    assert plan.refuse is not None and "host" in plan.refuse and "6.4 GB" in plan.refuse
    assert "shapes" in plan.refuse and "overrides" in plan.refuse


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return y, {"idx": torch.argmax(y, dim=1), "n": y.sum()}


def test_meta_output_specs_without_touching_the_model():
    net = _Net()
    before = net.bn.running_mean.clone()
    specs = meta_output_specs(net, [torch.empty(4096, 3, 64, 64, device="meta")])
    assert [(s.path, s.shape, s.dtype) for s in specs] == [
        ("out[0]", [4096, 8, 62, 62], "float32"), ("out[1]['idx']", [4096, 62, 62], "int64"),
        ("out[1]['n']", [], "float32")]
    assert torch.equal(net.bn.running_mean, before) and net.conv.weight.device.type == "cpu"


def test_meta_output_specs_is_none_when_meta_cannot_tell():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]

    class Item(torch.nn.Module):
        def forward(self, x):
            return x * float(x.sum())

    assert meta_output_specs(DataDependent(), [torch.rand(8)]) is None
    assert meta_output_specs(Item(), [torch.rand(8)]) is None


def test_meta_input_specs_reads_full_kernelbench_sizes_without_allocating(kb_dir):
    ns: dict = {}
    exec(compile((kb_dir / "93_masked_cumsum.py").read_text(), "93_masked_cumsum.py", "exec"), ns)
    specs = meta_input_specs(ns["get_inputs"])
    assert [(s.shape, s.dtype) for s in specs] == [([32768, 32768], "float32"), ([32768, 32768], "bool")]
    assert sum(s.nbytes() for s in specs) == 32768 * 32768 * 5
    assert specs_of([torch.ones(2), 3, (torch.ones(1, dtype=torch.int8),)])[1].path == "in[2][0]"


def test_output_bound_covers_the_declared_outputs_and_the_inputs():
    ins = [_spec((1000,)), _spec((1000,), "bfloat16"), _spec((5,), "int64")]  # 4000 + 2000 + 40 bytes
    (out,) = bounded_output_specs(ins, 6040 + 10_000)  # declared: 10 kB of outputs
    assert out.dtype == "bfloat16" and out.nbytes() >= 4 * 10_000
    (small,) = bounded_output_specs(ins, 6040 + 8)  # a reduction: at least the inputs' bytes, 4 times
    assert small.nbytes() >= 4 * 6040
    (none,) = bounded_output_specs(ins, None)
    assert none.nbytes() >= 4 * 6040


def test_output_bound_stands_only_for_small_cases():
    ins = [_spec((10**8,))]
    outs = bounded_output_specs(ins, 8 * 10**8)
    est = estimate_case(ins, outs, ref_hi=True, clones=4)
    roomy = plan_case(est, None, 1000 * GB)
    assert small_bound_plan(roomy, ins, outs, want_hi=True)
    tight = plan_case(est, None, est.total_bytes * 4 + JUDGE_ARRAYS * 8 * 2**24)  # fits, but not 8 times over
    assert not tight.refuse and tight.ref_hi
    assert not small_bound_plan(tight, ins, outs, want_hi=True)
    no_hi = roomy.model_copy(update={"ref_hi": False})
    assert not small_bound_plan(no_hi, ins, outs, want_hi=True) and small_bound_plan(no_hi, ins, outs, want_hi=False)
    assert not small_bound_plan(roomy.model_copy(update={"refuse": "too big"}), ins, outs, want_hi=True)
