"""Command line: `evokernel-mcp [serve] | doctor | call TOOL [--json '{...}' | --args-file F] [--no-wait] | tools`.

Only the CLI prints to stdout; the server logs to stderr (stdio transport owns stdout).
In `call` arguments, a string value "@path" is replaced by the text of that file ("@@..." keeps a literal
leading "@"), so kernel sources need not be quoted into JSON on a command line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio

from evokernel_mcp import __version__
from evokernel_mcp.integrity import cli as integrity_cli
from evokernel_mcp.selftest import cli as selftest_cli


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


class ArgsError(Exception):
    pass


def expand_at_files(value: Any, base: Path) -> Any:
    """Replace "@path" strings (at any depth) by the file's text; "@@x" stands for the literal "@x"."""
    if isinstance(value, dict):
        return {k: expand_at_files(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_at_files(v, base) for v in value]
    if isinstance(value, str) and value.startswith("@"):
        if value.startswith("@@"):
            return value[1:]
        p = (base / value[1:]).expanduser()
        try:
            return p.read_text(encoding="utf-8")
        except OSError as e:
            raise ArgsError(f"{value}: cannot read {p}: {e.strerror}") from None
    return value


def load_call_args(args_json: str | None, args_file: str | None) -> dict[str, Any]:
    if args_json is not None and args_file is not None:
        raise ArgsError("pass --json or --args-file, not both")
    base = Path.cwd()
    if args_file is not None:
        p = Path(args_file).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ArgsError(f"--args-file {p}: {e.strerror}") from None
        base, what = p.resolve().parent, f"--args-file {p}"
    else:
        text, what = args_json or "{}", "--json"
    try:
        args = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArgsError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(args, dict):
        raise ArgsError(f"{what} must be a JSON object")
    return expand_at_files(args, base)


NO_WAIT_NOTE = ("evokernel-mcp: {tool} did not finish within wait_s and runs as job {job_id} in the server this "
                "command started; that server, and the job with it, ends when this command exits, so no later "
                "command can fetch its result. Drop --no-wait to follow the job to its end (the default).")


async def _call(tool: str, args: dict[str, Any], inproc: bool, wait: bool) -> int:
    """One call; a job handle is followed (job_result in the same session) to the end unless wait is off,
    in which case the handle is printed and stderr says that the job ends with the command."""
    async with _client(inproc) as client:
        result = await client.call_tool(tool, args)
        sc = result.structured_content or {}
        if not wait and not result.is_error and isinstance(sc.get("job"), dict):
            print(NO_WAIT_NOTE.format(tool=tool, job_id=sc["job"].get("job_id")), file=sys.stderr)
        announced = False
        while wait and not result.is_error and isinstance(sc.get("job"), dict):
            job_id = sc["job"]["job_id"]
            if not announced:
                print(f"evokernel-mcp: {tool} runs as {job_id}; following it to its end", file=sys.stderr)
                announced = True
            result = await client.call_tool("job_result", {"job_id": job_id, "wait_s": 50})
            sc = result.structured_content or {}
            if not result.is_error and sc.get("finished"):
                if sc.get("result") is not None:
                    sc = sc["result"]
                print(json.dumps(sc, indent=2, default=str))
                return 0 if sc.get("state", "done") == "done" and not sc.get("error") else 1
            sc = {"job": {"job_id": job_id}} if not result.is_error else sc
    print(json.dumps(_result_to_json(result), indent=2, default=str))
    return 1 if result.is_error else 0


def _arg_line(name: str, prop: dict[str, Any], required: bool) -> str:
    typ = prop.get("type") or "/".join(b.get("type", "?") for b in prop.get("anyOf", [])) or "object"
    if "enum" in prop:
        typ = "|".join(str(e) for e in prop["enum"])
    default = f" = {json.dumps(prop['default'])}" if "default" in prop else ""
    req = " (required)" if required else ""
    return f"    {name}: {typ}{default}{req}  {prop.get('description', '')}".rstrip()


async def _tools(inproc: bool, verbose: bool) -> int:
    async with _client(inproc) as client:
        listing = await client.list_tools()
        schemas: dict[str, dict] = {}
        if verbose:
            for t in listing.tools:
                try:
                    res = await client.read_resource(f"evokernel://tools/{t.name}")
                    schemas[t.name] = json.loads(res.contents[0].text)["input_schema"]
                except Exception:  # noqa: BLE001 - fall back to the listed schema
                    schemas[t.name] = t.input_schema
    for t in listing.tools:
        hints = t.annotations
        tag = "read-only" if hints and hints.read_only_hint else ("runs code" if hints and hints.destructive_hint
                                                                   else "writes")
        print(f"{t.name}  [{t.title or ''}; {tag}]")
        for line in textwrap.wrap(t.description or "", width=100):
            print(f"  {line}")
        schema = schemas.get(t.name, t.input_schema)
        req = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            print(_arg_line(name, prop, name in req))
        print()
    return 0


def _doctor(as_json: bool) -> int:
    from evokernel_mcp.doctor import check_toolchains

    tools = check_toolchains()
    from evokernel_mcp.runtime.sandbox import bwrap_path, tool_level

    iso = {"level": tool_level(), "bwrap": bwrap_path(),
           "meaning": {"bwrap+uid": "bubblewrap, uid 65534, filesystem hidden", "bwrap": "bubblewrap, filesystem "
                       "hidden", "process": "fresh process and rlimits only: the filesystem is NOT hidden "
                       "(install bubblewrap)"}[tool_level()]}
    from evokernel_mcp.runtime import pycache

    own = {None: "torch is not installed", True: "torch ships its own", False: "torch ships none"}[
        pycache.has_bytecode("torch")]
    iso["bytecode"] = (f"{own}; sandboxed children " + ("read the runner's, made at its start" if pycache.wanted()
                       else "use what is installed"))
    from evokernel_mcp.runtime import zygote_link

    iso["cpu_children"] = ("forked from the zygote (one process per runner that imported torch once), each into the "
                           "sandbox bubblewrap made for it" if zygote_link.wanted("cpu", tool_level(), False)
                           else "each starts its own interpreter")
    devices: Any = None
    try:
        from evokernel_mcp.devices.discovery import query_rocminfo

        devices = query_rocminfo(refresh=True).model_dump(mode="json")
    except ImportError:
        devices = {"error": "device discovery not available"}
    except Exception as e:  # noqa: BLE001 - doctor reports, never crashes
        devices = {"error": f"{type(e).__name__}: {e}"}
    if as_json:
        print(json.dumps({"devices": devices, "toolchains": [t.model_dump() for t in tools], "isolation": iso},
                         indent=2))
        return 0
    print(f"Isolation of agent code: {iso['level']} ({iso['meaning']})")
    print(f"Bytecode: {iso['bytecode']}")
    print(f"CPU children: {iso['cpu_children']}")
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


def _configure(ns: argparse.Namespace) -> str | None:
    """The settings from serve's flags over the environment (settings.py); an error line, or None when fine."""
    import importlib.util

    from evokernel_mcp import settings

    try:
        s = settings.configure(home=ns.home, devices=ns.devices, journal=ns.journal, task_roots=ns.task_root,
                               executor=ns.executor, ray_address=ns.ray_address, ray_slots=ns.ray_slots,
                               http_token_file=ns.token_file, sandbox=ns.sandbox, warm_start=ns.warm_start,
                               memory_factor=ns.memory_factor,
                               secret_env=tuple(ns.secret_env) if ns.secret_env else None)
    except ValueError as e:
        return str(e)
    if s.executor == "ray" and importlib.util.find_spec("ray") is None:
        return ("--executor ray needs Ray in this environment: pip install 'evokernel-mcp[ray]' (the Ray "
                "version of the cluster)")
    return None


def _serve(ns: argparse.Namespace) -> int:
    _setup_logging(ns.log_level)
    problem = _configure(ns)
    if problem:
        print(f"evokernel-mcp serve: {problem}", file=sys.stderr)
        return 2
    if not ns.http:
        from evokernel_mcp.server import build_server

        build_server().run("stdio")
        return 0
    from evokernel_mcp import settings
    from evokernel_mcp.surface.http import ConfigError, HttpConfig, read_token, run_http

    s = settings.get()
    try:
        cfg = HttpConfig(host=ns.host, port=ns.port, allowed_hosts=list(ns.allowed_host or []),
                         token=read_token(s.http_token_file, s.http_token.get_secret_value() if s.http_token
                                          else None))
        cfg.check()
    except ConfigError as e:
        print(f"evokernel-mcp serve: {e}", file=sys.stderr)
        return 2
    run_http(cfg)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evokernel-mcp", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"evokernel-mcp {__version__}")
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="run the MCP server (stdio by default)")
    s.add_argument("--http", action="store_true", help="serve streamable HTTP (endpoint /mcp) instead of stdio")
    s.add_argument("--host", default="127.0.0.1", help="address to bind; anything but loopback needs a token")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--token-file", help="file holding the bearer token (else $EVOKERNEL_HTTP_TOKEN_FILE, else "
                   "$EVOKERNEL_HTTP_TOKEN); never put the token itself on the command line")
    s.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="a Host name clients use besides loopback (a tunnel's or proxy's name); repeatable")
    s.add_argument("--secret-env", action="append", default=None, metavar="NAME",
                   help="an environment variable of the server that must never reach agent code (besides the token "
                   "and names that look like credentials); repeatable")
    s.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING or ERROR; logs go to stderr")
    s.add_argument("--home", default=None, metavar="DIR", help="caches, artifacts, job scratch and the journal "
                   "(else $EVOKERNEL_HOME, else ~/.cache/evokernel-mcp)")
    s.add_argument("--devices", default=None, metavar="LIST", help="devices to serve, e.g. 'cuda:0,cuda:1' or "
                   "'cpu' (else $EVOKERNEL_DEVICES, else the GPUs found, else the CPU)")
    s.add_argument("--journal", default=None, metavar="FILE", help="the journal's SQLite file (else "
                   "$EVOKERNEL_JOURNAL, else HOME/journal.sqlite3)")
    s.add_argument("--task-root", action="append", default=None, metavar="DIR", help="a folder tasks and "
                   "KernelBench files may be loaded from by path, besides the shipped tasks; repeatable (else "
                   "$EVOKERNEL_TASK_ROOTS)")
    s.add_argument("--sandbox", choices=["auto", "process"], default=None, help="isolation of agent code: auto "
                   "(bubblewrap where it runs; default) or process (rlimits only; else $EVOKERNEL_SANDBOX)")
    s.add_argument("--warm-start", choices=["auto", "on", "off"], default=None,
                   help="start the first device's runner and spare children when the server starts, so the first "
                   "verify does not wait for them: auto (where that device is a GPU; default), on, off")
    s.add_argument("--memory-factor", type=float, default=None, metavar="X",
                   help="a job with more than 1 GB of inputs + outputs keeps our processes' device memory within X "
                   "times that where it can (float64 reference sampled, aids cut; default 3); 0: only the free "
                   "memory limits it")
    s.add_argument("--executor", choices=["local", "ray"], default=None,
                   help="where evaluate_batch runs candidates: this host's GPUs (local, default) or a Ray cluster "
                   "(else $EVOKERNEL_EXECUTOR)")
    s.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: 'auto' (the cluster this host is in; default), 'ray://head:10001' "
                   "(Ray Client) or 'local' (start Ray here); else $EVOKERNEL_RAY_ADDRESS")
    s.add_argument("--ray-slots", type=int, default=None, metavar="N",
                   help="with --executor ray: how many GPUs to hold (else $EVOKERNEL_RAY_SLOTS, else every GPU of the "
                   "cluster)")
    d = sub.add_parser("doctor", help="devices and toolchains found, with versions")
    d.add_argument("--json", action="store_true", dest="as_json")
    c = sub.add_parser("call", help="one tool call through a real MCP client session; prints JSON")
    c.add_argument("tool")
    c.add_argument("--json", default=None, dest="args_json", help="tool arguments as a JSON object")
    c.add_argument("--args-file", default=None, help="file with the tool arguments as a JSON object")
    c.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="if the call returns a job handle, follow the job to its end in the same session (the "
                   "default); --no-wait prints the handle and exits, and the job ends with this command")
    c.add_argument("--inproc", action="store_true", help="run the server in this process instead of a subprocess")
    t = sub.add_parser("tools", help="list the tools with their arguments")
    t.add_argument("--all", action="store_true", dest="verbose", help="also the advanced arguments")
    t.add_argument("--inproc", action="store_true")
    selftest_cli.add_parser(sub)
    integrity_cli.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    ns = p.parse_args(argv)
    cmd = ns.cmd or "serve"
    if cmd == "serve":
        if ns.cmd is None:
            ns = p.parse_args(["serve"])
        return _serve(ns)
    _setup_logging("WARNING")
    if cmd == "doctor":
        return _doctor(ns.as_json)
    if cmd == "call":
        try:
            args = load_call_args(ns.args_json, ns.args_file)
        except ArgsError as e:
            print(json.dumps({"is_error": True, "result": {"text": str(e)}}))
            return 2
        return anyio.run(_call, ns.tool, args, ns.inproc, ns.wait)
    if cmd == "tools":
        return anyio.run(_tools, ns.inproc, ns.verbose)
    if cmd == "selftest":
        return selftest_cli.run(ns)
    if cmd == "integrity":
        return integrity_cli.run(ns)
    p.error(f"unknown command {cmd}")
    return 2
