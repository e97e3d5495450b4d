"""MCP adapter for compile_kernel (the logic is in evokernel_mcp/compile/api.py)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer


def register(mcp: MCPServer) -> None:
    from evokernel_mcp.compile.api import compile_kernel

    mcp.add_tool(compile_kernel, name="compile_kernel")
