"""MCP adapter for profile_pmc and thread_trace (logic in evokernel_mcp.profile.api)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.profile import api


def register(mcp: MCPServer) -> None:
    mcp.add_tool(api.profile_pmc, name="profile_pmc")
    mcp.add_tool(api.thread_trace, name="thread_trace")
