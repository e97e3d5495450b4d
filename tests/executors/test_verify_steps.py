"""The cascade's verify_small and verify run as one stage (runner op verify_steps) in ONE candidate process,
for real on the CPU runner: the candidate module is imported once, and a candidate failing verify_small
never reaches the full verify."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from evokernel_mcp.batch import cascade
from evokernel_mcp.batch.models import BatchCandidate
from evokernel_mcp.executors.local import LocalExecutor
from evokernel_mcp.runtime.pool import RunnerPool
from evokernel_mcp.tasks import load_task

TASK = str(Path(__file__).resolve().parent / "vector_add_tiny")
LOUD = "import os\nprint('imported in', os.getpid(), flush=True)\n\ndef run(x, y):\n    return x + y\n"
WRONG = "import os\nprint('imported in', os.getpid(), flush=True)\n\ndef run(x, y):\n    return x - y\n"


@pytest.fixture(scope="module")
def ran():
    plan = cascade.make_plan(load_task(TASK), stages=["verify_small", "verify"], shapes=None, overrides=None,
                             compile=None, timeout_s=60.0, max_time_s=0.2)
    pool = RunnerPool(["cpu"])
    ex = LocalExecutor(pool)

    async def main():  # the runner is started, used and stopped in this one event loop
        try:
            good = await cascade.run_candidate(ex, "cpu", 0, BatchCandidate(name="good", source=LOUD), plan)
            bad = await cascade.run_candidate(ex, "cpu", 1, BatchCandidate(name="bad", source=WRONG), plan)
            return good, bad
        finally:
            await pool.aclose()

    return anyio.run(main)


def _imports(result: dict) -> list[str]:
    return re.findall(r"imported in (\d+)", result.get("stdout") or "")


def test_both_verify_stages_report_and_ran_in_one_process(ran):
    good, _ = ran
    assert good.valid, good.reason
    small, full = good.results["verify_small"], good.results["verify"]
    assert small["passed"] and full["passed"]
    assert {c["shape"] for c in small["cases"]} == {"tiny"} and {c["shape"] for c in full["cases"]} == {"tiny", "small"}
    assert len(_imports(full)) == 1 and _imports(small) == _imports(full)  # imported once, by one process


def test_a_candidate_failing_verify_small_stops_there(ran):
    _, bad = ran
    assert not bad.valid and bad.failed_stage == "verify_small" and bad.reason.startswith("wrong_output")
    assert "verify" not in bad.results and len(_imports(bad.results["verify_small"])) == 1
