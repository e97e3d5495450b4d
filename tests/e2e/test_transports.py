"""End to end: the server as a subprocess, the official SDK client over stdio and streamable HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

CONTRACT_TOOLS = {
    "query_rocminfo", "compile_kernel", "verify_vs_pytorch", "benchmark", "profile_pmc", "thread_trace",
    "list_docs", "search_docs", "read_doc", "read_artifact", "job_status", "job_result", "cancel_job",
}


def _env(tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env["EVOKERNEL_HOME"] = str(tmp_path / "home")
    return env


async def _exercise(client: Client) -> None:
    listing = await client.list_tools()
    tools = {t.name: t for t in listing.tools}
    assert "query_rocminfo" in tools
    for t in listing.tools:
        assert t.input_schema and t.input_schema.get("type") == "object", t.name
        assert t.output_schema, f"{t.name} has no output schema"
        assert t.description, f"{t.name} has no description"
    result = await client.call_tool("query_rocminfo", {})
    assert not result.is_error, result.content
    sc = result.structured_content
    assert sc["backend"] in ("rocm", "cuda", "none")
    assert isinstance(sc["devices"], list) and sc["provenance"]
    bad = await client.call_tool("read_artifact", {"artifact_id": "not-an-id"})
    assert bad.is_error and "16 hex" in bad.content[0].text


def test_stdio_subprocess_session(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=_env(tmp_path))

    async def main():
        async with Client(params) as client:
            await _exercise(client)

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_subprocess_session(tmp_path):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evokernel_mcp", "serve", "--http", "--host", "127.0.0.1", "--port", str(port)],
        env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"server exited: {proc.stderr.read().decode()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("HTTP server did not start listening within 60 s")

        async def main():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                await _exercise(client)

        anyio.run(main)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_contract_tool_names_registered():
    from evokernel_mcp.server import build_server

    async def main():
        async with Client(build_server()) as client:
            names = {t.name for t in (await client.list_tools()).tools}
        missing = CONTRACT_TOOLS - names
        assert not missing, f"tools from docs/api.md not registered: {sorted(missing)}"

    anyio.run(main)


def test_cli_call_prints_json(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "evokernel_mcp", "call", "query_rocminfo", "--json", "{}"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    data = json.loads(out.stdout)
    assert data["backend"] in ("rocm", "cuda", "none")


def test_tools_list_line_on_stdio_within_budget(tmp_path):
    """The tools/list response exactly as a stdio client reads it (one JSON-RPC line), for a client that
    speaks the handshake protocol by hand: within the budget every client pays on connect."""
    import json

    from mcp_types.version import LATEST_HANDSHAKE_VERSION

    proc = subprocess.Popen([sys.executable, "-m", "evokernel_mcp", "serve"], env=_env(tmp_path), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    init = {"protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}
    try:
        for msg in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
            proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        line = ""
        for _ in range(10):
            line = proc.stdout.readline()
            if json.loads(line).get("id") == 2:
                break
        assert len(json.loads(line)["result"]["tools"]) >= 20
        assert len(line.rstrip("\n")) <= 40_000, f"tools/list is {len(line)} characters on stdio"
    finally:
        proc.kill()
        proc.wait(timeout=10)
