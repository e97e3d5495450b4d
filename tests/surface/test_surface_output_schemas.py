"""Output schemas as listed: tools/list on the wire within WIRE_BUDGET_CHARS, every result still valid
against its tool's listed schema (the SDK's client validates structuredContent against it), and the full
schemas (descriptions, nested types) in evokernel://tools/{name}."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp_types import JSONRPCResponse

from evokernel_mcp.server import build_server
from evokernel_mcp.surface import registry
from evokernel_mcp.surface.server import EvoServer

WIRE_BUDGET_CHARS = 40_000
REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tests" / "fixtures" / "h200"  # recorded on the H200 (SOURCES.md)


def _listing_and_full():
    async def main():
        async with Client(build_server()) as c:
            listing = await c.list_tools()
            full = {t.name: json.loads((await c.read_resource(f"evokernel://tools/{t.name}")).contents[0].text)
                    for t in listing.tools}
            return listing, full
    return anyio.run(main)


@pytest.fixture(scope="module")
def listed():
    return _listing_and_full()


def test_tools_list_response_on_the_wire_within_budget(listed):
    """The JSON-RPC response as a transport writes it (the stdio writer's model_dump_json call)."""
    listing, _ = listed
    wire = JSONRPCResponse(jsonrpc="2.0", id=1, result=listing.model_dump(by_alias=True, mode="json",
                                                                           exclude_none=True))
    chars = len(wire.model_dump_json(by_alias=True, exclude_unset=True))
    out = {t.name: len(json.dumps(t.output_schema, separators=(",", ":"))) for t in listing.tools}
    assert chars <= WIRE_BUDGET_CHARS, f"tools/list is {chars} characters on the wire; output schemas: {out}"


def _keywords(node, in_properties: bool = False) -> set[str]:
    """The schema keywords used anywhere (property names are not keywords)."""
    out: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if not in_properties:
                out.add(k)
            out |= _keywords(v, in_properties=not in_properties and k in ("properties", "$defs"))
    elif isinstance(node, list):
        for v in node:
            out |= _keywords(v)
    return out


def test_listed_output_schemas_are_valid_and_name_fields_without_descriptions(listed):
    listing, full = listed
    for t in listing.tools:
        schema = t.output_schema
        Draft202012Validator.check_schema(schema)
        assert not _keywords(schema) & {"description", "title", "default", "enum"}, t.name
        assert schema["type"] == "object" and "provenance" in schema["properties"], t.name
        # every top-level field of the full schema is listed, with its JSON type
        assert set(schema["properties"]) == set(full[t.name]["output_schema"]["properties"]), t.name
        for name, prop in schema["properties"].items():
            assert "type" in prop or "anyOf" in prop, (t.name, name)


def test_shared_object_types_are_written_once(listed):
    listing, _ = listed
    bench = {t.name: t for t in listing.tools}["benchmark"].output_schema
    items = bench["properties"]["results"]["items"]["properties"]
    assert items["candidate"] == items["baseline"] == {"$ref": "#/$defs/TimingStats"}
    assert "median_ms" in bench["$defs"]["TimingStats"]["properties"]
    assert json.dumps(bench).count('"median_ms"') == 1


def test_full_schemas_keep_descriptions(listed):
    _, full = listed
    out = full["benchmark"]["output_schema"]
    assert "Read this before speedup" in json.dumps(out)
    assert "job" in out["properties"] and "trimmed" in out["properties"]


def _validate(tool: str, schema: dict, data: dict) -> None:
    sc = EvoServer._result(None, tool, data).structured_content  # the path every live result takes
    errors = sorted(Draft202012Validator(schema).iter_errors(sc), key=str)
    assert not errors, (tool, [e.message for e in errors[:3]])


def test_recorded_results_and_job_handles_validate_against_listed_schemas(listed):
    listing, _ = listed
    by = {t.name: t.output_schema for t in listing.tools}
    conv = json.loads((RESULTS / "conv3d_baseline_H200_2026-11-22.json").read_text())
    dev = json.loads((RESULTS / "query_rocminfo_nvidia-h200_2026-11-22.json").read_text())["report"]
    _validate("benchmark", by["benchmark"], conv["benchmark"])
    _validate("measure_ceilings", by["measure_ceilings"], conv["ceilings"])
    _validate("query_rocminfo", by["query_rocminfo"], dev)
    server = build_server()
    long_tools = [t.name for t in server._tool_manager.list_tools() if registry.is_long(t.fn)]
    handle = {"job_id": "j1", "tool": "x", "state": "running", "age_s": 1.0, "next_call": "job_result(job_id='j1')"}
    for name in long_tools:
        _validate(name, by[name], {"state": "running", "job_id": "j1", "message": "m", "job": handle})
