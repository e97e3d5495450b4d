"""Shipped tasks and the task loader: FLOP/byte arithmetic, KernelBench files, fresh random inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel_mcp.errors import BadInput, NotFound
from evokernel_mcp.tasks import eval_expr, get_task, list_tasks, load_task

KB = Path(__file__).resolve().parents[1] / "verify" / "candidates" / "kb_problem.py"


def test_shipped_tasks_are_listed_with_shape_sets_small_to_full():
    names = {t.name: t for t in list_tasks().tasks}
    assert {"conv3d_depthwise", "rmsnorm", "softmax", "fused_mlp", "vector_add"} <= set(names)
    for t in names.values():
        assert t.shape_sets[0] == "small" and t.shape_sets[-1] == "full" and t.full_flops and t.full_bytes


def test_flagship_conv3d_shapes_and_flops():
    t = get_task("conv3d_depthwise")
    full = t.shape_set("full")
    assert full.input_shapes == {"x": [1, 512, 61, 45, 80], "weight": [512, 1, 3, 5, 5]}
    assert full.flops == 1 * 512 * 59 * 45 * 80 * 75 * 2 == 16_312_320_000
    assert round(full.flops / 1e9, 2) == 16.31
    assert full.bytes == 2 * (512 * 61 * 45 * 80 + 512 * 75 + 512 * 59 * 45 * 80)
    assert "bf16" in t.task_md and "class Model" in t.reference_source


def test_expressions_are_safe_and_checked():
    assert eval_expr("2*N*(D-KD+1)", {"N": 3, "D": 5, "KD": 3}) == 18
    assert eval_expr("K**-0.5", {"K": 4}) == 0.5
    with pytest.raises(BadInput, match="unknown symbol"):
        eval_expr("2*Q", {"N": 1})
    with pytest.raises(BadInput, match="unsupported"):
        eval_expr("__import__('os').system('true')", {})


def test_kernelbench_file_loads_unchanged():
    t = load_task(str(KB))
    assert t.kind == "kernelbench" and t.shape_names() == ["default"] and t.reference_source == KB.read_text()


def test_missing_and_malformed_tasks(tmp_path):
    with pytest.raises(NotFound, match="list_tasks"):
        get_task("no_such_task")
    bad = tmp_path / "bad.py"
    bad.write_text("def get_inputs(): return []\n")
    with pytest.raises(BadInput, match="Model"):
        load_task(str(bad))
    d = tmp_path / "t"
    d.mkdir()
    (d / "task.yaml").write_text("name: t\ninputs: [{name: x}]\n")
    with pytest.raises(BadInput, match="malformed"):
        load_task(str(d))


def test_make_inputs_fresh_random_never_zero_and_seeded():
    import torch

    from evokernel_mcp.candidate import make_inputs

    t = get_task("fused_mlp")
    a = make_inputs(t, "small", 0, "cpu")
    b = make_inputs(t, "small", 0, "cpu")
    c = make_inputs(t, "small", 1, "cpu")
    assert [x.shape for x in a] == [torch.Size([16, 32]), torch.Size([32, 64]), torch.Size([64]), torch.Size([64, 32])]
    assert all(x.dtype == torch.bfloat16 for x in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and not torch.equal(a[0], c[0])
    assert all(int((x == 0).sum()) < x.numel() // 100 + 1 for x in a)
    assert abs(float(a[1].float().std()) - 32 ** -0.5) < 0.05
    w = make_inputs(get_task("rmsnorm"), "small", 3, "cpu")[1]
    assert float(w.min()) >= 0.5 and float(w.max()) <= 1.5


def test_make_inputs_draws_the_same_numbers_as_scale_and_shift_out_of_place():
    """The draws are scaled and shifted in place (no full-size temporaries): the numbers a seed gives must not
    change, so results before and after stay comparable."""
    import torch

    from evokernel_mcp.candidate import make_inputs, torch_dtype
    from evokernel_mcp.tasks import eval_expr

    for name in ("fused_mlp", "rmsnorm", "conv3d_depthwise", "softmax", "vector_add"):
        t = get_task(name)
        ss = t.shape_set("small")
        got = make_inputs(t, "small", 7, "cpu")
        for i, spec in enumerate(t.inputs):
            gen = torch.Generator().manual_seed(7 * 1009 + i)
            shape = ss.input_shapes[spec.name]
            if spec.dist == "uniform":
                lo = spec.low if spec.low is not None else -1.0
                hi = spec.high if spec.high is not None else 1.0
                old = torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
            elif spec.dist == "randint":
                continue
            else:
                std = float(eval_expr(spec.std, ss.dims))
                old = torch.randn(shape, generator=gen, dtype=torch.float32) * std + spec.mean
            assert torch.equal(got[i], old.to(torch_dtype(spec.dtype))), (name, spec.name)


def test_spec_draws_scale_then_shift():
    import types

    import torch

    from evokernel_mcp.candidate import _spec_tensor

    for spec in (types.SimpleNamespace(dist="uniform", low=-3.0, high=5.0),
                 types.SimpleNamespace(dist="normal", std="2.5", mean=0.5)):
        got = _spec_tensor(spec, [64, 33], {}, torch.Generator().manual_seed(11), torch.float32)
        gen = torch.Generator().manual_seed(11)
        if spec.dist == "uniform":
            old = torch.rand([64, 33], generator=gen) * 8.0 + -3.0
        else:
            old = torch.randn([64, 33], generator=gen) * 2.5 + 0.5
        assert torch.equal(got, old), spec.dist
