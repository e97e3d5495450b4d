"""The docs through the MCP SDK client: in-memory on a tmp tree, and over stdio on the real resources/."""

from __future__ import annotations

import os
import sys

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError


def test_in_memory_resources_templates_and_tools(docs_tree):
    from evokernel_mcp.server import build_server

    async def main():
        async with Client(build_server()) as client:
            res = {str(r.uri): r for r in (await client.list_resources()).resources}
            lds = res["evokernel://docs/gpu_arch/lds.md"]
            assert lds.title == "LDS: local data share" and lds.mime_type == "text/markdown"
            assert "Local data share" in lds.description and lds.meta["size_bytes"] > 0
            assert "evokernel://docs/reference_kernels/vadd/kernel.py" in res
            page = await client.read_resource("evokernel://docs/gpu_arch/lds.md")
            assert page.contents[0].text == (docs_tree / "gpu_arch/lds.md").read_text()
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert "evokernel://docs/{+path}{?anchor}" in templates
            sec = await client.read_resource("evokernel://docs/gpu_arch/lds.md?anchor=allocation-granule")
            assert sec.contents[0].text.startswith("### Allocation granule")
            assert "Bank conflicts" not in sec.contents[0].text
            for bad in ("evokernel://docs/gpu_arch/../../etc/passwd", "evokernel://docs/gpu_arch/nope.md",
                        "evokernel://docs/gpu_arch/lds.md?anchor=nope"):
                with pytest.raises(MCPError):
                    await client.read_resource(bad)
            r = await client.call_tool("read_doc", {"path": "../etc/passwd"})
            assert r.is_error and ".." in r.content[0].text
            r = await client.call_tool("search_docs", {"query": "LDS size gfx950", "top_k": 1})
            assert not r.is_error and r.structured_content["results"][0]["anchor"] == "lds-size-per-arch"

    anyio.run(main)


def test_stdio_docs_on_real_content(tmp_path):
    env = dict(os.environ, EVOKERNEL_HOME=str(tmp_path / "home"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=env)

    async def main():
        async with Client(params) as client:
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert {"evokernel://docs/gpu_arch/index.md", "evokernel://docs/gpu_arch/quick_reference.md"} <= uris
            page = await client.read_resource("evokernel://docs/gpu_arch/index.md")
            assert page.contents[0].text.startswith("# ")
            listed = await client.call_tool("list_docs", {})
            assert not listed.is_error
            docs = {d["path"]: d for d in listed.structured_content["docs"]}
            assert "gpu_arch/quick_reference.md" in docs and "trimmed" not in listed.structured_content
            one = await client.call_tool("list_docs", {"path": "gpu_arch/quick_reference.md"})
            assert one.structured_content["docs"][0]["sections"]
            found = await client.call_tool("search_docs", {"query": "LDS size gfx950", "top_k": 3})
            assert not found.is_error and found.structured_content["results"]
            hit = found.structured_content["results"][0]
            sec = await client.call_tool("read_doc", {"path": hit["path"], "anchor": hit["anchor"]})
            assert not sec.is_error and sec.structured_content["anchor"] == hit["anchor"]
            assert sec.structured_content["source"] == "resources/" + hit["path"]
            bad = await client.call_tool("read_doc", {"path": "/etc/passwd"})
            assert bad.is_error and "absolute" in bad.content[0].text

    anyio.run(main)
