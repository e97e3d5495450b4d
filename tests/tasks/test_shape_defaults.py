"""Which shape sets a call runs by default, on the device the job runs on (no worker, no GPU: device ids
stand for the devices): every set on a GPU, the small ones on the CPU path; named `shapes` always win; the
result says what ran, what was skipped and why; a wrong answer stays the verdict when a later shape set is
too big."""

from __future__ import annotations

import pytest

from evokernel_mcp.batch import cascade
from evokernel_mcp.benchmark import api as bench_api
from evokernel_mcp.benchmark import results
from evokernel_mcp.benchmark.timing import TimingOptions
from evokernel_mcp.errors import BadInput
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.runtime.protocol import WorkerReply
from evokernel_mcp.shape_defaults import CPU_DEFAULT_MAX_BYTES, CPU_DEFAULT_MAX_FLOPS, choose_shapes, is_gpu_device
from evokernel_mcp.tasks import load_task, task_from_reference, task_names
from evokernel_mcp.verify import api as verify_api

GOOD = "def run(x, y):\n    return x + y\n"
GPUS = ("cuda:0", "rocm:1", "cuda:3@gpu-host-7")
TOO_BIG = ("this case does not fit: inputs 3.2 GB + ... > 80% of free host memory 1.0 GB; name a smaller shape "
           "set in shapes (get_task lists them), or for a KernelBench reference pass overrides={...}")


def test_device_ids_of_gpus_and_of_the_cpu_path():
    assert all(is_gpu_device(d) for d in GPUS)
    assert not any(is_gpu_device(d) for d in ("cpu", "CPU", "cpu@node-2"))


@pytest.mark.parametrize("name", task_names())
def test_cpu_default_is_the_small_sets_and_a_gpu_runs_them_all(name):
    task = load_task(name)
    cpu = choose_shapes(task, None, "cpu")
    assert cpu.shapes[0] == task.shape_names()[0]  # the smallest always runs
    assert cpu.shapes + [s.shape for s in cpu.skipped] == task.shape_names()  # each set: run or skipped
    for ss in task.shape_sets[1:]:
        small = ss.bytes <= CPU_DEFAULT_MAX_BYTES and (ss.flops or 0) <= CPU_DEFAULT_MAX_FLOPS
        assert (ss.name in cpu.shapes) is small, ss
    for skipped in cpu.skipped:  # why, with the size, and how to run it anyway
        assert "CPU path" in skipped.reason and "MB" in skipped.reason and f"'{skipped.shape}'" in skipped.reason
        assert "shapes=" in skipped.reason
    assert "full" not in cpu.shapes and "cpu" in cpu.rule
    for dev in GPUS:
        gpu = choose_shapes(task, None, dev)
        assert gpu.shapes == task.shape_names() and gpu.skipped == [] and dev in gpu.rule


def test_vector_add_on_the_cpu_path_runs_small_and_says_why_not_the_rest():
    cpu = choose_shapes(load_task("vector_add"), None, "cpu")
    assert cpu.shapes == ["small"]
    full = next(s for s in cpu.skipped if s.shape == "full")
    assert "3.22 GB" in full.reason and "shapes=['small', 'full']" in full.reason


def test_named_shapes_are_always_honoured_in_the_tasks_order():
    task = load_task("vector_add")
    for dev in ("cpu", "cuda:0", None):
        got = choose_shapes(task, ["full", "small"], dev)
        assert got.shapes == ["small", "full"] and got.skipped == [] and got.rule == "as requested (shapes)"
    with pytest.raises(BadInput, match="no shape set 'huge'"):
        choose_shapes(task, ["huge"], "cpu")
    with pytest.raises(BadInput, match="shapes=\\[\\]"):
        choose_shapes(task, [], "cpu")


def test_a_kernelbench_problem_runs_its_one_shape_set_on_the_cpu_path():
    ref = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
           "def get_inputs():\n    return [torch.randn(1 << 30)]\n")
    got = choose_shapes(task_from_reference(ref), None, "cpu")
    assert got.shapes == ["default"] and got.skipped == []  # sizes unknown here: the memory plan decides


def test_a_task_without_byte_counts_is_sized_by_its_inputs(tmp_path):
    d = tmp_path / "nobytes"
    d.mkdir()
    (d / "reference.py").write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                    "        return x\ndef get_inputs():\n    return [torch.randn(4)]\n")
    (d / "task.yaml").write_text("name: nobytes\ninputs:\n  - {name: x, shape: [N], dtype: float32}\n"
                                 "shape_sets: {a: {N: 1000}, b: {N: 100000}, c: {N: 10000000}}\n")
    got = choose_shapes(load_task(str(d)), None, "cpu")
    assert got.shapes == ["a", "b"] and [s.shape for s in got.skipped] == ["c"] and "40 MB" in got.skipped[0].reason


def test_payloads_carry_the_devices_default():
    task = load_task("vector_add")
    v_cpu = verify_api.build_payload(task, GOOD, None, 1, None, False, device="cpu")
    v_gpu = verify_api.build_payload(task, GOOD, None, 1, None, False, device="rocm:0")
    assert v_cpu["shapes"] == ["small"] and [s["shape"] for s in v_cpu["choice"]["skipped"]] == ["medium", "full"]
    assert v_gpu["shapes"] == ["small", "medium", "full"] and v_gpu["choice"]["skipped"] == []
    opt = TimingOptions()
    b_cpu = bench_api.build_payload(task, GOOD, "pytorch", None, opt, 0, device="cpu")
    b_gpu = bench_api.build_payload(task, GOOD, "pytorch", None, opt, 0, device="cuda:0")
    assert b_cpu["shapes"] == ["small"] and b_gpu["shapes"] == ["small", "medium", "full"]
    assert bench_api.build_payload(task, GOOD, "pytorch", ["full"], opt, 0, device="cpu")["shapes"] == ["full"]
    with pytest.raises(BadInput, match="shapes"):
        bench_api.build_payload(task, GOOD, "pytorch", [], opt, 0, device="cpu")


def test_batch_plan_per_device():
    args = dict(stages=None, overrides=None, compile=None, timeout_s=30.0, max_time_s=0.5)
    plan = cascade.make_plan(load_task("softmax"), shapes=None, **args)
    cpu, gpu = plan.for_device("cpu"), plan.for_device("cuda:0")
    assert gpu.verify_shapes == ["small", "medium", "full"] and gpu.bench_shape == "full"
    assert gpu.stages == ["verify_small", "verify", "benchmark"] and gpu.small_shapes == ["small"]
    assert cpu.verify_shapes == ["small"] and cpu.bench_shape == "small" and cpu.stages == ["verify", "benchmark"]
    assert [s.shape for s in cpu.verify_choice().skipped] == ["medium", "full"]
    named = cascade.make_plan(load_task("softmax"), shapes=["small", "full"], **args)
    assert named.for_device("cpu").verify_shapes == ["small", "full"]  # named shapes are not the device's to change
    alone = cascade.make_plan(load_task("softmax"), shapes=None, **{**args, "stages": ["verify_small"]})
    assert alone.for_device("cpu").stages == ["verify_small"] and alone.for_device("cpu").small_shapes == ["small"]


# ---------------------------------------------------------------- what the result says
def _case(shape, passed, **kw):
    return {"shape": shape, "seed": 0, "passed": passed, "mismatches": 0 if passed else 1000,
            "first_mismatch_index": None if passed else [0], "max_abs_err": 0.0 if passed else 7.9, **kw}


def _verify(cases, error=None, shapes=("small", "medium", "full"), device="cuda:0"):
    task = load_task("vector_add")
    choice = choose_shapes(task, list(shapes) if shapes else None, device)
    result = {"cases": cases, **({"error": error} if error else {})}
    return verify_api.result_from_reply(WorkerReply(ok=True, device=device, result=result), task.name, choice)


def test_a_wrong_answer_is_the_verdict_when_a_later_shape_set_is_too_big():
    res = _verify([_case("small", False), _case("medium", False)], {"kind": "too_big", "message": TOO_BIG})
    assert res.passed is False and res.error is None
    assert res.reason.startswith("wrong_output: 2000 mismatching elements") and "index [0]" in res.reason
    assert res.shapes_run == ["small", "medium"]
    (full,) = res.shapes_skipped
    assert full.shape == "full" and full.reason.startswith("too_big: ") and "shapes" in full.reason


def test_too_big_stays_the_error_when_everything_that_ran_passed():
    res = _verify([_case("small", True)], {"kind": "too_big", "message": TOO_BIG})
    assert res.passed is False and res.error.kind == "too_big" and res.reason.startswith("too_big: ")
    assert [(s.shape, s.reason.split(":")[0]) for s in res.shapes_skipped] == [("medium", "too_big"),
                                                                               ("full", "not reached")]


def test_a_candidates_crash_after_a_wrong_answer_keeps_both():
    res = _verify([_case("small", False)], {"kind": "crash", "message": "segfault"})
    assert res.error.kind == "crash" and res.reason.startswith("wrong_output")


def test_cpu_default_skips_are_in_the_result_and_a_pass_has_no_reason():
    res = _verify([_case("small", True)], shapes=None, device="cpu")
    assert res.passed is True and res.reason is None and res.shapes_run == ["small"]
    assert [s.shape for s in res.shapes_skipped] == ["medium", "full"] and "CPU path" in res.shape_rule


def _bench_raw(shape, wrong=False):
    check = {"passed": not wrong, "mismatches": 999 if wrong else 0}
    times = {"times_ms": [1.0, 1.1, 0.9] * 10, "method": "host wall clock", "host_timing": True}
    return {"shape": shape, "candidate": times, "baseline": times, "check_timed": check, "check_fresh": check,
            "output_dtype": "float32"}


def test_benchmark_wrong_answer_wins_over_too_big_and_the_skips_are_listed():
    task = load_task("vector_add")
    choice = choose_shapes(task, None, "cuda:0")
    err = {"kind": "too_big", "message": TOO_BIG, "shape": "medium"}
    reply = WorkerReply(ok=True, device="cuda:0", result={"shapes": [_bench_raw("small", wrong=True)], "error": err})
    res = results.result_from_reply(reply, task, "vector", 0.95, choice=choice)
    assert res.error is None and res.state == "done" and res.results[0].valid is False
    assert res.reason.startswith(f"{res.results[0].invalid_reason} at shape small")
    assert res.shapes_run == ["small"]
    assert [(s.shape, s.reason.split(":")[0]) for s in res.shapes_skipped] == [("medium", "too_big"),
                                                                               ("full", "not reached")]
    ok = WorkerReply(ok=True, device="cuda:0", result={"shapes": [_bench_raw("small")], "error": err})
    res = results.result_from_reply(ok, task, "vector", 0.95, choice=choice)
    assert res.state == "failed" and res.error.kind == "too_big" and res.reason.startswith("too_big: ")
    failed = WorkerReply(ok=False, device="cpu", error=ErrorInfo(kind="timeout", message="killed"))
    assert results.result_from_reply(failed, task, "vector", 0.95).reason == "timeout: killed"
