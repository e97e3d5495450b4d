"""Streamable HTTP that lets no one in: a bearer token and Host/Origin checks.

- The token comes from the environment variable EVOKERNEL_HTTP_TOKEN or from a file (--token-file), never
  from argv (a command line is visible to every user of the host in `ps`). It is compared in constant time
  (hmac.compare_digest) by a TokenVerifier, the MCP SDK's own auth hook, so the SDK's bearer middleware
  answers 401 to a request without it or with a wrong one. It is never logged.
- A token is required whenever the server binds to anything but loopback: `serve --http --host 0.0.0.0`
  without one refuses to start (exit 2, with a message saying how to set one).
- Host/Origin validation (the SDK's DNS-rebinding protection) is always on, on every address: the Host
  header must be a loopback name, the bound address, or a name given with --allowed-host (what a tunnel or
  reverse proxy puts there); a browser Origin must be one of the same names.
- A client that comes without the token learns why (BearerHelp): the 401 says in its body that a bearer
  token is required and how to pass it, with `WWW-Authenticate: Bearer realm=...`. This server does no
  OAuth, so a client that answers the 401 with OAuth discovery and dynamic client registration
  (/.well-known/oauth-*, /register, /authorize, /token) gets the same explanation there instead of a bare
  404 (Claude Code would otherwise report "Dynamic Client Registration rejected (HTTP 404)").
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evokernel_mcp import settings

log = logging.getLogger(__name__)
TOKEN_ENV = settings.ENV["http_token"]
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class ConfigError(Exception):
    """The HTTP settings are unsafe or incomplete; the message says what to do."""


class StaticTokenVerifier:
    """TokenVerifier (mcp.server.auth.provider) for one shared secret."""

    def __init__(self, token: str):
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="<redacted>", client_id="evokernel-bearer", scopes=[])
        return None

    def __repr__(self) -> str:  # never show the secret, even in a debugger or a log of the object
        return "StaticTokenVerifier(<redacted>)"


def is_loopback(host: str) -> bool:
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def read_token(token_file: str | os.PathLike | None, token: str | None = None) -> str | None:
    """The token from --token-file, else `token` (the http_token setting, $EVOKERNEL_HTTP_TOKEN); None when
    neither is set."""
    if token_file:
        p = Path(token_file).expanduser()
        try:
            token = p.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"cannot read --token-file {p}: {e.strerror}") from None
        if not token:
            raise ConfigError(f"--token-file {p} is empty")
    else:
        token = (token or "").strip() or None
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"the HTTP token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
                          "(e.g. `openssl rand -hex 32`)")
    return token


@dataclass
class HttpConfig:
    host: str
    port: int
    token: str | None = field(default=None, repr=False)
    allowed_hosts: list[str] = field(default_factory=list)

    def check(self) -> None:
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(
                f"refusing to serve HTTP on {self.host}: it is not a loopback address and no token is set. "
                f"Anyone who reaches the port could run code as this user. Set {TOKEN_ENV} in the environment "
                "or pass --token-file FILE (never the token itself on the command line), or bind to 127.0.0.1 "
                "and reach it through an ssh tunnel.")

    def host_names(self) -> list[str]:
        """The Host names clients may use: loopback, the bound address (unless a wildcard), --allowed-host."""
        names = list(LOOPBACK_NAMES)
        if not is_loopback(self.host) and self.host not in ("0.0.0.0", "::", "[::]"):
            names.append(f"[{self.host}]" if ":" in self.host else self.host)
        return names + self.allowed_hosts

    def security(self) -> TransportSecuritySettings:
        names = self.host_names()
        hosts = [n for name in names for n in (name, f"{name}:*")]
        origins = [f"{scheme}://{n}" for name in names for n in (name, f"{name}:*") for scheme in ("http", "https")]
        return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)

    def server_kwargs(self) -> dict:
        """Arguments for build_server: the SDK's auth hook when a token is set."""
        if self.token is None:
            return {}
        return {"token_verifier": StaticTokenVerifier(self.token),
                "auth": AuthSettings(issuer_url=f"http://127.0.0.1:{self.port}", resource_server_url=None)}


REALM = "evokernel-mcp"
OAUTH_PATHS = ("/register", "/authorize", "/token")


def _is_oauth_path(path: str) -> bool:
    """Where an OAuth client looks for metadata or registers (RFC 8414, RFC 9728, OIDC, MCP's defaults)."""
    return path.startswith("/.well-known/") or path.endswith("/.well-known/openid-configuration") or \
        path in OAUTH_PATHS


def auth_help(url: str, token_sent: bool) -> dict[str, str]:
    """The error body: a bearer token is required (or the one sent is wrong), and how to pass it."""
    what = ("The bearer token sent was not accepted." if token_sent else
            "This evokernel-mcp server requires a bearer token (a shared secret; it does no OAuth).")
    return {
        "error": "invalid_token" if token_sent else "bearer_token_required",
        "error_description": (
            f"{what} Send the header 'Authorization: Bearer <token>', where <token> is the server's "
            f"${TOKEN_ENV} (or the content of its --token-file). Claude Code: claude mcp add --transport http "
            f'evokernel {url} --header "Authorization: Bearer <token>"'),
        "claude_code": f'claude mcp add --transport http evokernel {url} --header "Authorization: Bearer <token>"',
    }


class BearerHelp:
    """ASGI wrapper: the SDK's 401 (missing or wrong token) with a body that says what to do, and the same
    explanation on the OAuth discovery/registration paths (404 for metadata, 400 for the endpoints)."""

    def __init__(self, app: ASGIApp, cfg: HttpConfig):
        self.app, self.cfg = app, cfg

    def _url(self, headers: Headers, scope: Scope) -> str:
        """The URL to show: the one the client used when its Host is one this server serves."""
        host = headers.get("host", "")
        name = host[: host.index("]") + 1] if host.startswith("[") and "]" in host else host.split(":")[0]
        if not name or name not in self.cfg.host_names():
            bound = "<server>" if self.cfg.host in ("0.0.0.0", "::", "[::]") else self.cfg.host
            host = f"{bound}:{self.cfg.port}"
        return f"{scope.get('scheme', 'http')}://{host}/mcp"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        token_sent = headers.get("authorization", "").lower().startswith("bearer ")
        path = scope.get("path", "")
        if _is_oauth_path(path):
            status = 404 if "/.well-known/" in path else 400
            await JSONResponse(auth_help(self._url(headers, scope), False), status_code=status)(scope, receive, send)
            return
        replaced = False

        async def send_or_replace(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 401:
                replaced = True
                challenge = f'Bearer realm="{REALM}"' + (
                    ', error="invalid_token", error_description="the bearer token was not accepted"'
                    if token_sent else "")
                body = auth_help(self._url(headers, scope), token_sent)
                await JSONResponse(body, status_code=401, headers={"WWW-Authenticate": challenge})(
                    scope, receive, send)
            elif not replaced:
                await send(message)

        await self.app(scope, receive, send_or_replace)


def run_http(cfg: HttpConfig) -> None:
    """Serve streamable HTTP at /mcp with the checks above (blocks)."""
    import anyio
    import uvicorn

    from evokernel_mcp.server import build_server

    cfg.check()
    server = build_server(**cfg.server_kwargs())
    app = server.streamable_http_app(transport_security=cfg.security(), host=cfg.host)
    if cfg.token is not None:
        app = BearerHelp(app, cfg)
    log.info("serving streamable HTTP on %s:%d/mcp (token %s; allowed hosts: %s)", cfg.host, cfg.port,
             "required" if cfg.token else "off (loopback only)", ", ".join(LOOPBACK_NAMES + tuple(cfg.allowed_hosts)))
    config = uvicorn.Config(app, host=cfg.host.strip("[]"), port=cfg.port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
