"""record_call (the hook the tools call): key results per tool, source dedup, tolerance, never raising."""

from __future__ import annotations

import json
import sqlite3

import pytest
from journal_helpers import bench, compiled, verify

from evokernel_mcp.journal import get_store, record_call
from evokernel_mcp.journal.extract import benchmark_summary, extract, verify_summary
from evokernel_mcp.profile.models import DerivedValue, Finding, PmcDispatch, PmcResult, ToolInfo, TraceResult

SRC = "import torch\n\ndef run(x, y):\n    return x + y\n"


def _rows(path, table: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def test_no_experiment_records_nothing(journal):
    assert record_call("benchmark", experiment=None, task="vector_add", source=SRC, arguments={},
                       result=bench({"small": 1.0})) is None
    assert not journal.exists()


def test_each_tool_key_results_and_result_ids(journal):
    rid_c = record_call("compile_kernel", experiment="v1", task="vector_add", source="@triton.jit ...",
                        arguments={"language": "triton", "kernel": "add_kernel"}, result=compiled(vgpr=40, lds=4096))
    rid_v = record_call("verify_vs_pytorch", experiment="v1", task="vector_add", source=SRC,
                        arguments={"candidate": SRC, "shapes": ["small"]}, result=verify(True, 1e-7))
    rid_b = record_call("benchmark", experiment="v1", task="vector_add", source=SRC, arguments={"candidate": SRC},
                        result=bench({"small": 1.5, "full": 2.0}))
    pmc = PmcResult(tool=ToolInfo(name="ncu"), device="cuda:0", dispatches=[PmcDispatch(
        kernel="add_kernel", duration_ns=1500.0, counters={"dram__bytes.sum": 1.2e7, "sm__cycles": 3e4},
        derived={"dram_gbs": DerivedValue(value=3900.0, unit="GB/s", formula="bytes/time")})],
        findings=[Finding(text="memory-bound: DRAM 89% of peak", kind="bottleneck", evidence={"dram_pct": 89.0})])
    rid_p = record_call("profile_pmc", experiment="v1", task="vector_add", source=SRC, arguments={}, result=pmc)
    trace = TraceResult(tool=ToolInfo(name="rocprofv3"), kernel="add_kernel",
                        class_breakdown={"VMEM": 0.6, "VALU": 0.3, "waitcnt": 0.1}, stall_reasons={"vmem_wait": 0.8})
    rid_t = record_call("thread_trace", experiment="v1", task="vector_add", source=SRC, arguments={}, result=trace)
    ids = [rid_c, rid_v, rid_b, rid_p, rid_t]
    assert all(i and i.startswith("r-") and len(i) == 14 for i in ids) and len(set(ids)) == 5
    rows = {r["tool"]: r for r in _rows(journal, "results")}
    assert [r["id"] for r in _rows(journal, "results")] == ids
    comp = json.loads(rows["compile_kernel"]["summary"])
    assert comp["kernels"][0]["vgpr_count"] == 40 and comp["kernels"][0]["lds_bytes"] == 4096
    assert comp["kernels"][0]["waves_per_simd"] == 8 and comp["kernels"][0]["limiter"] == "vgpr"
    ver = json.loads(rows["verify_vs_pytorch"]["summary"])
    assert ver["passed"] is True and ver["max_abs_err"] == pytest.approx(1e-7)
    assert rows["verify_vs_pytorch"]["verdict"] == "ok"
    b = json.loads(rows["benchmark"]["summary"])
    small = next(s for s in b["shapes"] if s["shape"] == "small")
    assert small["median_ms"] == 1.5 and small["speedup"] == pytest.approx(2.0) and small["valid"] is True
    assert small["speedup_ci"][0] < 2.0 < small["speedup_ci"][1] and small["noise"] is False
    p = json.loads(rows["profile_pmc"]["summary"])
    assert p["dispatches"][0]["derived"]["dram_gbs"] == {"value": 3900.0, "unit": "GB/s"}
    assert p["findings"] == ["memory-bound: DRAM 89% of peak"] and p["dispatches"][0]["counters"]["dram__bytes.sum"]
    t = json.loads(rows["thread_trace"]["summary"])
    assert list(t["class_breakdown"]) == ["VMEM", "VALU", "waitcnt"] and t["stall_reasons"] == {"vmem_wait": 0.8}


def test_source_stored_once_and_long_arguments_by_hash(journal):
    ref = "class Model:\n    pass\n" * 40  # > 256 chars: stored as a source, referenced by sha256
    for label in ("a", "b", "c"):
        record_call("verify_vs_pytorch", experiment=label, task=None, source=SRC,
                    arguments={"candidate": SRC, "reference": ref, "seeds": 3}, result=verify(True))
    sources = _rows(journal, "sources")
    assert len(sources) == 2 and {s["text"] for s in sources} == {SRC, ref}
    res = _rows(journal, "results")
    assert len({r["source_sha256"] for r in res}) == 1
    args = json.loads(res[0]["arguments"])
    assert args["reference"]["chars"] == len(ref) and args["seeds"] == 3
    assert res[0]["task"].startswith("ref-")  # a reference given as source: its own task key


def test_benchmark_grown_fields_and_missing_fields_tolerated(journal):
    grown = bench({"small": 1.0}).model_dump(mode="json")
    grown["results"][0].update(valid=False, invalid_reason="below_physical_floor", speedup=None)
    grown["results"][0]["candidate"] = None  # "when valid is false the timing figures are null"
    grown["results"].append({"shape": "full", "valid": True, "candidate": {"median_ms": 4.0}})
    summary, verdict, cls, _ = benchmark_summary(grown)
    assert verdict == "failed" and cls == "below_physical_floor"
    assert summary["shapes"][0]["valid"] is False and "median_ms" not in summary["shapes"][0]
    assert summary["shapes"][1] == {"shape": "full", "median_ms": 4.0, "valid": True}
    for tool in ("compile_kernel", "verify_vs_pytorch", "benchmark", "profile_pmc", "thread_trace", "other"):
        summary, verdict, _, _ = extract(tool, {})
        assert isinstance(summary, dict) and verdict in ("ok", "failed", "pending", "info")
    assert record_call("benchmark", experiment="g", task="t1", source=SRC, arguments={}, result=grown)


def test_verify_failure_classes():
    cases = {
        "nan_output": dict(nan_count=5, mismatches=5),
        "unwritten_output": dict(unwritten_count=7, mismatches=7),
        "wrong_output": dict(mismatches=3),
        "nondeterministic": dict(deterministic=False),
    }
    for cls, extra in cases.items():
        res = verify(False, 0.5, **extra).model_dump(mode="json")
        summary, verdict, got, _ = verify_summary(res)
        assert (verdict, got) == ("failed", cls), extra
        assert "shape small seed 0" in summary["failure_detail"]
    crashed = {"passed": False, "state": "done", "error": {"kind": "gpu_fault", "message": "illegal address"}}
    assert verify_summary(crashed)[1:3] == ("failed", "gpu_fault")
    pending = {"passed": None, "state": "running", "job_id": "job-1"}
    assert verify_summary(pending)[1:3] == ("pending", None)


def test_never_raises(journal, tmp_path, use_settings, caplog):
    assert record_call("verify", experiment="bad label with spaces", task="t", source=SRC, arguments={},
                       result=verify(True)) is None
    assert record_call("verify", experiment="ok", task="t", source=SRC, arguments={"x": object()},
                       result={"passed": True, "cases": "not a list"}) is not None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    use_settings(journal=blocker / "sub" / "j.sqlite3")  # parent is a file: cannot create
    assert record_call("verify", experiment="ok", task="t", source=SRC, arguments={}, result=verify(True)) is None
    assert "journal: could not record" in caplog.text


def test_store_is_wal_and_consistent(journal):
    record_call("verify", experiment="v", task="t", source=SRC, arguments={}, result=verify(True))
    con = sqlite3.connect(journal)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        con.close()
    assert get_store().integrity_check() == "ok"
