"""A staged benchmark shape over its cap comes to the runner through host memory, where the runner keeps it anyway: the
reference moves its reply off its device before sending (child.serve, through_host) and sends its big host tensors by
VMM export (courier.from_host), so the export is its only device copy, where an export from the device was a second one
beside the first (6_Matmul_with_large_K_dimension_: 1 GiB and 0.5 GiB more beside four contexts on an H100); an 8 GiB
reduction keeps the device path. Where every shape is within its cap, the first case is made before the arms' processes
start and no control arm starts. Plans are the reference's (agent code's) numbers: anything but byte counts reads as
no. The device memory itself is measured by bench/kernelbench_sweep.py."""

from __future__ import annotations

import torch

from evokernel_mcp.runtime import courier
from evokernel_mcp.runtime.devplan import through_host

GB, GIB = 10**9, 2**30


def test_host_tensors_go_by_vmm_export_only_inside_from_host_and_small_ones_stay_in_the_pipe():
    a, _ = courier.pair()
    tx = courier.Courier(a)
    tx.vmm = True  # (as on a GPU; the export itself is exercised by the GPU tests)
    big, small = torch.zeros(courier.THRESHOLD // 4 + 1), torch.zeros(3)
    assert tx.route(big) == "memfd"
    with tx.from_host():
        assert tx.route(big) == "vmm" and tx.route(small) is None
    assert tx.route(big) == "memfd", "only inside"
    tx.vmm = False
    with tx.from_host():
        assert tx.route(big) == "memfd", "no VMM here: the memfd as before"


def test_a_staged_shape_comes_through_host_only_where_the_senders_export_would_pass_its_cap():
    # 6_Matmul_with_large_K_dimension_: two 0.54 GB inputs, a 0.26 MB output
    assert through_host(int(1.074 * GB), 262144, int(0.537 * GB), 3)
    # an 8.6 GB reduction: its copy and an export of it are within 3x beside three contexts
    assert not through_host(int(8.6 * GB), 2 << 20, int(8.6 * GB), 3)
    assert not through_host(int(0.9 * GB), 1000, int(0.9 * GB), 3), "1 GB or less: no cap"
    assert not through_host(int(1.074 * GB), 262144, int(0.537 * GB), 0), "memory_factor 0: off"


def _plan(i, o, largest=None, **kw):
    return {"cap_bytes": 10**9, "pristine": False, "input_bytes": i, "output_bytes": o,
            "largest_bytes": largest or max(i, o), **kw}


def test_a_benchmark_shape_staged_over_its_cap_has_its_inputs_sent_through_host():
    from evokernel_mcp.benchmark import arms as arms_mod
    from evokernel_mcp.benchmark.shape_case import via_host as _via_host

    assert _via_host(_plan(int(1.074 * GB), 262144, int(0.537 * GB)))
    assert not _via_host(_plan(int(8.6 * GB), 2 << 20)), "an 8 GiB reduction: the device path, then pinned"
    assert not _via_host(_plan(50_331_648, 976_617_472)), "a convolution's inputs are not most of its bytes"
    assert not _via_host(None) and not _via_host({"input_bytes": "x"})
    asked, pinned = [], []

    class Ref:
        courier = None

        def request(self, req, timeout_s, max_bytes, device=None):
            asked.append((req.get("through_host"), device))
            return {"inputs": [torch.zeros(2)]}

    arms = arms_mod.Arms(Ref(), Ref(), task=None, deadline=1e12, dev="cuda")
    orig = arms_mod.on_host
    arms_mod.on_host = lambda x: (pinned.append(1), x)[1]
    try:
        arms.via_host = True
        arms.inputs(Ref(), {"shape": "s", "seed": 1}, staged=True)
        assert asked[-1] == (True, "cpu") and not pinned, "in host memory already: not copied again"
        arms.inputs(Ref(), {"shape": "s", "seed": 1}, staged=False)
        assert asked[-1] == (False, None), "a shape that is not staged: as before"
        arms.via_host = False
        arms.inputs(Ref(), {"shape": "s", "seed": 1}, staged=True)
        assert asked[-1] == (False, None) and pinned == [1], "staged within its cap: the device path, then pinned"
    finally:
        arms_mod.on_host = orig


def test_where_every_shape_is_planned_within_the_cap_the_arms_wait_for_the_first_case_and_no_control_starts():
    """Made beside two idle arms and a control arm being stopped, a 1-2 GB shape's case took 3.3-3.9x its own bytes on
    an H100; where the reference plans every shape within the cap, the arms start after the first case, and no control
    arm starts (no plan within the cap keeps it)."""
    from evokernel_mcp.benchmark.shape_case import every_shape_capped

    class Ref:
        def __init__(self, plans):
            self.plans, self.asked = plans, []

        def request(self, req, timeout_s, max_bytes, device=None):
            self.asked.append(req["shape"])
            return {"plan": self.plans[req["shape"]]}

    capped, free = {"cap_bytes": 10**9}, {"cap_bytes": None}
    assert every_shape_capped(Ref({"a": capped, "b": capped}), ["a", "b"], 1, 1e18)
    ref = Ref({"a": free, "b": capped})
    assert not every_shape_capped(ref, ["a", "b"], 1, 1e18) and ref.asked == ["a"], "one shape without a cap: as before"
    for forged in (None, "x", {"cap": 1}):
        assert not every_shape_capped(Ref({"a": forged}), ["a"], 1, 1e18), "no plan to read: as before"
    assert not every_shape_capped(Ref({}), [], 1, 1e18)
