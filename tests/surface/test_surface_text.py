"""The text block of every tool's result says the verdict and its reason, for a client that shows only the
text: errors (every tool), failed or invalid results (every tool whose result has a verdict), job handles
(every long tool) and job_result. Samples are the tools' own result models, shaped by the live path."""

from __future__ import annotations

from typing import get_type_hints

import anyio
import pytest
from mcp import Client
from surface_samples import result_of

from evokernel_mcp.server import build_server
from evokernel_mcp.surface import registry
from evokernel_mcp.surface.server import EvoServer
from evokernel_mcp.surface.verdict import TEXT_CHARS

VERDICT_FIELDS = {"passed", "ok", "valid", "error", "degraded", "state"}
ITEM_VERDICT_FIELDS = {"passed", "valid"}
_SERVER = build_server()
TOOLS = {t.name: t for t in _SERVER._tool_manager.list_tools()}

CASE_OK = {"shape": "small", "seed": 0, "passed": True, "max_abs_err": 1e-7}
CASE_BAD = {"shape": "full", "seed": 1, "passed": False, "mismatches": 1000, "numel": 4096,
            "first_mismatch_index": [17], "max_abs_err": 0.5}
# tool -> [(the failed result's fields, what its text must say)]
FAILED: dict[str, list[tuple[dict, tuple[str, ...]]]] = {
    "compile_kernel": [({"ok": False, "diagnostics": [{"line": 3, "column": 5, "severity": "error",
                                                       "message": "expected ')' before 'x'"}]},
                        ("FAILED", "line 3:5", "expected ')' before 'x'"))],
    "verify_vs_pytorch": [
        ({"passed": False, "cases": [CASE_OK, CASE_BAD]},
         ("FAILED", "shape=full seed=1", "mismatches=1000 of 4096", "first_mismatch_index=[17]", "max_abs_err=0.5")),
        ({"passed": False, "error": {"kind": "timeout", "message": "the candidate ran past 60 s"}},
         ("FAILED", "timeout: the candidate ran past 60 s"))],
    "benchmark": [
        ({"results": [{"shape": "small", "valid": True, "speedup": 1.2, "speedup_ci": [1.1, 1.3]},
                      {"shape": "full", "valid": False, "invalid_reason": "wrong_output_after_timing",
                       "invalid_detail": "check_fresh: mismatches=12"}]},
         ("1 of 2 INVALID", "shape=full", "wrong_output_after_timing", "check_fresh: mismatches=12",
          "speedup shape=small: 1.2x [1.1, 1.3]")),
        ({"results": [{"shape": "default", "valid": True, "speedup": 3.4, "speedup_ci": [3.3, 3.5],
                       "fraction_of_peak": 0.61}]},
         ("all valid", "speedup shape=default: 3.4x [3.3, 3.5], 0.61 of peak")),
        ({"state": "failed", "error": {"kind": "too_big", "message": "needs 90 GB; pass shapes=['small']"}},
         ("FAILED", "too_big: needs 90 GB; pass shapes=['small']"))],
    "profile_pmc": [({"degraded": True, "degraded_reasons": ["ncu: ERR_NVGPUCTRPERM, counters not permitted"]},
                     ("DEGRADED", "ERR_NVGPUCTRPERM"))],
    "thread_trace": [({"degraded": True, "degraded_reasons": ["no traced wave on CU 0"]},
                      ("DEGRADED", "no traced wave on CU 0"))],
    "evaluate_batch": [({"ranked": [{"name": "a", "valid": True, "speedup": 1.5},
                                    {"name": "b", "valid": False, "failed_stage": "verify",
                                     "reason": "mismatch: 12 of 64 elements"}]},
                        ("1 of 2 INVALID", "name=b", "failed at verify", "mismatch: 12 of 64 elements"))],
    "sweep": [({"ranked": [{"name": "BLOCK=512", "valid": True, "speedup": 1.2},
                           {"name": "BLOCK=64", "valid": False, "failed_stage": "benchmark",
                            "reason": "invalid: wrong_output_in_timed_call"}]},
               ("1 of 2 INVALID", "name=BLOCK=64", "failed at benchmark", "wrong_output_in_timed_call"))],
    "job_status": [({"state": "failed", "error": {"kind": "crash", "message": "the worker died (SIGSEGV)"}},
                    ("FAILED", "crash: the worker died (SIGSEGV)"))],
    "cancel_job": [({"state": "cancelled"}, ("CANCELLED",))],
    "job_result": [({"state": "failed", "finished": True, "error": {"kind": "crash", "message": "worker died"}},
                    ("FAILED", "crash: worker died"))],
}


def _has_verdict(model) -> bool:
    schema = model.model_json_schema()
    if VERDICT_FIELDS & set(schema.get("properties", {})):
        return True
    for prop in schema.get("properties", {}).values():
        items = prop.get("items", {})
        ref = items.get("$ref", "").split("/")[-1]
        if ITEM_VERDICT_FIELDS & set(schema.get("$defs", {}).get(ref, {}).get("properties", {})):
            return True
    return False


def _text(tool: str, data: dict) -> str:
    res = EvoServer._result(None, tool, data)
    assert not res.is_error
    return res.content[0].text


def test_every_tool_with_a_verdict_has_a_failed_sample():
    with_verdict = {name for name, t in TOOLS.items() if _has_verdict(get_type_hints(t.fn)["return"])}
    assert with_verdict - set(FAILED) == set(), "add a failed result of these tools to FAILED"
    assert set(FAILED) <= set(TOOLS)


@pytest.mark.parametrize("tool,fields,expect", [(t, f, e) for t, samples in FAILED.items() for f, e in samples])
def test_failed_result_text_says_the_reason(tool, fields, expect):
    if tool == "job_result":
        status = result_of(TOOLS["job_status"].fn, job_id="j1", kind="verify", tool="verify_vs_pytorch",
                           state="failed").model_dump(mode="json")
        fields = {**fields, "status": status}
    data = result_of(TOOLS[tool].fn, **fields).model_dump(mode="json")
    text = _text(tool, data)
    assert len(text) <= TEXT_CHARS and not text.startswith("{"), text
    for e in expect:
        assert e in text, (tool, e, text)


def test_job_result_of_a_finished_job_speaks_as_its_tool():
    verify = result_of(TOOLS["verify_vs_pytorch"].fn, passed=False, cases=[CASE_OK, CASE_BAD]).model_dump(mode="json")
    status = result_of(TOOLS["job_status"].fn, job_id="j1", kind="verify", tool="verify_vs_pytorch",
                       state="done").model_dump(mode="json")
    text = _text("job_result", {**verify, "job_id": "j1", "finished": True, "status": status})
    assert text.startswith("job_result (verify_vs_pytorch): FAILED") and "mismatches=1000 of 4096" in text, text


@pytest.mark.parametrize("tool", sorted(n for n, t in TOOLS.items() if registry.is_long(t.fn)))
def test_job_handle_text_names_the_job_and_the_next_call(tool):
    handle = {"job_id": "abc123", "tool": tool, "state": "running", "age_s": 50.2, "progress": "2/8 case small",
              "next_call": "job_result(job_id='abc123', wait_s=50)"}
    text = _text(tool, {"state": "running", "job_id": "abc123", "message": "Not finished", "job": handle})
    assert "not finished within wait_s" in text and "abc123" in text and "2/8 case small" in text
    assert "next: job_result(job_id='abc123', wait_s=50)" in text


def test_every_tool_error_text_says_what_was_wrong():
    """Every registered tool, through the client: an unknown argument is an error whose text names it."""
    async def main():
        out = {}
        async with Client(build_server()) as c:
            for name in TOOLS:
                out[name] = await c.call_tool(name, {"bogus_argument": 1})
        return out
    for name, r in anyio.run(main).items():
        text = r.content[0].text
        assert r.is_error and "unknown argument 'bogus_argument'" in text and text.startswith("Error ("), (name, text)


def test_passing_results_say_so_in_the_text():
    verify = result_of(TOOLS["verify_vs_pytorch"].fn, passed=True, cases=[CASE_OK]).model_dump(mode="json")
    assert _text("verify_vs_pytorch", verify).startswith("verify_vs_pytorch: passed")
    ok = result_of(TOOLS["compile_kernel"].fn, ok=True).model_dump(mode="json")
    assert _text("compile_kernel", ok).startswith("compile_kernel: ok")
