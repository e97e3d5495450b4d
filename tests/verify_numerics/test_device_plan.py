"""One device-memory plan per job across all of our processes (runtime/devplan.py, verify/memory.plan_device_case),
decided on injected numbers: KernelBench level-1 sizes on an 80 GB card, our idle processes given back before a
job that needs the room, too_big naming the bytes and the overrides, fewer timed input sets when memory is short."""

from __future__ import annotations

import pytest

from evokernel_mcp.runtime.devplan import Holding, VerifyNeeds, plan_verify
from evokernel_mcp.verify.memory import TensorSpec, plan_device_case, verify_needs

GB = 10**9
H100 = 80 * 2**30
NORM = [TensorSpec(shape=[112, 64, 512, 512], dtype="float32")]  # 34_InstanceNorm, 36_RMSNorm_: 7.5 GB in and out
L1NORM = [TensorSpec(shape=[32768, 65535], dtype="float32")]  # 38_L1Norm_, 39_L2Norm_: 8.6 GB in and out
RELU = [TensorSpec(shape=[4096, 393216], dtype="float32")]  # 19_ReLU .. 32_HardTanh: 6.4 GB in and out
CONV63_IN = [TensorSpec(shape=[16, 16, 1024, 1024], dtype="float32")]
CONV63_OUT = [TensorSpec(shape=[16, 128, 1022, 1022], dtype="float32")]


def _idle(n_spares=8, n_refs=1, each=700 << 20):
    return [Holding(role="spare", pid=100 + i, bytes=each, source="nvidia-smi") for i in range(n_spares)] + \
        [Holding(role="cached reference", pid=200 + i, bytes=each, source="nvidia-smi") for i in range(n_refs)]


def test_a_norm_on_an_80_gb_card_keeps_no_whole_float64_copy_and_plans_within_the_card():
    free = H100 - 6 * 2**30  # contexts of the runner and children
    plan = plan_device_case(NORM, NORM, free, 200 * GB, total_device=H100)
    assert plan.refuse is None and plan.where == "device"
    assert plan.ref_hi is False, "the whole float64 copy does not fit: left out (sampled in float64 where it can)"
    assert plan.needed_bytes <= 0.9 * free
    assert plan.ref_hi_bytes == 2 * 2 * NORM[0].nbytes(), "the sample is sized from the whole copy's bytes"
    big = plan_device_case(L1NORM, L1NORM, free, 200 * GB, total_device=H100)
    assert big.refuse is None and big.ref_hi is False, "the biggest norms fit an 80 GB card too"
    roomy = plan_device_case(NORM, NORM, 135 * 2**30, 200 * GB, total_device=141 * 2**30)
    assert roomy.ref_hi is True and roomy.refuse is None, "on a 141 GB card the float64 copy is kept whole"


def test_an_elementwise_activation_counts_every_process_of_the_job_not_one():
    needs = verify_needs(RELU, RELU)
    i = RELU[0].nbytes()
    whole = needs.by_process("whole")
    assert whole["runner"] >= 3 * i + 2 * i and whole["candidate"] == 3 * i and whole["transfer"] == 2 * i
    free = H100 - 6 * 2**30
    plan = plan_verify(needs, free, H100, [])
    assert plan.float64 == "whole" and plan.needed_bytes == needs.peak("whole") <= 0.9 * free
    plan = plan_verify(needs, 60 * GB, H100, [])  # a card with 20 GB held elsewhere
    assert plan.float64 == "sampled" and plan.too_big is None and not plan.reclaim
    assert plan.needed_bytes == needs.peak("sampled") <= 0.9 * 60 * GB


def test_idle_processes_are_given_back_before_a_job_that_needs_their_room_and_counted():
    needs = VerifyNeeds(input_bytes=10 * GB, output_bytes=10 * GB, hi_input_bytes=20 * GB, hi_output_bytes=20 * GB,
                        largest_bytes=10 * GB)
    sampled = needs.peak("sampled")
    free = int(sampled / 0.9) - 3 * GB  # 3 GB short: our 9 idle processes hold 6.6 GB
    plan = plan_verify(needs, free, H100, _idle())
    assert plan.too_big is None and plan.float64 == "sampled"
    assert plan.reclaim and plan.reclaim[0].role == "cached reference", "a cache before a spare"
    assert 3 * GB <= plan.reclaim_bytes < sum(h.bytes for h in _idle()), "only as many as cover the shortfall"
    assert "give back" in plan.note
    assert plan_verify(needs, int(sampled / 0.9) + GB, H100, _idle()).reclaim == [], "nothing stopped when it fits"


def test_a_job_that_cannot_fit_even_then_is_too_big_naming_bytes_device_and_overrides():
    plan = plan_device_case(CONV63_IN, CONV63_OUT, 10 * GB, 200 * GB, total_device=H100,
                            suggested_overrides={"batch_size": 2})
    assert plan.refuse is not None and plan.ref_hi is False
    msg = plan.refuse
    assert "needs" in msg and f"{plan.needed_bytes / 1e9:.1f} GB" in msg
    assert "10.0 GB free of 85.9 GB" in msg and "overrides={'batch_size': 2}" in msg
    assert "runner" in msg and "candidate" in msg, "the bytes by process"
    out = plan_verify(verify_needs(CONV63_IN, CONV63_OUT), 10 * GB, H100, _idle(), {"batch_size": 2})
    assert out.too_big and "after giving back 6.6 GB" in out.too_big and out.reclaim_bytes == 9 * (700 << 20)


def test_the_host_must_still_hold_the_generated_inputs():
    plan = plan_device_case(NORM, NORM, H100, 4 * GB, total_device=H100)
    assert plan.refuse and "host" in plan.refuse


def test_a_norm_benchmark_on_an_80_gb_card_with_62_gb_free_fits_by_cutting_the_aids_and_says_so():
    from evokernel_mcp.runtime.devplan import plan_benchmark

    i = o = NORM[0].nbytes()  # 7.5 GB in, 7.5 GB out
    full = plan_benchmark(i, o, 300 * GB, 320 * GB, control=True, refill_sets=1, sample_size=1)
    assert full.control and full.refill_sets == 1 and full.sample_size == 1, "a roomy card keeps every aid"
    p = plan_benchmark(i, o, int(61.5 * GB), 85 * GB, control=True, refill_sets=1, sample_size=1)
    assert p.too_big is None and p.needed_bytes <= 0.9 * 61.5 * GB
    assert not p.control and p.refill_sets == 0 and p.sample_size == 0 and not p.runner_keeps_outputs
    assert p.parts["arms"] == 2 * (i + 2 * o) and p.parts["transfer"] == i and p.parts["runner's outputs freed"] == -o
    text = " ".join(p.notes)
    assert "no refill pool" in text and "no sampled timed repetitions" in text and "noise floor is the least band" in text
    assert "one timed input set per arm" in text
    mid = plan_benchmark(i, o, 80 * GB, 85 * GB, control=True, refill_sets=1, sample_size=1)
    assert mid.sample_size == 1 and not mid.control, "the anti-cheating sample goes after the control arm"
    ring = plan_benchmark(i, o, int(61.5 * GB), 85 * GB, True, 1, 1, per_rep_check_bytes=12 * GB)
    assert ring.too_big is not None and ring.parts["arms"] == 2 * (i + 2 * o + 12 * GB), \
        "a per-repetition check's bytes count in every arm"


def test_the_leanest_benchmark_drops_the_transfer_margin_last_and_says_so():
    """On an 80 GB card with 57 GB free, two arms of an 8.6 GB norm (each its inputs and two outputs) fit only
    without the transfer margin: the arms adopt the runner's copies of the inputs (courier.py)."""
    from evokernel_mcp.runtime.devplan import plan_benchmark

    i = o = int(8.59e9)
    p = plan_benchmark(i, o, int(57.1e9), int(85e9), control=True, refill_sets=1, sample_size=1)
    assert p.too_big is None and not p.control and p.refill_sets == 0 and p.sample_size == 0
    assert p.parts["transfer"] == 0 and p.needed_bytes == 2 * (i + 2 * o) - o
    assert "no transfer margin" in " ".join(p.notes)
    roomy = plan_benchmark(i, o, int(70e9), int(85e9), control=True, refill_sets=1, sample_size=1)
    assert roomy.parts["transfer"] == i and "no transfer margin" not in " ".join(roomy.notes), \
        "every fuller plan keeps the margin"


def test_a_staged_benchmark_counts_no_transfer_margin_and_says_its_inputs_wait_on_the_host():
    """A big shape whose inputs are over twice its outputs (a reduction): the runner keeps its copies of the arms'
    inputs on the host while the arms get theirs (the hand-over exports them to each arm's device, courier.py),
    so no device copy is in transit beside the arms': no transfer margin at any step, and the notes say so."""
    from evokernel_mcp.runtime.devplan import plan_benchmark

    i, o = int(8.59e9), 1 << 20
    for free in (int(20e9), int(70e9)):
        p = plan_benchmark(i, o, free, int(85e9), control=True, refill_sets=1, sample_size=1)
        assert p.too_big is None and p.parts["transfer"] == 0
        assert "no transfer margin" not in " ".join(p.notes) and "inputs on the host" in " ".join(p.notes)
    act = plan_benchmark(int(6e9), int(6e9), int(70e9), int(85e9), control=True, refill_sets=1, sample_size=1)
    assert act.parts["transfer"] == int(6e9) and "on the host" not in " ".join(act.notes), \
        "an activation's inputs go device to device: the margin counts"


def test_a_40_gb_input_benchmark_is_too_big_on_an_80_gb_card_naming_bytes_and_overrides():
    from evokernel_mcp.runtime.devplan import plan_benchmark

    p = plan_benchmark(40 * GB, 1 * GB, 70 * GB, 85 * GB, True, 1, 1, overrides={"batch_size": 8}, reclaimed=2 * GB)
    assert p.too_big is not None and not p.control and p.sample_size == 0 and p.refill_sets == 0
    assert p.needed_bytes == 2 * (40 + 2) * GB - GB, "the leanest plan, without the transfer margin"
    assert "it needs 83.0 GB" in p.too_big and "runner's outputs freed -1.0 GB" in p.too_big
    assert "70.0 GB free of 85.0 GB" in p.too_big
    assert "after giving back 2.0 GB" in p.too_big and "overrides={'batch_size': 8}" in p.too_big
    assert p.too_big.startswith("the benchmark's arms do not fit")


def test_the_forwards_working_memory_counts_in_every_arm():
    """A 1-D max pool of 3.2 GB in and out whose forward makes 6.4 GB of int64 indices: every arm's allocator keeps
    them after its first call, so the plan that fits without them does not fit with them and cuts aids."""
    from evokernel_mcp.runtime.devplan import plan_benchmark

    i = o = int(3.22e9)
    work = int(6.44e9)
    blind = plan_benchmark(i, o, 60 * GB, 85 * GB, control=True, refill_sets=1, sample_size=1)
    assert blind.control and blind.refill_sets == 1 and blind.parts["arms' working memory"] == 0
    p = plan_benchmark(i, o, 60 * GB, 85 * GB, control=True, refill_sets=1, sample_size=1, workspace_bytes=work)
    assert p.too_big is None and p.needed_bytes <= 0.9 * 60 * GB
    n_arms = 3 if p.control else 2
    assert p.parts["arms' working memory"] == n_arms * work and not (p.control and p.refill_sets), p.parts


@pytest.mark.gpu
def test_the_reference_measures_its_forwards_working_memory_on_the_gpu():
    """A forward that makes a 256 MiB temporary beside its 64 MiB output: the reference's native forward reports
    at least the temporary as its working memory (what the benchmark plan counts in every arm)."""
    import torch

    from evokernel_mcp.verify.refout import reference_outputs

    class Model(torch.nn.Module):
        def forward(self, x):
            big = x.repeat(4, 1)  # 256 MiB
            return big[: x.shape[0]] * 2

    x = torch.randn(4096, 4096, device="cuda")  # 64 MiB
    out = reference_outputs(Model(), [x], False, "cuda")
    assert out["workspace_bytes"] >= 256 << 20, out["workspace_bytes"]
    assert reference_outputs(Model(), [x.cpu()], False, "cpu")["workspace_bytes"] is None
    from evokernel_mcp.verify.refout import owned_inputs

    with owned_inputs():  # on the inputs themselves (a case within its memory cap): the same working memory
        own = reference_outputs(Model(), [x], False, "cuda")["workspace_bytes"]
    assert own >= 256 << 20 and abs(own - out["workspace_bytes"]) <= 64 << 20, (own, out["workspace_bytes"])
