"""FLOPs and bytes for problems whose task gives none (KernelBench): counted on meta tensors at the real shapes,
or given by the caller, and the fraction of peak benchmark reports from them (or why it has none)."""

from __future__ import annotations

import random
import types
from pathlib import Path

import anyio
import pytest

from evokernel_mcp.benchmark import api, results, work
from evokernel_mcp.errors import BadInput
from evokernel_mcp.tasks import load_task, task_from_reference

REPO = Path(__file__).resolve().parents[2]
KB = next((p for p in (REPO.parent / "shared" / "kernelbench" / "level1", Path("/work/shared/kernelbench/level1"))
           if p.is_dir()), Path("kernelbench-not-found"))
MATMUL = KB / "1_Square_matrix_multiplication_.py"
RELU = KB / "19_ReLU.py"
needs_kb = pytest.mark.skipif(not MATMUL.is_file() or not RELU.is_file(), reason="no KernelBench level-1 files")

# a level-2-style problem: a GEMM with a GroupNorm / Swish / multiply tail
LEVEL2 = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        x = self.norm(self.gemm(x))
        return x * torch.sigmoid(x) * self.scale


batch_size, in_features, out_features, groups = 1024, 8192, 8192, 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, groups]
"""
H100 = {"backend": "cuda", "name": "NVIDIA H100 80GB HBM3", "arch": "sm_90"}
CPU = {"backend": "none", "name": "cpu (x86_64)", "arch": None}


def _module(src: str):
    mod = types.ModuleType("problem")
    exec(compile(src, "problem.py", "exec"), mod.__dict__)  # noqa: S102 - the test's own problem files
    return mod


def _counted(src: str) -> dict:
    """count_flops as the reference child runs it: the model built, the inputs at their real shapes on meta."""
    import torch

    mod = _module(src)
    model = mod.Model(*mod.get_init_inputs())
    with torch.device("meta"):
        inputs = mod.get_inputs()
    return work.count_flops(model, inputs)


@needs_kb
def test_matmul_counts_two_mnk_at_the_real_size_without_allocating():
    got = _counted(MATMUL.read_text())
    n = 2048 * 2
    assert got["flops"] == 2 * n ** 3 and got["by_op"] == {"aten.mm": 2 * n ** 3}


@needs_kb
def test_elementwise_counts_no_flops_and_uses_the_memory_roofline_only():
    got = _counted(RELU.read_text())
    assert got["flops"] == 0
    c = work.choose(None, None, "19_ReLU", {**got, "bytes": 2 * 4096 * 393216 * 4})
    assert c.flops is None and c.bytes == 2 * 4096 * 393216 * 4
    assert "memory roofline only" in c.note


def test_level2_gemm_tail_counts_the_gemm():
    got = _counted(LEVEL2)
    assert got["flops"] == 2 * 1024 * 8192 * 8192
    assert set(got["by_op"]) == {"aten.addmm"}


def test_a_forward_that_cannot_run_on_meta_says_so():
    src = LEVEL2.replace("return x * torch.sigmoid(x) * self.scale", "return x * float(x.sum().item())")
    got = _counted(src)
    assert got["flops"] is None and "meta" in got["note"]
    c = work.choose(None, None, "p", {**got, "bytes": 100.0})
    assert c.flops is None and "FLOPs not counted" in c.note and c.bytes == 100.0


def test_the_caller_wins_then_the_task_then_the_count():
    counted = {"flops": 10.0, "by_op": {"aten.mm": 10.0}, "bytes": 20.0, "bytes_detail": "inputs 20 bytes"}
    c = work.choose(None, None, "p", counted)
    assert (c.flops, c.bytes) == (10.0, 20.0) and "flop_counter" in c.source and "inputs 20" in c.source
    c = work.choose(3.0, 4.0, "p", counted)
    assert (c.flops, c.bytes) == (3.0, 4.0) and c.source.count("task.yaml") == 2
    c = work.choose(3.0, 4.0, "p", counted, given_flops=5.0)
    assert (c.flops, c.bytes) == (5.0, 4.0) and "flops given by the caller" in c.source


def test_caller_counts_per_shape_set():
    assert work.per_shape(7, ["default"], "flops") == {"default": 7.0}
    assert work.per_shape({"small": 1, "full": 2}, ["small", "full"], "bytes") == {"small": 1.0, "full": 2.0}
    assert work.per_shape(None, ["a", "b"], "flops") == {}
    with pytest.raises(BadInput, match="one number but 2 shape sets"):
        work.per_shape(7, ["small", "full"], "flops")
    with pytest.raises(BadInput, match="not timed here: huge"):
        work.per_shape({"huge": 1}, ["small"], "flops")
    with pytest.raises(BadInput, match=">= 0"):
        work.per_shape(-1, ["small"], "flops")


def _run(median: float, host: bool = False) -> dict:
    rng = random.Random(0)
    return {"times_ms": [median * (1 + rng.uniform(-0.01, 0.01)) for _ in range(60)], "method": "events",
            "host_timing": host}


def _raw(cand_ms: float, counted: dict, host: bool = False) -> dict:
    ok = {"passed": True, "mismatches": 0}
    return {"shape": "default", "candidate": _run(cand_ms, host), "baseline": _run(2 * cand_ms, host),
            "check_timed": ok, "check_fresh": ok, "output_dtype": "float32", "work": counted}


def test_kernelbench_gemm_gets_a_fraction_of_the_h100_fp32_peak():
    n = 4096
    counted = {"flops": 2 * n ** 3, "by_op": {"aten.mm": 2 * n ** 3}, "bytes": 3 * n * n * 4, "bytes_detail": "x"}
    sr = results.shape_result(_raw(10.0, counted), task_from_reference(LEVEL2), H100, None, "matrix", 0.95)
    r = sr.roofline
    assert r.flops == 2 * n ** 3 and r.bytes == 3 * n * n * 4
    assert sr.fraction_of_peak == pytest.approx(r.fraction_of_peak_tflops, rel=1e-9)
    assert sr.fraction_of_peak == pytest.approx(2 * n ** 3 / (sr.candidate.median_ms * 1e-3) / 66.9e12, rel=1e-9)
    assert "fp32 matrix peak (66.9 TFLOP/s" in r.peak_note and "arch.yaml" in r.peak_note
    assert "flop_counter" in r.counts_source and sr.baseline_roofline.fraction_of_peak is not None


def test_elementwise_problem_gets_a_fraction_of_the_bandwidth_peak():
    counted = {"flops": 0, "by_op": {}, "bytes": 8e9, "bytes_detail": "x"}
    sr = results.shape_result(_raw(4.0, counted), task_from_reference(LEVEL2), H100, None, "vector", 0.95)
    assert sr.fraction_of_peak == pytest.approx(8e9 / (sr.candidate.median_ms * 1e-3) / 3350e9, rel=1e-9)
    assert sr.roofline.flops is None and "memory roofline only" in sr.roofline.counts_note
    assert sr.roofline.peak_note.startswith("of the datasheet memory bandwidth (3350 GB/s")


def test_cpu_path_has_no_peak_and_says_why():
    counted = {"flops": 1000, "by_op": {"aten.mm": 1000}, "bytes": 300, "bytes_detail": "x"}
    sr = results.shape_result(_raw(0.01, counted, host=True), task_from_reference(LEVEL2), CPU, None, "matrix", 0.95)
    assert sr.fraction_of_peak is None and sr.roofline.flops == 1000
    assert "CPU path" in sr.roofline.peak_note


def test_counted_figures_never_make_a_time_invalid():
    """Only the task's own counts set the physical floor: a reference's dead code may be skipped by a correct
    candidate, so a time under a counted bound is flagged, not invalid."""
    counted = {"flops": 1e15, "by_op": {"aten.mm": 1e15}, "bytes": 1.0, "bytes_detail": "x"}
    sr = results.shape_result(_raw(1.0, counted), task_from_reference(LEVEL2), H100, None, "matrix", 0.95)
    assert sr.valid and sr.fraction_of_peak > 1
    assert any("faster than the roofline bound" in f for f in sr.flags)
    task = load_task("vector_add")  # the task's own counts still set it
    ss = task.shape_sets[-1]
    raw = {**_raw(1e-9, {}), "shape": ss.name}
    sr = results.shape_result(raw, task, H100, None, "vector", 0.95)
    assert sr.valid is False and sr.invalid_reason == "below_physical_floor"


@needs_kb
def test_cpu_benchmark_of_a_kernelbench_matmul_reports_its_counts():
    """End to end on the CPU path: the reference's process counts 2*N^3 FLOPs at the overridden size, the runner
    counts the bytes, and the result says why there is no fraction of peak here."""
    src = MATMUL.read_text()
    same = src + "\nclass ModelNew(Model):\n    pass\n"
    res = anyio.run(lambda: api.benchmark(candidate=same, reference=src, overrides={"N": 64}, min_reps=3,
                                          max_time_s=1e-6, wait_s=240, timeout_s=240))
    assert res.error is None, res.error
    r = res.results[0].roofline
    assert r.flops == 2 * 64 ** 3 and r.bytes == 3 * 64 * 64 * 4
    assert "flop_counter" in r.counts_source and "CPU path" in r.peak_note
    assert res.results[0].fraction_of_peak is None
    assert any("flop_counter" in p.source for p in res.provenance)


def test_caller_flops_reach_the_result(monkeypatch):
    """benchmark's flops/bytes arguments become the counts of the shape sets timed (no runner needed)."""
    seen = {}

    async def fake_run_worker_job(*, build, **_kw):
        from evokernel_mcp.runtime.protocol import WorkerReply

        raw = _raw(1.0, {"flops": 5.0, "bytes": 6.0, "bytes_detail": "x"})
        reply = WorkerReply(ok=True, device="cuda:0", result={"device_info": H100, "shapes": [raw]})
        seen["res"] = build(reply, None)
        return types.SimpleNamespace(state="done", result=seen["res"])

    monkeypatch.setattr("evokernel_mcp.runtime.submit.run_worker_job", fake_run_worker_job)
    src = LEVEL2
    res = anyio.run(lambda: api.benchmark(candidate=src.replace("class Model(", "class ModelNew("), reference=src,
                                          flops=123.0, bytes=456.0, device="cpu"))
    r = res.results[0].roofline
    assert (r.flops, r.bytes) == (123.0, 456.0) and "given by the caller" in r.counts_source
