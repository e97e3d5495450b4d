"""MCP adapter for device discovery: registers query_rocminfo (logic in evokernel_mcp.devices.discovery)."""

from mcp.server.mcpserver import MCPServer

from evokernel_mcp.devices.discovery import query_rocminfo


def register(mcp: MCPServer) -> None:
    mcp.add_tool(query_rocminfo, name="query_rocminfo")
