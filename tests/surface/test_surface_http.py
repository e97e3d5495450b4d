"""Authenticated streamable HTTP, against the real server as a subprocess bound to
127.0.0.1: refuse a non-loopback bind without a token, 401 without/with a wrong token, the token in no log,
Host/Origin checked on every address, 10 concurrent clients x 20 mixed calls with no mixed-up result."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from evokernel_mcp import settings
from evokernel_mcp.surface.http import HttpConfig, StaticTokenVerifier, is_loopback, read_token

TOKEN = "tok-" + secrets.token_hex(16)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path, token: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["EVOKERNEL_HOME"] = str(tmp_path / "home")
    env.pop("EVOKERNEL_HTTP_TOKEN", None)
    if token:
        env["EVOKERNEL_HTTP_TOKEN"] = token
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("http")
    port = _free_port()
    log = open(tmp / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "evokernel_mcp", "serve", "--http", "--host", "127.0.0.1",
                             "--port", str(port), "--allowed-host", "tunnel.example", "--log-level", "DEBUG"],
                            env=_env(tmp, TOKEN), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, open(tmp / "server.log").read()[-3000:]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    yield port, tmp / "server.log"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _post(port: int, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers={**HEADERS, **headers}, timeout=30)


def test_refuses_public_bind_without_token(tmp_path):
    out = subprocess.run([sys.executable, "-m", "evokernel_mcp", "serve", "--http", "--host", "0.0.0.0", "--port",
                          str(_free_port())], env=_env(tmp_path, None), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "refusing to serve HTTP on 0.0.0.0" in out.stderr and "EVOKERNEL_HTTP_TOKEN" in out.stderr


def test_config_rules(tmp_path):
    with pytest.raises(Exception, match="not a loopback"):
        HttpConfig(host="10.0.0.5", port=1).check()
    HttpConfig(host="10.0.0.5", port=1, token=TOKEN).check()
    HttpConfig(host="127.0.0.1", port=1).check()
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    f = tmp_path / "tok"
    f.write_text(TOKEN + "\n")
    assert read_token(str(f), None) == TOKEN and read_token(None, TOKEN) == TOKEN and read_token(None) is None
    assert read_token(f, "the file wins over the variable") == TOKEN
    with pytest.raises(Exception, match="at least"):
        read_token(None, "short")
    assert settings.load({"EVOKERNEL_HTTP_TOKEN": TOKEN}).http_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(StaticTokenVerifier(TOKEN)) and TOKEN not in repr(HttpConfig("h", 1, token=TOKEN))
    assert anyio.run(StaticTokenVerifier(TOKEN).verify_token, TOKEN) is not None
    assert anyio.run(StaticTokenVerifier(TOKEN).verify_token, TOKEN[:-1] + "x") is None


def test_no_token_or_wrong_token_gets_401(server):
    port, _ = server
    assert _post(port, {}).status_code == 401
    wrong = TOKEN[:-1] + ("1" if TOKEN[-1] != "1" else "2")  # differs in its last character only
    assert _post(port, {"Authorization": "Bearer " + wrong}).status_code == 401
    assert _post(port, {"Authorization": "Basic " + TOKEN}).status_code == 401
    assert _post(port, {"Authorization": "Bearer " + TOKEN}).status_code == 200


CLAUDE = 'claude mcp add --transport http evokernel {url} --header "Authorization: Bearer <token>"'


def test_401_says_a_bearer_token_is_required_and_how_to_pass_it(server):
    port, _ = server
    r = _post(port, {})
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="evokernel-mcp"'
    body = r.json()
    assert body["error"] == "bearer_token_required"
    assert "requires a bearer token" in body["error_description"]
    assert CLAUDE.format(url=f"http://127.0.0.1:{port}/mcp") in body["error_description"]
    wrong = _post(port, {"Authorization": "Bearer " + TOKEN[:-1] + "x"})
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert wrong.json()["error"] == "invalid_token" and "not accepted" in wrong.json()["error_description"]
    assert TOKEN[:-1] not in wrong.text
    # the URL shown is the one the client used when it is a name this server serves, else the bound address
    assert _post(port, {"Host": "tunnel.example:443"}).json()["claude_code"] == CLAUDE.format(
        url="http://tunnel.example:443/mcp")
    assert _post(port, {"Host": "evil.example"}).json()["claude_code"] == CLAUDE.format(
        url=f"http://127.0.0.1:{port}/mcp")


def test_oauth_discovery_and_registration_say_a_bearer_token_is_required(server):
    port, _ = server
    base = f"http://127.0.0.1:{port}"
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        r = httpx2.get(base + path, timeout=30)
        assert r.status_code == 404 and r.json()["error"] == "bearer_token_required", path
        assert "--header" in r.json()["error_description"], path
    r = httpx2.post(base + "/register", json={"redirect_uris": ["http://localhost:1/cb"], "client_name": "c"},
                    timeout=30)
    assert r.status_code == 400 and "requires a bearer token" in r.json()["error_description"]
    assert "does no OAuth" in r.json()["error_description"]


def test_host_and_origin_checked(server):
    port, _ = server
    auth = {"Authorization": "Bearer " + TOKEN}
    assert _post(port, {**auth, "Host": "evil.example"}).status_code in (400, 403, 421)
    assert _post(port, {**auth, "Origin": "http://evil.example"}).status_code == 403
    assert _post(port, {**auth, "Host": "tunnel.example"}).status_code == 200  # --allowed-host
    assert _post(port, {**auth, "Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}).status_code == 200


def _client(port: int) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    return Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http))


def test_concurrent_clients_mixed_calls(server):
    port, log_path = server
    errors: list[str] = []
    done: list[int] = []

    async def one(i: int) -> None:
        async with _client(port) as c:
            for k in range(20):
                which = (i + k) % 4
                if which == 0:
                    r = await c.call_tool("search_docs", {"query": f"LDS bank conflicts {k}", "top_k": 1 + k % 3})
                    ok = not r.is_error and len(r.structured_content["results"]) <= 1 + k % 3 and \
                        r.structured_content["query"] == f"LDS bank conflicts {k}"
                elif which == 1:
                    r = await c.call_tool("list_tasks", {})
                    ok = not r.is_error and "vector_add" in [t["name"] for t in r.structured_content["tasks"]]
                elif which == 2:
                    r = await c.call_tool("get_task", {"task": ["vector_add", "softmax", "rmsnorm"][k % 3]})
                    ok = not r.is_error and r.structured_content["name"] == ["vector_add", "softmax", "rmsnorm"][k % 3]
                else:
                    r = await c.call_tool("query_rocminfo", {})
                    ok = not r.is_error and r.structured_content["backend"] in ("rocm", "cuda", "none")
                if not ok:
                    errors.append(f"client {i} call {k}: {r.content[0].text[:300]}")
                done.append(1)

    async def main():
        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, i)
    anyio.run(main)
    assert not errors, errors[:5]
    assert len(done) == 200
    text = open(log_path).read()
    assert TOKEN not in text and TOKEN[:-1] not in text, "the token (or the wrong one sent) appears in the log"
