"""Placeholder: this area's tools are not registered yet."""

from mcp.server.mcpserver import MCPServer


def register(mcp: MCPServer) -> None:  # noqa: ARG001
    return None
