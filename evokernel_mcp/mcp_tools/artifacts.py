from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from evokernel_mcp import artifacts
from evokernel_mcp.errors import EvoError


def register(mcp: MCPServer) -> None:
    mcp.add_tool(artifacts.read_artifact, name="read_artifact")

    @mcp.resource("evokernel://artifacts/{artifact_id}/{name}", name="artifact_file",
                  description="One file of a stored artifact (assembly, raw profiler output, full tables).")
    def artifact_file(artifact_id: str, name: str) -> str | bytes:
        """Text files as text; a binary file (a PNG chart, a code object) as a blob, never mangled."""
        try:
            data = artifacts.path_of(artifact_id, name).read_bytes()
        except EvoError as e:
            raise ResourceError(str(e)) from e
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data
