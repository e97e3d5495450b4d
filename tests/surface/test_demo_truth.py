"""tools/demo.py reads what a tool accepts from the server's full schema (tools/list hides the advanced
arguments) and its journal and verdict lines say what the results say."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import anyio
from mcp import Client

from evokernel_mcp.server import build_server

DEMO = Path(__file__).resolve().parents[2] / "tools" / "demo.py"


def _demo():
    spec = importlib.util.spec_from_file_location("evk_demo", DEMO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_demo_journals_the_tools_that_take_experiment():
    demo = _demo()

    async def main():
        async with Client(build_server()) as c:
            return await demo.full_schemas(c, (await c.list_tools()).tools)
    schemas = anyio.run(main)
    for tool in ("verify_vs_pytorch", "benchmark"):
        assert demo.journal_args(schemas, tool, "x/v1") == {"experiment": "x/v1"}, tool
    assert demo.journal_args(schemas, "compile_kernel", "x/v1") == {"experiment": "x/v1", "task": "rmsnorm"}
    assert demo.journal_args(schemas, "list_tasks", "x/v1") == {}


def test_journal_line_says_what_happened(capsys):
    demo = _demo()
    schemas = {"verify_vs_pytorch": {"properties": {"experiment": {}}}, "old_tool": {"properties": {}}}
    assert demo.journal_line(schemas, "verify_vs_pytorch", "x/v1", {"result_id": "r-1"}) == "r-1"
    assert demo.journal_line(schemas, "verify_vs_pytorch", "x/v1", {}) is None
    assert demo.journal_line(schemas, "old_tool", "x/v1", {"result_id": None}) is None
    assert demo.journal_line(schemas, "verify_vs_pytorch", "x/v1", None) is None
    out = capsys.readouterr().out.splitlines()
    assert out == ["  journaled as x/v1: result r-1", "  verify_vs_pytorch returned no journal result id for x/v1",
                   "  not journaled: old_tool takes no experiment argument in this build"]


def test_verify_reason_from_the_result():
    demo = _demo()
    wrong = {"passed": False, "cases": [
        {"shape": "small", "seed": 0, "passed": False, "mismatches": 5, "max_abs_err": 1.5},
        {"shape": "small", "seed": 1, "passed": True, "mismatches": 0},
        {"shape": "small", "seed": 0, "probe": True, "passed": False, "mismatches": 7}]}
    assert demo.verify_reason(wrong) == ("12 mismatching elements in 2 of 3 cases; first: shape small seed 0, 5 of "
                                         "them, max_abs_err 1.5")
    assert demo.verify_reason({"error": {"kind": "timeout", "message": "ran past 60 s"}}) == "timeout: ran past 60 s"
