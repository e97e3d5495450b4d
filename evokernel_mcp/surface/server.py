"""EvoServer: the MCPServer of evokernel-mcp, with the surface applied to every tool generically.

Around each tools/call: strict arguments (did-you-mean), `detach` for long tools, the caller recorded on
the jobs the call starts (cancelled when the caller's connection closes, unless detached), pydantic
errors in one line, every error as a structured body (evokernel_mcp.errors.ErrorBody), a job handle
when a long tool's job is still running, results shaped to the budget (shaping.py) with a short text
block and resource links to artifacts. tools/list shows titles, annotations and compact schemas.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ResourceLink, TextContent
from mcp_types import Tool as MCPTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from evokernel_mcp.errors import BadInput, ErrorBody, NotFound, error_body
from evokernel_mcp.models import JobHandle, Truncation
from evokernel_mcp.surface import output_schema as outschema
from evokernel_mcp.surface import registry, schema, shaping, strict, verdict

log = logging.getLogger(__name__)
OWNER_KEY = "evokernel_owner"
FINAL = ("done", "failed", "cancelled")


@dataclass
class SurfaceInfo:
    long: bool
    meta: registry.ToolMeta
    description: str
    input_schema: dict[str, Any]
    full_input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None  # as listed (compact)
    full_output_schema: dict[str, Any] | None


def caller_id(context: Any) -> str | None:
    """An id for whoever made the request, for list_jobs and for cancelling jobs when the caller goes away.

    - A handshake (2025-era) connection, i.e. stdio or a stateful streamable-HTTP session: one id per
      connection, and the first call on it arranges that its jobs (unless detached) are cancelled when the
      connection closes (the HTTP session ends: DELETE, idle timeout or server shutdown).
    - A 2026-07-28 (stateless) request: every request is its own short-lived connection, so there is no
      session to end; the id is the client's name (its jobs are cancelled only with the request itself,
      i.e. while the call is waiting, or by cancel_job)."""
    try:
        rc = context.request_context
    except (AttributeError, ValueError):
        return None
    # MCPServer's request context has no public handle on the Connection (the low-level one does); its
    # ServerSession holds it. Connection.state and Connection.exit_stack are the SDK's documented
    # per-connection scratch space and teardown hooks.
    conn = getattr(rc, "connection", None) or getattr(getattr(rc, "session", None), "_connection", None)
    if conn is None or not hasattr(conn, "exit_stack"):
        log.warning("no MCP connection object on this request: its jobs will not be cancelled when it closes")
        return None
    if conn.protocol_version in MODERN_PROTOCOL_VERSIONS:
        info = getattr(conn.client_params, "client_info", None)
        return f"client-{getattr(info, 'name', None) or 'anonymous'}"
    owner = conn.state.get(OWNER_KEY)
    if owner is None:
        owner = conn.state[OWNER_KEY] = "session-" + secrets.token_hex(6)

        async def on_close() -> None:
            from evokernel_mcp.app import get_app

            get_app().jobs.cancel_owner_soon(owner)

        conn.exit_stack.push_async_callback(on_close)
    return owner


def _describe_args(args: dict[str, Any]) -> str:
    """A short 'what it is' for list_jobs: the short string/number arguments (never sources)."""
    bits = [f"{k}={v}" for k, v in args.items()
            if isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 40 and "\n" not in v)]
    return ", ".join(bits)[:120]


class EvoServer(MCPServer):
    """MCPServer with the evokernel surface; tools are registered with the plain add_tool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._surface: dict[str, tuple[int, SurfaceInfo]] = {}

    # ---------------------------------------------------------------- per-tool surface
    def surface(self, name: str) -> SurfaceInfo | None:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return None
        cached = self._surface.get(name)
        if cached is not None and cached[0] == id(tool):
            return cached[1]
        long = registry.is_long(tool.fn)
        full = schema.full_input_schema(name, tool.parameters, long)
        listed, hidden = schema.listed_input_schema(name, full)
        desc = schema.short_description(tool.description)
        if hidden:
            top = [h for h in hidden if "." not in h]
            nested = sorted({h.split(".")[0] for h in hidden if "." in h})
            desc += " Advanced: " + ", ".join(top + [f"more {n}" for n in nested]) + "."
        full_out = outschema.full_output_schema(tool.output_schema, long)
        info = SurfaceInfo(long=long, meta=registry.meta_for(name), description=desc, input_schema=listed,
                           full_input_schema=full, output_schema=outschema.listed_output_schema(full_out, long),
                           full_output_schema=full_out)
        self._surface[name] = (id(tool), info)
        return info

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        info = self.surface(name)
        return None if info is None else info.input_schema

    def tool_schema_text(self, name: str) -> str:
        """evokernel://tools/{name}: the full input schema (advanced arguments included) and the full output
        schema (with descriptions), as JSON."""
        info = self.surface(name)
        if info is None:
            from mcp.server.mcpserver.exceptions import ResourceError

            raise ResourceError(f"no tool {name!r}; tools/list has the names")
        tool = self._tool_manager.get_tool(name)
        doc = " ".join((tool.description if tool else "").split())
        return json.dumps({"name": name, "description": doc, "input_schema": info.full_input_schema,
                           "output_schema": info.full_output_schema}, indent=1)

    async def list_tools(self) -> list[MCPTool]:
        out = []
        for tool in self._tool_manager.list_tools():
            info = self.surface(tool.name)
            assert info is not None
            out.append(MCPTool(name=tool.name, title=tool.title or info.meta.title, description=info.description,
                               input_schema=info.input_schema, output_schema=info.output_schema,
                               annotations=tool.annotations or info.meta.annotations(), icons=tool.icons,
                               _meta=tool.meta))
        return out

    # ---------------------------------------------------------------- tools/call
    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> CallToolResult:
        from evokernel_mcp.runtime.jobmodels import CALL_SCOPE, CallScope

        tool = self._tool_manager.get_tool(name)
        if tool is None:
            names = [t.name for t in self._tool_manager.list_tools()]
            hint = strict.suggest(name, names)
            return error_result(NotFound(f"no tool {name!r}" + (f"; did you mean '{hint}'?" if hint else ""),
                                         next_call=f"{hint}(...)" if hint else "tools/list"), name)
        info = self.surface(name)
        assert info is not None
        if context is None:
            from mcp.server.mcpserver import Context

            context = Context(mcp_server=self, subscriptions=self._subscriptions)
        args = dict(arguments or {})
        scope = CallScope(tool=name)
        try:
            strict.check_arguments(name, args, info.full_input_schema)
            if info.long:
                detach = args.pop("detach", False)
                if not isinstance(detach, bool):
                    raise BadInput(f"{name}: 'detach' must be true or false, got {detach!r}")
                scope.detached = detach
            scope.owner, scope.summary = caller_id(context), f"{name}({_describe_args(args)})"
            token = CALL_SCOPE.set(scope)
            try:
                raw = await tool.run(args, context, convert_result=False)
            finally:
                CALL_SCOPE.reset(token)
        except MCPError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a structured tool error
            handle = self._pending_job(scope) if info.long else None
            if handle is not None:
                return self._result(name, {"state": handle.state, "job_id": handle.job_id,
                                           "message": _handle_message(handle), "job": handle.model_dump()})
            return error_result(_cause(exc), name)
        return self._shape(name, info, raw, scope)

    def _pending_job(self, scope: Any) -> JobHandle | None:
        """The handle of the (last) job this call started, if it is not finished."""
        if not scope.job_ids:
            return None
        from evokernel_mcp.app import get_app
        from evokernel_mcp.runtime.submit import job_handle

        try:
            st = get_app().jobs.status(scope.job_ids[-1])
        except Exception:  # noqa: BLE001 - trimmed away: no handle
            return None
        return None if st.state in FINAL else job_handle(st, scope.tool)

    def _shape(self, name: str, info: SurfaceInfo, raw: Any, scope: Any) -> CallToolResult:
        if isinstance(raw, BaseModel):
            data = raw.model_dump(mode="json", by_alias=True)
        elif isinstance(raw, dict) and info.output_schema is not None:
            data = json.loads(json.dumps(raw, default=str))
        else:
            tool = self._tool_manager.get_tool(name)
            return tool.fn_metadata.convert_result(raw)  # type: ignore[union-attr]  # unstructured tool
        if info.long:
            handle = self._pending_job(scope)
            if handle is not None:
                data = {k: data[k] for k in ("state", "job_id", "task", "device") if data.get(k) is not None}
                data.update(state=handle.state, job_id=handle.job_id, message=_handle_message(handle),
                            job=handle.model_dump())
        return self._result(name, data)

    def _result(self, name: str, data: dict[str, Any]) -> CallToolResult:
        data = shaping.prune(data)
        links = _artifact_links(data)
        full = shaping.size_chars(data)
        if full > shaping.BUDGET_CHARS:
            data, links = _truncate(name, data, full, links)
        content: list[Any] = [TextContent(type="text", text=verdict.summary_text(name, data))] + links
        return CallToolResult(content=content, structured_content=data, is_error=False)


def _handle_message(h: JobHandle) -> str:
    return (f"Not finished within wait_s: {h.tool} runs as job {h.job_id} ({h.state}). Call {h.next_call} for "
            "the result, job_status to look, cancel_job to stop it.")


def _cause(exc: BaseException) -> BaseException:
    """The exception a tool raised (the SDK wraps it in a ToolError 'Error executing tool ...')."""
    cause = exc.__cause__ if isinstance(exc, ToolError) and exc.__cause__ is not None else exc
    return cause


def error_result(exc: BaseException, tool: str) -> CallToolResult:
    """A tool error result: a short text and the structured body {error: {kind, message, next_call}}."""
    if isinstance(exc, ValidationError):
        exc = strict.format_validation_error(tool, exc)
    if isinstance(exc, UnexpectedToolError) or not isinstance(exc, ToolError | ValidationError):
        log.error("tool %s raised an unexpected exception", tool, exc_info=exc)
    body: ErrorBody = error_body(exc)
    text = f"Error ({body.kind}): {body.message}" + (f"\nNext: {body.next_call}" if body.next_call else "")
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content={"error": body.model_dump(exclude_none=True)}, is_error=True)


def _artifact_links(data: dict[str, Any]) -> list[ResourceLink]:
    """Resource links to the artifacts a result names (top-level artifact_id)."""
    aid = data.get("artifact_id")
    if not isinstance(aid, str):
        return []
    from evokernel_mcp import artifacts

    try:
        info = artifacts.info(aid)
    except Exception:  # noqa: BLE001 - a link is a courtesy
        return []
    return [ResourceLink(type="resource_link", name=f.name, uri=f"{info.uri}/{f.name}", size=f.bytes,
                         description=f"{info.kind} artifact file") for f in info.files[:4]]


def _truncate(name: str, data: dict[str, Any], full: int, links: list[ResourceLink]):
    from evokernel_mcp import artifacts

    aid = artifacts.put("result", {"result.json": json.dumps(data, indent=1, default=str)},
                        detail=f"full {name} result ({full} characters)")
    uri = f"evokernel://artifacts/{aid}/result.json"
    cut, omitted = shaping.fit(data)
    cut["trimmed"] = Truncation(artifact_id=aid, uri=uri, full_chars=full, omitted=omitted).model_dump()
    link = ResourceLink(type="resource_link", name="result.json", uri=uri, size=full,
                        description=f"the full {name} result")
    return cut, [link] + links
