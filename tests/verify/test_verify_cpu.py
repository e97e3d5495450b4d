"""verify_vs_pytorch end to end on the CPU runner (torch CPU + TRITON_INTERPRET=1): correct Triton
candidates pass, wrong ones fail with evidence, crashing ones are reported and the next verify runs."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from evokernel_mcp.app import close_app, get_app
from evokernel_mcp.errors import BadInput
from evokernel_mcp.verify import ToleranceArg, verify_vs_pytorch

CANDS = Path(__file__).parent / "candidates"


def src(name: str) -> str:
    return (CANDS / name).read_text()


@pytest.fixture(scope="module", autouse=True)
def _app():
    yield
    anyio.run(close_app)


def verify(candidate: str, task: str | None = "vector_add", **kw):
    kw.setdefault("shapes", ["small"])
    kw.setdefault("seeds", 2)
    kw.setdefault("wait_s", 120)
    # the signed probe case has its own tests (test_verify_harness_errors_and_overrides, tests/kernelbench)
    kw.setdefault("probe", False)
    return anyio.run(lambda: verify_vs_pytorch(src(candidate), task=task, **kw))


@pytest.mark.parametrize("task,cand", [("softmax", "softmax_triton.py"), ("rmsnorm", "rmsnorm_triton.py"),
                                       ("vector_add", "vadd_triton.py")])
def test_correct_triton_candidates_pass(task, cand):
    r = verify(cand, task)
    assert r.passed is True and r.error is None, r
    assert len(r.cases) == 2 and {c.seed for c in r.cases} == {0, 1}
    for c in r.cases:
        assert c.mismatches == 0 and c.unwritten_count == 0 and c.deterministic and not c.inputs_mutated
        assert c.max_abs_err is not None and c.max_abs_err <= max(c.atol + c.rtol * 10, c.floor_abs_err or 0.0)
        assert c.reference == "float64" and c.bar.startswith("rms-floored")
    assert r.device and r.versions.get("torch") and r.provenance


def test_off_by_one_fails_with_mismatch_indices():
    r = verify("softmax_off_by_one.py", "softmax", seeds=1)
    (c,) = r.cases
    assert r.passed is False and not c.passed and r.error is None
    assert c.mismatches > 0 and c.first_mismatch_index is not None and len(c.first_mismatch_index) == 2
    assert c.mismatch_examples and c.unwritten_count == 0


def test_half_written_output_is_caught_as_unwritten():
    r = verify("vadd_half.py", seeds=1)
    (c,) = r.cases
    assert r.passed is False and c.unwritten_count == 500 and c.nan_count == 0
    assert c.first_mismatch_index == [500]


def test_cascade_stops_at_first_failure():
    r = verify("vadd_half.py", seeds=3, shapes=["small", "medium"], stop_on_first_failure=True)
    assert r.passed is False and len(r.cases) == 1


def test_hang_is_killed_and_next_verify_succeeds():
    r = verify("hang.py", seeds=1, timeout_s=2)
    assert r.passed is False and r.error.kind == "timeout"
    assert verify("vadd_triton.py", seeds=1).passed is True


def test_raise_is_reported_with_output_and_next_verify_succeeds():
    r = verify("raises.py", seeds=1)
    assert r.passed is False and r.error.kind == "exception" and "bad block size" in r.error.message
    assert "about to fail" in r.stdout
    assert verify("vadd_triton.py", seeds=1).passed is True


def test_os_exit_is_reported_and_next_verify_succeeds():
    r = verify("exits.py", seeds=1)
    assert r.passed is False and r.error.kind == "crash" and "exited with code 3" in r.error.message
    assert verify("vadd_triton.py", seeds=1).passed is True


def test_kernelbench_file_loads_as_task_and_modelnew_is_checked():
    r = verify("kb_modelnew.py", task=str(CANDS / "kb_problem.py"), shapes=None)
    assert r.passed is True and [c.shape for c in r.cases] == ["default", "default"]
    r2 = anyio.run(lambda: verify_vs_pytorch(src("kb_modelnew.py"), reference=src("kb_problem.py"), seeds=1,
                                             wait_s=120))
    assert r2.passed is True


def test_tolerance_override_tightens_down_to_pytorch_s_own_error():
    # tol 0 leaves only the floor: 2x PyTorch's own native-dtype error (the bar never rejects PyTorch itself)
    r = verify("rmsnorm_triton.py", "rmsnorm", seeds=1, tolerance=ToleranceArg(atol=0.0, rtol=0.0), probe=True)
    for c in r.cases:
        assert c.atol == 0.0 and c.tol == 0.0 and c.tolerance_custom is True and c.floor_abs_err > 0
        assert c.passed == (c.mismatches == 0) and (c.mismatches > 0 or c.max_abs_err <= c.floor_abs_err)


def test_job_outlives_wait_s_and_result_is_fetched_later():
    from evokernel_mcp.runtime.submit import job_result

    r = verify("vadd_triton.py", seeds=1, wait_s=0)
    assert r.passed is None and r.job_id and r.state in ("queued", "running")
    res = anyio.run(lambda: job_result(r.job_id, wait_s=120))
    assert res.finished and res.state == "done" and res.passed is True  # the tool's own fields at the top level
    assert get_app().jobs.status(r.job_id).state == "done"


def test_bad_inputs_are_refused_before_any_job():
    with pytest.raises(BadInput, match="exactly one"):
        anyio.run(lambda: verify_vs_pytorch("def run(x): return x"))
    with pytest.raises(BadInput, match="no shape set"):
        verify("vadd_triton.py", shapes=["huge"])
    with pytest.raises(BadInput, match="does not parse"):
        anyio.run(lambda: verify_vs_pytorch("def run(:", task="vector_add"))
    with pytest.raises(BadInput, match="run"):
        anyio.run(lambda: verify_vs_pytorch("x = 1", task="vector_add"))
