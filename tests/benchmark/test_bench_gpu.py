"""benchmark on a real GPU (CUDA or ROCm): the activity clock times both series, the statistics hold
together, the kernel span sits below the event median of the same repetitions (events also count the
launch), the launch cost ncu counts is added on CUDA, the flush is in place, and a result cached by input
address is caught after timing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import torch

from evokernel_mcp.app import close_app
from evokernel_mcp.benchmark.api import benchmark, measure_ceilings

pytestmark = pytest.mark.gpu
GOOD = (Path(__file__).parent / "candidates" / "vector_add_triton.py").read_text()
OPTS = {"task": "vector_add", "shapes": ["medium"], "min_reps": 30, "max_time_s": 0.5, "wait_s": 300,
        "timeout_s": 300}


@pytest.fixture(scope="module", autouse=True)
def _app():
    yield
    anyio.run(close_app)


def test_gpu_benchmark_uses_the_activity_clock_for_both_series():
    res = anyio.run(lambda: benchmark(candidate=GOOD, **OPTS))
    assert res.error is None, res.error
    r = res.results[0]
    for s, ti in ((r.candidate, r.candidate_timing), (r.baseline, r.baseline_timing)):
        assert s.reps >= 30 and s.min_ms <= s.p10_ms <= s.median_ms <= s.p90_ms
        assert ti.timer == "activity", ti.timer_note
        assert 0 < ti.kernel_span_median_ms  # the kernel's own span (events are not read beside interleaved blocks)
        assert ti.flush_bytes and ti.flush_bytes >= 256 << 20
        if torch.version.hip is None:  # CUDA: ncu's launch cost measured once and added (launch_cost.py)
            assert ti.launch_cost_ms and 0 < ti.launch_cost_ms < 0.005, ti
            assert s.median_ms == pytest.approx(ti.kernel_span_median_ms + ti.launch_cost_ms)
    assert r.correct_after_timing is True and "activity clock" in res.timing_method


def test_gpu_benchmark_warm_cache_activity_clock():
    res = anyio.run(lambda: benchmark(candidate=GOOD, cold_cache=False, **OPTS))
    r = res.results[0]
    assert r.candidate_timing.timer == "activity" and r.baseline_timing.timer == "activity"
    assert r.candidate_timing.flush_bytes is None and "warm cache" in res.timing_method


def test_gpu_benchmark_graph_replay_activity_clock():
    res = anyio.run(lambda: benchmark(candidate=GOOD, use_graph=True, **OPTS))
    assert res.error is None, res.error
    r = res.results[0]
    assert r.candidate_timing.timer == "activity", r.candidate_timing.timer_note
    assert "graph replay" in res.timing_method and r.correct_after_timing is True


def test_gpu_benchmark_events_clock_when_asked():
    res = anyio.run(lambda: benchmark(candidate=GOOD, timer="events", **OPTS))
    r = res.results[0]
    assert r.candidate_timing.timer == "events" and r.candidate_timing.overhead_subtracted
    assert r.candidate_timing.event_median_ms is None


def test_gpu_benchmark_catches_results_cached_by_input_address():
    src = ("import torch\n_seen = {}\n\ndef run(x, y):\n    k = (x.data_ptr(), y.data_ptr())\n"
           "    if k not in _seen:\n        _seen[k] = x + y\n    return _seen[k]\n")
    res = anyio.run(lambda: benchmark(candidate=src, **OPTS))
    r = res.results[0]
    assert r.correct_after_timing is False and r.valid is False and r.speedup is None
    assert any("input storage refilled" in f for f in r.flags)


MM_REF = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A @ B


N = 2048


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
"""
FORGE = (Path(__file__).parents[2] / "bench" / "candidates_ab" / "campaign" / "forge_skip_unchecked.py").read_text()


@pytest.mark.parametrize("confirm", [False, True])
def test_gpu_benchmark_catches_work_skipped_on_repetitions_guessed_unchecked(confirm):
    """Full work only on a block's last repetition (the one the sampler may take): every repetition's chunk
    sums are judged, so it is invalid (or, were the skipped work caught nowhere, its speedup is the truth)."""
    res = anyio.run(lambda: benchmark(reference=MM_REF, candidate=FORGE, confirm=confirm, min_reps=30,
                                      max_time_s=0.5, wait_s=300, timeout_s=300))
    assert res.error is None, res.error
    r = res.results[0]
    assert r.valid is False or (r.speedup is not None and abs(r.speedup - 1) <= 0.1), (r.valid, r.speedup, r.flags)


def test_gpu_measure_ceilings_alone_measures_the_launch_cost():
    c = anyio.run(lambda: measure_ceilings(refresh=True, wait_s=300, timeout_s=300))
    assert c.copy_gbs and c.copy_gbs > 100 and not c.host_timing
    assert c.launch_cost_detail
    if torch.version.hip is None:
        assert c.launch_cost_us is not None and 0 < c.launch_cost_us < 5, c.launch_cost_detail
        assert any(p.field == "launch_cost_us" and p.source == "measured" for p in c.provenance)


def test_gpu_activity_session_records_kernels_without_importing_dynamo():
    """The timed arms' session (activity.TorchActivity, the one a spare warms) records the kernel with device
    timestamps, and does not import torch._dynamo / torch._inductor as torch.profiler.profile's first session
    does (seconds of every warm spare's start on a busy host)."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom evokernel_mcp.benchmark.activity import TorchActivity\n"
            "x = torch.ones(1 << 20, device='cuda')\nwith TorchActivity() as s:\n    (x * 2).sum().item()\n"
            "acts = s.activities()\nprint(len(acts), all(b > a for _, a, b, _ in acts),"
            " any(m in sys.modules for m in ('torch._dynamo', 'torch._inductor')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    n, ordered, dynamo = out.stdout.split()[-3:]
    assert int(n) >= 2 and ordered == "True"  # the multiply and the reduction, at least
    assert dynamo == "False"


def test_gpu_verify_children_get_one_hardware_queue_and_timed_arms_the_default():
    """spares.untimed_queues: a verify's candidate process starts with CUDA_DEVICE_MAX_CONNECTIONS=1 (a cheaper
    context), a benchmark's timed candidate arm with the driver's default (the variable unset)."""
    from evokernel_mcp.verify import verify_vs_pytorch

    if torch.version.hip is not None:
        pytest.skip("CUDA_DEVICE_MAX_CONNECTIONS is NVIDIA's")
    src = "import os\nprint('queues=' + str(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')), flush=True)\n" + GOOD
    v = anyio.run(lambda: verify_vs_pytorch(src, task="vector_add", shapes=["small"], seeds=1, wait_s=300))
    assert v.passed is True and "queues=1" in v.stdout, v.stdout
    res = anyio.run(lambda: benchmark(candidate=src, **OPTS))
    assert res.error is None, res.error
    assert "queues=None" in (res.stdout or "") and "queues=1" not in (res.stdout or ""), res.stdout


def test_gpu_kernelbench_matmul_reports_a_fraction_of_peak():
    """A KernelBench problem has no task.yaml counts: the reference's process counts 2*N^3 FLOPs on meta
    tensors and the result carries the fraction of the datasheet peak, naming it."""
    repo = Path(__file__).resolve().parents[2]
    kb = next((p for p in (repo.parent / "shared" / "kernelbench" / "level1", Path("/work/shared/kernelbench/level1"),
                           repo / ".kb" / "level1")  # (the copy a device call carries)
               if (p / "1_Square_matrix_multiplication_.py").is_file()), None)
    if kb is None:
        pytest.skip("KernelBench level-1 files not found")
    src = (kb / "1_Square_matrix_multiplication_.py").read_text()
    same = src + "\nclass ModelNew(Model):\n    pass\n"
    res = anyio.run(lambda: benchmark(candidate=same, reference=src, overrides={"N": 2048}, min_reps=10,
                                      max_time_s=0.5, wait_s=300, timeout_s=300))
    assert res.error is None, res.error
    r = res.results[0]
    assert r.valid, (r.invalid_reason, r.invalid_detail)
    assert r.roofline.flops == 2 * 2048 ** 3 and r.roofline.bytes == 3 * 2048 * 2048 * 4
    assert r.fraction_of_peak is not None and 0 < r.fraction_of_peak, r.roofline.peak_note
    assert r.roofline.peak_note.startswith("of the datasheet") and "flop_counter" in r.roofline.counts_source


BIG_RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16384, 32768)]


def get_init_inputs():
    return []
"""
CACHED_BIG = BIG_RELU + """

_seen = {}


class ModelNew(Model):
    def forward(self, x):
        if x.data_ptr() not in _seen:
            _seen.clear()
            _seen[x.data_ptr()] = torch.relu(x)
        return _seen[x.data_ptr()]
"""


@pytest.mark.parametrize("cached", [False, True])
def test_gpu_a_big_shape_within_its_memory_cap_keeps_its_checks(cached):
    """A 4.3 GB ReLU (2.1 GB in, 2.1 GB out) at default arguments: a big shape planned within the job's memory cap
    (lean arms, the candidate's timed storage gone before the reference's refill outputs). The result is valid
    for the same code, and a result cached by input address is still caught after timing."""
    cand = CACHED_BIG if cached else BIG_RELU + "\n\nclass ModelNew(Model):\n    pass\n"
    res = anyio.run(lambda: benchmark(reference=BIG_RELU, candidate=cand, wait_s=300, timeout_s=300))
    assert res.error is None, res.error
    r = res.results[0]
    if cached:
        assert r.valid is False and r.correct_after_timing is False, r.flags
    else:
        assert r.valid is True and r.correct_after_timing is True and abs(r.speedup - 1) < 0.1, (r.speedup, r.flags)
        flags = " ".join(r.flags)  # one CUDA context fewer; within the cap, or one arm's inputs on the device at a time
        assert "cached reference process stopped" in flags, r.flags
        assert "planned within the job's memory cap" in flags or "the arms take turns" in flags, r.flags


def test_gpu_a_big_shape_confirmed_loads_the_reference_again_after_the_hand_over():
    """The same 4.3 GB ReLU with confirm: the first run's checks were the baseline arm's (the cached reference
    stopped before timing), so the confirming run's inputs come from the reference loaded again; it confirms."""
    cand = BIG_RELU + "\n\nclass ModelNew(Model):\n    pass\n"
    res = anyio.run(lambda: benchmark(reference=BIG_RELU, candidate=cand, confirm=True, wait_s=300, timeout_s=300))
    assert res.error is None, res.error
    r = res.results[0]
    assert r.valid is True and r.confirm_speedup is not None and abs(r.confirm_speedup - 1) < 0.1, (r.confirm_speedup,
                                                                                                   r.flags)
    assert "cached reference process stopped" in " ".join(r.flags), r.flags
