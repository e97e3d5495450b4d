"""Every tool's default result fits a context window.

The rule: a token is ~4 characters (shaping.CHARS_PER_TOKEN), and the budget is counted on
structuredContent as a client shows it to the model (compact JSON). Results come from the tools
themselves on this host (docs, tasks, devices, jobs) and from outputs recorded on an NVIDIA H200
(tests/fixtures/h200/, tests/fixtures/cuda/) pushed through the same shaping as a live call.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from evokernel_mcp.server import build_server
from evokernel_mcp.surface import shaping, verdict
from evokernel_mcp.surface.server import EvoServer

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "h200"
CUDA = REPO / "tests" / "fixtures" / "cuda"
BUDGET = shaping.BUDGET_TOKENS * shaping.CHARS_PER_TOKEN


def _chars(sc) -> int:
    return len(json.dumps(sc, separators=(",", ":"), ensure_ascii=False))


def _shaped(tool: str, data: dict) -> dict:
    res = EvoServer._result(None, tool, data)  # the path every live result takes (self is unused)
    assert not res.is_error
    return res.structured_content


def _calls():
    from evokernel_mcp.docs.index import get_index
    from evokernel_mcp.tasks import task_names

    calls = [("query_rocminfo", {}), ("list_tasks", {}), ("list_docs", {}), ("list_jobs", {}),
             ("search_docs", {"query": "LDS bank conflicts gfx942", "top_k": 20}),
             ("list_docs", {"root": "gpu_arch"})]
    calls += [("get_task", {"task": t}) for t in task_names()]
    calls += [("read_doc", {"path": p}) for p in get_index().pages]
    return calls


def test_live_default_results_within_budget():
    async def main():
        sizes = {}
        async with Client(build_server()) as c:
            for tool, args in _calls():
                r = await c.call_tool(tool, args)
                assert not r.is_error, (tool, args, r.content)
                sizes[f"{tool} {args}"] = _chars(r.structured_content)
                text = r.content[0].text
                assert len(text) <= verdict.TEXT_CHARS and not text.lstrip().startswith("{"), (tool, text)  # not JSON
        return sizes
    sizes = anyio.run(main)
    over = {k: v for k, v in sizes.items() if v > BUDGET}
    assert not over, f"over {shaping.BUDGET_TOKENS} tokens: {over}"


def test_recorded_h200_benchmark_ceilings_devices_within_budget():
    conv = json.loads((H200 / "conv3d_baseline_H200_2026-11-22.json").read_text())
    dev = json.loads((H200 / "query_rocminfo_nvidia-h200_2026-11-22.json").read_text())["report"]
    for tool, data in (("benchmark", conv["benchmark"]), ("measure_ceilings", conv["ceilings"]),
                       ("query_rocminfo", dev)):
        sc = _shaped(tool, data)
        assert _chars(sc) <= BUDGET, tool
        assert "trimmed" not in sc, f"{tool}: a recorded default result should fit without cutting"
    sc = _shaped("benchmark", conv["benchmark"])
    assert "null" not in json.dumps(sc)  # null fields omitted
    assert _chars(sc) < _chars(conv["benchmark"])


def _h200_pmc():
    from evokernel_mcp.profile import collect, presets
    from evokernel_mcp.profile.ncu_parsers import parse_ncu_raw_csv

    wanted = set(presets.ncu_metrics("overview", None))
    raw = parse_ncu_raw_csv((CUDA / "ncu_raw_axpy_full_h200.csv").read_text())
    for d in raw:  # what an overview run collects (the recording has every section)
        d.counters = {k: v for k, v in d.counters.items() if k in wanted or k.split(".")[0] in wanted}
    assert all(d.counters for d in raw)
    spec = collect.table_spec("sm_90", "nvidia", "NVIDIA H200")
    ds = collect._pmc_dispatches(raw, spec, 3)
    names = sorted({k for d in raw for k in d.counters})
    return collect._pmc_result("ncu", "/usr/local/cuda/bin/ncu", "2025.3.1", ["ncu", "--metrics", "..."], spec, ds,
                               len(raw), {"raw.csv": "x"}, names, [names], "overview")


def _h200_trace():
    from evokernel_mcp.profile import collect
    from evokernel_mcp.profile.ncu_parsers import parse_ncu_source_csv

    rows = parse_ncu_source_csv((CUDA / "ncu_source_sass_fma_loop_h200.csv").read_text())
    return collect.trace_result(rows, "nvidia", "fma_loop", "ncu", "/usr/local/cuda/bin/ncu", "2025.3.1",
                                ["ncu"], 20, {"source.csv": "x"}, [])


@pytest.mark.parametrize("tool,make", [("profile_pmc", _h200_pmc), ("thread_trace", _h200_trace)])
def test_recorded_h200_profile_and_trace_within_budget(tool, make):
    res = make()
    sc = _shaped(tool, res.model_dump(mode="json"))
    assert _chars(sc) <= BUDGET, (tool, _chars(sc))
    assert sc.get("dispatches") or sc.get("hot_instructions")


def test_over_budget_result_is_cut_with_an_artifact_and_a_link():
    big = {"results": [{"shape": f"s{i}", "note": "x" * 300, "median_ms": 1.0 / (i + 1)} for i in range(200)],
           "provenance": [{"field": f"results[{i}].median_ms", "source": "measured", "detail": "H200"}
                          for i in range(200)]}
    res = EvoServer._result(None, "benchmark", big)
    sc = res.structured_content
    assert _chars(sc) <= BUDGET
    t = sc["trimmed"]
    assert t["full_chars"] > BUDGET and any(o.startswith("results") for o in t["omitted"])
    assert sc["provenance"] == [{"field": "results[0-199].median_ms", "source": "measured", "detail": "H200"}]
    links = [c for c in res.content if c.type == "resource_link"]
    assert links and links[0].uri == t["uri"]
    from evokernel_mcp import artifacts

    full = json.loads(artifacts.path_of(t["artifact_id"], "result.json").read_text())
    assert len(full["results"]) == 200


def test_shaping_rounds_drops_nulls_and_dedupes():
    data = {"a": 0.123456789, "b": None, "c": [1.0000001e-7, 12345.678, 1732291234.567], "stdout": "",
            "provenance": [{"field": "a", "source": "ncu", "detail": "v1"}, {"field": "c", "source": "ncu",
                                                                              "detail": "v1"},
                           {"field": "d", "source": "torch", "detail": None}]}
    out = shaping.prune(data)
    assert out["a"] == 0.1235 and "b" not in out and "stdout" not in out
    assert out["c"] == [1e-07, 12346.0, 1732291235.0]
    assert out["provenance"] == [{"field": "a, c", "source": "ncu", "detail": "v1"},
                                 {"field": "d", "source": "torch"}]


def test_list_docs_names_every_page_within_budget_uncut():
    """The default list_docs is a full table of contents: every page of the doc index by path and title,
    within the budget without cutting; sections come with detail='brief' or path=..."""
    from evokernel_mcp.docs.index import get_index

    async def main():
        async with Client(build_server()) as c:
            return (await c.call_tool("list_docs", {})).structured_content

    sc = anyio.run(main)
    pages = get_index().pages
    assert len(pages) >= 40  # the shipped docs (gpu_arch and reference_kernels)
    assert "trimmed" not in sc and _chars(sc) <= BUDGET
    assert {d["path"]: d["title"] for d in sc["docs"]} == {p.path: p.title for p in pages.values()}
