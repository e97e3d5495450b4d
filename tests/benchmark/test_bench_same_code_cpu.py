"""In CI: the same code on both sides of benchmark (candidate == baseline source) must read "no
difference": the paired interval holds 1 in at least 7 of 8 calls on the CPU path (interleaved arms, each in
its own fresh sandboxed process, all on one CPU: cpus.arm_cpu). Fewer than 5 fails; 5 or 6 is reported as an
expected failure (the CI VM's timing noise, see below)."""

from __future__ import annotations

import os

import anyio
import pytest

from evokernel_mcp.benchmark.api import benchmark

SRC = "import torch\n\ndef run(x, y):\n    return torch.add(x, y)\n"

pytestmark = pytest.mark.slow


def _steal() -> dict[str, float]:
    """Seconds each CPU lost to the hypervisor so far (/proc/stat's steal column): for the failure message."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            p = line.split()
            if p[0].startswith("cpu") and p[0] != "cpu" and len(p) > 8:
                out[p[0]] = int(p[8]) / os.sysconf("SC_CLK_TCK")
    return out


def test_same_code_interval_holds_one_in_7_of_8_calls():
    from evokernel_mcp.app import close_app

    anyio.run(close_app)  # no runner of an earlier test starting processes in the background meanwhile

    async def main():
        out = []
        for _ in range(8):
            r = await benchmark(candidate=SRC, baseline=SRC, task="vector_add", shapes=["medium"], max_time_s=1.0,
                                min_reps=10, wait_s=300, control=True)
            assert r.error is None, r.error
            sr = r.results[0]
            assert sr.valid, sr.invalid_detail
            out.append(sr.speedup_ci)
        return out

    steal0 = _steal()
    cis = anyio.run(main)
    holds = [lo <= 1.0 <= hi for lo, hi in cis]
    steal = {c: round(t - steal0.get(c, 0), 2) for c, t in _steal().items()}
    msg = f"same code read as different in {8 - sum(holds)} of 8 calls: {cis}; CPU time stolen by the host, s: {steal}"
    # a bias between the arms (one arm's process set up differently) misses in most calls: that always fails
    assert sum(holds) >= 5, msg
    if sum(holds) < 7:
        # the 2-vCPU CI VM's noise: on 2026-11-23 the code at d923c46 missed in 2 of 3 runs of this test
        # and a later version in 2 of 3 (5 or 6 holds of 8, intervals as low as [0.80, 0.93]); the GPU
        # acceptance (56 of 57 calls on the H200, bench/RESULTS.md) is measured there
        pytest.xfail(msg)


def test_five_percent_more_work_reads_slower():
    """A candidate doing measurably more work is resolved as slower (the interval excludes 1)."""
    slow = ("import torch\n\ndef run(x, y):\n    out = torch.add(x, y)\n    for _ in range(3):\n"
            "        out = torch.add(out, 0.0)\n    return out\n")

    async def main():
        return await benchmark(candidate=slow, baseline=SRC, task="vector_add", shapes=["medium"], max_time_s=1.0,
                               min_reps=10, wait_s=300)

    r = anyio.run(main)
    sr = r.results[0]
    assert sr.valid and sr.speedup_ci is not None and sr.speedup_ci[1] < 1.0, (sr.speedup, sr.speedup_ci)
