"""The README's first calls at default arguments on the CPU path (torch CPU + TRITON_INTERPRET=1), through
the plain tool functions on the real worker: verify_vs_pytorch, benchmark and evaluate_batch run the task's
small shape sets, say which they skipped and why, pass a correct candidate and fail a wrong one with the
mismatch as the reason. (On a GPU the defaults run every shape set: tests/tasks/test_shape_defaults.py.)"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from evokernel_mcp.app import close_app
from evokernel_mcp.batch.api import evaluate_batch
from evokernel_mcp.batch.models import BatchCandidate
from evokernel_mcp.benchmark.api import benchmark
from evokernel_mcp.runtime.pool import discover_devices
from evokernel_mcp.verify import verify_vs_pytorch

GOOD = (Path(__file__).parents[1] / "benchmark" / "candidates" / "vector_add_triton.py").read_text()
WRONG = GOOD.replace("tl.load(x_ptr + offs, mask=mask) + tl.load", "tl.load(x_ptr + offs, mask=mask) - tl.load")
WAIT = {"wait_s": 600}  # a hang guard: the call returns its result, not a job handle, however loaded the host

pytestmark = pytest.mark.skipif(discover_devices() != ["cpu"], reason="the CPU path's defaults (this host has a GPU)")


@pytest.fixture(scope="module", autouse=True)
def _app():
    yield
    anyio.run(close_app)


def _skipped_as_the_cpu_path_does(res) -> None:
    assert res.shapes_run == ["small"] and "CPU path" in res.shape_rule
    assert [s.shape for s in res.shapes_skipped] == ["medium", "full"]
    assert all("CPU path" in s.reason and "shapes=" in s.reason for s in res.shapes_skipped)


def test_verify_at_defaults_passes_a_correct_candidate_and_names_a_wrong_ones_mismatch():
    assert WRONG != GOOD
    good = anyio.run(lambda: verify_vs_pytorch(GOOD, task="vector_add", **WAIT))
    assert good.passed is True and good.error is None and good.reason is None, good.reason
    _skipped_as_the_cpu_path_does(good)
    bad = anyio.run(lambda: verify_vs_pytorch(WRONG, task="vector_add", **WAIT))
    assert bad.passed is False and bad.error is None
    assert bad.reason.startswith("wrong_output: ") and "first mismatch at index" in bad.reason, bad.reason
    _skipped_as_the_cpu_path_does(bad)


def test_benchmark_at_defaults_times_the_small_set_and_a_wrong_candidate_is_invalid():
    good = anyio.run(lambda: benchmark(GOOD, task="vector_add", **WAIT))
    assert good.state == "done" and good.error is None and good.reason is None, good.reason
    assert [r.shape for r in good.results] == ["small"] and good.results[0].valid
    _skipped_as_the_cpu_path_does(good)
    bad = anyio.run(lambda: benchmark(WRONG, task="vector_add", **WAIT))
    assert bad.error is None and bad.results[0].valid is False
    assert "wrong_output" in bad.reason and "mismatches" in bad.reason, bad.reason


def test_evaluate_batch_at_defaults_ranks_the_correct_candidate_valid_and_the_wrong_one_by_its_mismatch():
    cands = [BatchCandidate(name="good", source=GOOD), BatchCandidate(name="wrong", source=WRONG)]
    res = anyio.run(lambda: evaluate_batch(cands, task="vector_add", **WAIT))
    assert res.state == "done", res.error
    rows = {r.name: r for r in res.ranked}
    assert rows["good"].valid and rows["good"].median_ms is not None, rows["good"].reason
    assert not rows["wrong"].valid and rows["wrong"].reason.startswith("wrong_output: "), rows["wrong"].reason
    assert res.verify_shapes == ["small"] and res.benchmark_shape == "small"
    assert [s.shape for s in res.shapes_skipped] == ["medium", "full"] and "CPU path" in res.shape_rule
