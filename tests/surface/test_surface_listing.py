"""tools/list as a model sees it: titles and annotations on every tool, compact schemas within budget,
long tools with wait_s <= 50 and `detach`, prompts and completions answering."""

from __future__ import annotations

import inspect
import json

import anyio
import pytest
from mcp import Client

from evokernel_mcp.server import build_server
from evokernel_mcp.surface import registry
from evokernel_mcp.surface.shaping import CHARS_PER_TOKEN

LIST_BUDGET_TOKENS = 3100  # 26 tools; what a model reads every turn


def _listing():
    async def main():
        async with Client(build_server()) as c:
            return (await c.list_tools()).tools
    return anyio.run(main)


@pytest.fixture(scope="module")
def tools():
    return _listing()


def test_visible_listing_within_3k_tokens(tools):
    """Rule: a token is ~4 characters; visible = name + description + input schema (compact JSON)."""
    chars = sum(len(t.name) + len(t.description or "") + len(json.dumps(t.input_schema, separators=(",", ":")))
                for t in tools)
    assert chars / CHARS_PER_TOKEN <= LIST_BUDGET_TOKENS, (
        f"tools/list visible part is ~{chars / CHARS_PER_TOKEN:.0f} tokens > {LIST_BUDGET_TOKENS}: move rarely used "
        "arguments to surface/schema.py ADVANCED or shorten the first sentence of the docstring")


def test_every_tool_has_registry_entry_title_and_annotations(tools):
    missing = [t.name for t in tools if t.name not in registry.TOOLS]
    assert not missing, f"add these tools to evokernel_mcp/surface/registry.py TOOLS: {missing}"
    for t in tools:
        a = t.annotations
        assert t.title and a is not None, t.name
        for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"):
            assert getattr(a, hint) is not None, (t.name, hint)
    by = {t.name: t for t in tools}
    assert by["list_docs"].annotations.read_only_hint is True
    for name in ("verify_vs_pytorch", "benchmark", "profile_pmc", "thread_trace"):
        assert by[name].annotations.destructive_hint is True and by[name].annotations.read_only_hint is False


def test_unknown_tool_gets_safe_default_hints():
    m = registry.meta_for("some_new_tool")
    assert m.title == "Some new tool" and m.read_only is False and m.destructive is True and m.idempotent is False


def test_long_tools_wait_at_most_50s_and_take_detach(tools):
    server = build_server()
    long_tools = [t for t in server._tool_manager.list_tools() if registry.is_long(t.fn)]
    assert {"verify_vs_pytorch", "benchmark", "profile_pmc", "thread_trace", "measure_ceilings"} <= {
        t.name for t in long_tools}
    by = {t.name: t for t in tools}
    for t in long_tools:
        default = inspect.signature(t.fn).parameters["wait_s"].default
        assert default <= 50, f"{t.name} waits {default} s by default (clients cut at 60 s)"
        assert "detach" in by[t.name].input_schema["properties"], t.name
        out = by[t.name].output_schema
        assert "job" in out["properties"] and "required" not in out, t.name


def test_schemas_are_compact_and_typed(tools):
    by = {t.name: t for t in tools}
    text = json.dumps([t.input_schema for t in tools])
    assert '"title"' not in text.replace('"title": {', "")  # no title keywords
    ck = by["compile_kernel"].input_schema["properties"]
    assert "gfx942" in ck["target"]["enum"] and "sm_90" in ck["target"]["enum"]
    assert ck["language"]["enum"] == ["triton", "hip", "cuda"]
    assert "num_warps" in ck["options"]["properties"]
    assert by["profile_pmc"].input_schema["properties"]["preset"]["enum"][0] == "overview"
    assert "shapes" in by["profile_pmc"].input_schema["properties"]
    assert "shapes" in by["thread_trace"].input_schema["properties"]


def test_full_schema_resource_has_advanced_arguments():
    async def main():
        async with Client(build_server()) as c:
            res = await c.read_resource("evokernel://tools/benchmark")
            return json.loads(res.contents[0].text)
    full = main_result = anyio.run(main)
    assert "timer" in full["input_schema"]["properties"] and "detach" in full["input_schema"]["properties"]
    assert main_result["description"].startswith("Time a verified candidate")


def test_prompts_and_completions():
    async def main():
        async with Client(build_server()) as c:
            prompts = {p.name for p in (await c.list_prompts()).prompts}
            got = await c.get_prompt("optimize_kernel", {"task": "vector_add", "target": "gfx942"})
            from mcp_types import PromptReference, ResourceTemplateReference

            tasks = await c.complete(PromptReference(type="ref/prompt", name="optimize_kernel"),
                                     {"name": "task", "value": "vec"})
            targets = await c.complete(PromptReference(type="ref/prompt", name="optimize_kernel"),
                                       {"name": "target", "value": "gfx9"})
            paths = await c.complete(ResourceTemplateReference(type="ref/resource", uri="evokernel://docs/{+path}{?anchor}"),
                                     {"name": "path", "value": "gpu_arch/l"})
            return prompts, got, tasks, targets, paths
    prompts, got, tasks, targets, paths = anyio.run(main)
    assert {"optimize_kernel", "port_kernelbench"} <= prompts
    text = got.messages[0].content.text
    assert "vector_add" in text and "verify_vs_pytorch" in text and "gfx942" in text
    assert tasks.completion.values == ["vector_add"]
    assert set(targets.completion.values) == {"gfx90a", "gfx942", "gfx950"}
    assert "gpu_arch/lds.md" in paths.completion.values


def test_shape_set_completion_uses_the_chosen_task():
    from evokernel_mcp.surface.completions import complete

    assert "small" in complete("shapes", "", {"task": "vector_add"}).values
    assert complete("shapes", "", {}).values == []
