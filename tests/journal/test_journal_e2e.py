"""The acceptance session through the MCP client (in-memory server, CPU path): compile, verify and benchmark
three variants of vector_add (one wrong), then the journal: three entries, best_so_far (valid verdicts only),
a compare of two variants, a distilled report listing the failure once with its lesson."""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import pytest
from mcp import Client

from evokernel_mcp.journal import record_call
from evokernel_mcp.server import build_server

GOOD = (Path(__file__).resolve().parents[1] / "benchmark" / "candidates" / "vector_add_triton.py").read_text()
VARIANTS = {
    "vadd/block1024": GOOD,
    "vadd/block256": GOOD.replace("BLOCK=1024", "BLOCK=256").replace("cdiv(n, 1024)", "cdiv(n, 256)"),
    "vadd/off-by-one": GOOD.replace("tl.load(y_ptr + offs, mask=mask)", "tl.load(y_ptr + offs, mask=mask) + 1.0"),
}
SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


def kernel_part(source: str) -> str:
    return source.split("def run(")[0]


async def call(c: Client, tool: str, args: dict) -> dict:
    r = await c.call_tool(tool, args)
    assert not r.is_error, (tool, r.content[0].text[:1000])
    return r.structured_content


async def run_variant(c: Client, schemas: dict, label: str, source: str) -> None:
    block = 256 if "256" in label else 1024
    comp = await call(c, "compile_kernel", {
        "source": kernel_part(source), "language": "triton", "kernel": "add_kernel", "target": "gfx942",
        "signature": SIGNATURE, "constexprs": {"BLOCK": block}, "experiment": label, "task": "vector_add"})
    assert comp["ok"] and comp["result_id"].startswith("r-")
    for tool, args in (("verify_vs_pytorch", {"shapes": ["small"], "seeds": 1, "wait_s": 240}),
                       ("benchmark", {"shapes": ["small"], "min_reps": 3, "max_time_s": 1e-6, "wait_s": 240})):
        wired = "experiment" in schemas[tool].get("properties", {})
        args = {"task": "vector_add", "candidate": source, **args, **({"experiment": label} if wired else {})}
        res = await call(c, tool, args)
        if not wired:  # until verify/benchmark take `experiment`, record what the real tool returned
            assert record_call(tool, experiment=label, task="vector_add", source=source, arguments=args, result=res)


@pytest.mark.long
def test_scripted_session_journal(journal):
    async def main():
        async with Client(build_server()) as c:
            schemas = {t.name: t.input_schema for t in (await c.list_tools()).tools}
            for label, source in VARIANTS.items():
                await run_variant(c, schemas, label, source)

            lst = await call(c, "list_experiments", {"task": "vector_add", "sort": "step"})
            assert lst["total"] == 3 and [e["label"] for e in lst["experiments"]] == list(VARIANTS)
            verdicts = {e["label"]: e["verdict"] for e in lst["experiments"]}
            why = [(e.get("failure_class"), e.get("failure_detail")) for e in lst["experiments"]]
            assert verdicts == {"vadd/block1024": "valid", "vadd/block256": "valid", "vadd/off-by-one": "failed"}, why
            bad = lst["experiments"][2]
            assert bad["failure_class"] == "wrong_output" and "shape small" in bad["failure_detail"]

            best = await call(c, "best_so_far", {"task": "vector_add"})
            (entry,) = best["best"]
            times = {e["label"]: e["times"][0]["median_ms"] for e in lst["experiments"][:2]}
            assert entry["shape"] == "small" and entry["label"] == min(times, key=times.get)
            assert entry["median_ms"] == min(times.values()) and entry["candidates"] == 2
            assert sum(best["excluded"].values()) == 1  # the wrong variant, whatever its time

            cmp = await call(c, "compare_experiments", {"a": "vadd/block1024", "b": "vadd/block256"})
            assert "BLOCK=256" in cmp["source"]["diff"] and not cmp["source"]["identical"]
            assert any(d["name"].endswith("vgpr_count") for d in cmp["resources"])
            (t,) = cmp["times"]
            assert t["name"] == "small.median_ms" and t["ratio_ci"][0] <= t["ratio"] <= t["ratio_ci"][1]
            assert t["verdict"] in ("a faster", "b faster", "no difference shown")

            await call(c, "record_note", {"text": "An added constant in the kernel shows at every element: verify "
                                          "catches it on the small shape.", "experiment": "vadd/off-by-one",
                                          "evidence": {"kind": "result", "result_id": bad["latest"]["verify_vs_pytorch"]}})
            await call(c, "record_note", {"text": "BLOCK=256 should be faster on MI300X.", "evidence": "unverified",
                                          "task": "vector_add", "kind": "claim"})
            d = await call(c, "distill", {"task": "vector_add"})
            (f,) = d["failures"]
            assert f["failure_class"] == "wrong_output" and f["count"] == 1 and f["labels"] == ["vadd/off-by-one"]
            assert f["lessons"] == ["An added constant in the kernel shows at every element: verify catches it on "
                                    "the small shape."]
            assert [n["text"] for n in d["unverified_claims"]] == ["BLOCK=256 should be faster on MI300X."]
            md = (await c.read_resource("evokernel://journal/vector_add/distilled")).contents[0].text
            assert md.count("**wrong_output**") == 1 and "BLOCK=256 should be faster" in md
            exp = await call(c, "export_trajectory", {"task": "vector_add"})
            assert exp["points"] == 3 and exp["chart_uri"].endswith("/trajectory.png")
            png = (await c.read_resource(exp["chart_uri"])).contents[0]  # as tools/journey.py saves it
            assert base64.b64decode(png.blob)[:8] == b"\x89PNG\r\n\x1a\n"

    anyio.run(main)
