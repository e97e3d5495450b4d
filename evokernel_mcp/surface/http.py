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

    def security(self) -> TransportSecuritySettings:
        names = list(LOOPBACK_NAMES)
        if not is_loopback(self.host) and self.host not in ("0.0.0.0", "::", "[::]"):
            names.append(f"[{self.host}]" if ":" in self.host else self.host)
        names += self.allowed_hosts
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


def run_http(cfg: HttpConfig) -> None:
    """Serve streamable HTTP at /mcp with the checks above (blocks)."""
    import anyio
    import uvicorn

    from evokernel_mcp.server import build_server

    cfg.check()
    server = build_server(**cfg.server_kwargs())
    app = server.streamable_http_app(transport_security=cfg.security(), host=cfg.host)
    log.info("serving streamable HTTP on %s:%d/mcp (token %s; allowed hosts: %s)", cfg.host, cfg.port,
             "required" if cfg.token else "off (loopback only)", ", ".join(LOOPBACK_NAMES + tuple(cfg.allowed_hosts)))
    config = uvicorn.Config(app, host=cfg.host.strip("[]"), port=cfg.port, log_level="warning")
    anyio.run(uvicorn.Server(config).serve)
