"""MCP adapter of the docs: tools list_docs / search_docs / read_doc, one static resource per page
(evokernel://docs/<path>, listed by resources/list) and the template
evokernel://docs/{+path}{?anchor} (any page; ?anchor=<slug> reads one section)."""

from __future__ import annotations

import logging

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources.types import FunctionResource

from evokernel_mcp.docs import read
from evokernel_mcp.docs.safety import resolve_doc
from evokernel_mcp.errors import EvoError

log = logging.getLogger(__name__)


def _mime(path: str) -> str:
    return "text/markdown" if path.endswith(".md") else "text/plain"


def read_resource_text(path: str, anchor: str | None = None) -> str:
    """Full page text (or one section's text), as ResourceError on bad paths/anchors."""
    try:
        if anchor:
            return read.read_doc(path, anchor).text
        return resolve_doc(path)[1].read_text(encoding="utf-8")
    except EvoError as e:
        raise ResourceError(str(e)) from e


def _add_page_resources(mcp: MCPServer) -> None:
    for uri, info in read.page_uris():
        mcp.add_resource(FunctionResource(
            uri=uri, name=info.path, title=info.title, mime_type=_mime(info.path),
            description=f"{info.description} ({info.size_bytes} bytes, ~{info.tokens} tokens)".strip(),
            meta={"size_bytes": info.size_bytes, "tokens": info.tokens, "sections": len(info.sections)},
            fn=lambda p=info.path: read_resource_text(p),
        ))


def register(mcp: MCPServer) -> None:
    mcp.add_tool(read.list_docs, name="list_docs")
    mcp.add_tool(read.search_docs, name="search_docs")
    mcp.add_tool(read.read_doc, name="read_doc")
    try:
        _add_page_resources(mcp)
    except Exception:  # noqa: BLE001 - a broken docs tree must not stop the server
        log.exception("docs: could not list the doc pages as resources")

    @mcp.resource("evokernel://docs/{+path}{?anchor}", name="doc_page", mime_type="text/markdown",
                  description="A doc page by path (e.g. evokernel://docs/gpu_arch/lds.md), or one section "
                  "with ?anchor=<slug> (anchors from list_docs).")
    def doc_page(path: str, anchor: str | None = None) -> str:
        return read_resource_text(path, anchor)
