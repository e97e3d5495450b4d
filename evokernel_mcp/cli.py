"""Command line: `evokernel-mcp [serve] | doctor | call TOOL --json '{...}' | tools`.

Only the CLI prints to stdout; the server logs to stderr (stdio transport owns stdout).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

import anyio


def _setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _server_params(extra_env: dict[str, str] | None = None):
    from mcp.client.stdio import StdioServerParameters

    env = dict(os.environ)
    env.update(extra_env or {})
    return StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=env)


def _client(inproc: bool):
    from mcp import Client

    if inproc:
        from evokernel_mcp.server import build_server

        return Client(build_server())
    return Client(_server_params())


def _result_to_json(result: Any) -> dict[str, Any]:
    if result.structured_content is not None:
        payload: Any = result.structured_content
    else:
        texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
        payload = {"text": "\n".join(texts)}
    return {"is_error": bool(result.is_error), "result": payload} if result.is_error else payload


async def _call(tool: str, args: dict[str, Any], inproc: bool) -> int:
    async with _client(inproc) as client:
        result = await client.call_tool(tool, args)
    print(json.dumps(_result_to_json(result), indent=2, default=str))
    return 1 if result.is_error else 0


async def _tools(inproc: bool) -> int:
    async with _client(inproc) as client:
        listing = await client.list_tools()
    for t in listing.tools:
        first = (t.description or "").strip().splitlines()[0] if t.description else ""
        print(f"{t.name:22s} {first}")
    return 0


def _doctor(as_json: bool) -> int:
    from evokernel_mcp.doctor import check_toolchains

    tools = check_toolchains()
    devices: Any = None
    try:
        from evokernel_mcp.devices.discovery import query_rocminfo

        devices = query_rocminfo(refresh=True).model_dump(mode="json")
    except ImportError:
        devices = {"error": "device discovery not available"}
    except Exception as e:  # noqa: BLE001 - doctor reports, never crashes
        devices = {"error": f"{type(e).__name__}: {e}"}
    if as_json:
        print(json.dumps({"devices": devices, "toolchains": [t.model_dump() for t in tools]}, indent=2))
        return 0
    print("Devices")
    if isinstance(devices, dict) and "devices" in devices:
        print(f"  backend: {devices.get('backend')}")
        for d in devices["devices"]:
            print(f"  [{d.get('index')}] {d.get('name')} ({d.get('arch')}): {d.get('compute_units')} CUs/SMs, "
                  f"LDS/smem per workgroup {d.get('lds_bytes_per_workgroup')} B")
        if not devices["devices"]:
            targets = devices.get("offline_targets") or []
            names = [t["target"] + ("" if t.get("available") else " (no compiler here)") for t in targets]
            print(f"  no GPU found; offline compile targets: {', '.join(names)}")
    else:
        print(f"  {devices}")
    print("Toolchains")
    for t in tools:
        if t.found:
            print(f"  {t.name:11s} {t.version or '(version unknown)'}  [{t.path or 'python module'}]")
        else:
            print(f"  {t.name:11s} missing -> disables: {t.disables}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="evokernel-mcp", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    s.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--log-level", default="INFO")
    d = sub.add_parser("doctor", help="devices and toolchains found, with versions")
    d.add_argument("--json", action="store_true", dest="as_json")
    c = sub.add_parser("call", help="one tool call through a real MCP client session; prints JSON")
    c.add_argument("tool")
    c.add_argument("--json", default="{}", dest="args_json", help="tool arguments as a JSON object")
    c.add_argument("--inproc", action="store_true", help="run the server in this process instead of a subprocess")
    t = sub.add_parser("tools", help="list the tools")
    t.add_argument("--inproc", action="store_true")
    ns = p.parse_args(argv)
    cmd = ns.cmd or "serve"

    if cmd == "serve":
        _setup_logging(getattr(ns, "log_level", "INFO"))
        from evokernel_mcp.server import build_server

        server = build_server()
        if getattr(ns, "http", False):
            server.run("streamable-http", host=ns.host, port=ns.port)
        else:
            server.run("stdio")
        return 0
    _setup_logging("WARNING")
    if cmd == "doctor":
        return _doctor(ns.as_json)
    if cmd == "call":
        try:
            args = json.loads(ns.args_json)
        except json.JSONDecodeError as e:
            print(json.dumps({"is_error": True, "result": {"text": f"--json is not valid JSON: {e}"}}))
            return 2
        if not isinstance(args, dict):
            print(json.dumps({"is_error": True, "result": {"text": "--json must be a JSON object"}}))
            return 2
        return anyio.run(_call, ns.tool, args, ns.inproc)
    if cmd == "tools":
        return anyio.run(_tools, ns.inproc)
    p.error(f"unknown command {cmd}")
    return 2
