"""Strict arguments (a misspelled name is an error naming the right one, for every tool) and structured
errors ({kind, message, next_call} with kind from a closed set)."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from evokernel_mcp.errors import ERROR_KINDS, BadInput, NotFound, ToolNotFound, error_body
from evokernel_mcp.server import build_server


def _misspell(name: str) -> str:
    return name[:-1] if len(name) > 4 else name + "x"


async def _each_tool_misspelled():
    out = []
    async with Client(build_server()) as c:
        for t in (await c.list_tools()).tools:
            for arg in list(t.input_schema.get("properties", {}))[:3]:
                wrong = _misspell(arg)
                if wrong in t.input_schema["properties"]:
                    continue
                r = await c.call_tool(t.name, {wrong: 1})
                out.append((t.name, arg, wrong, r))
    return out


def test_misspelled_argument_names_the_right_one_for_every_tool():
    results = anyio.run(_each_tool_misspelled)
    assert len({name for name, *_ in results}) >= 17
    for tool, arg, wrong, r in results:
        assert r.is_error, (tool, wrong)
        err = r.structured_content["error"]
        assert err["kind"] == "bad_argument", (tool, err)
        assert f"'{wrong}'" in err["message"] and f"Did you mean '{arg}'" in err["message"], (tool, err["message"])
        assert err["next_call"].startswith(f"{tool}("), err


def test_misspelt_names_and_values_get_a_suggestion():
    async def main():
        async with Client(build_server()) as c:
            a = await c.call_tool("compile_kernel", {"source": "x", "language": "triton", "kernel": "k",
                                                     "targt": "gfx950"})
            b = await c.call_tool("verify_vs_pytorch", {"candidate": "x", "task": "vector_add", "shape": "small"})
            n = await c.call_tool("compile_kernel", {"source": "x", "language": "triton", "kernel": "k",
                                                     "options": {"num_warp": 4}})
            t = await c.call_tool("compile_kernel", {"source": "x", "language": "rust", "kernel": "k"})
            u = await c.call_tool("job_statu", {"job_id": "x"})
            m = await c.call_tool("job_status", {"job_id": "job-000000000000"})
        return a, b, n, t, u, m
    a, b, n, t, u, m = anyio.run(main)
    assert "Did you mean 'target'" in a.content[0].text
    assert "Did you mean 'shapes'" in b.structured_content["error"]["message"]
    assert "'options.num_warp'" in n.structured_content["error"]["message"]
    assert "Did you mean 'num_warps'" in n.structured_content["error"]["message"]
    err = t.structured_content["error"]  # pydantic's error, one line, no boilerplate
    assert err["kind"] == "bad_argument" and "'language'" in err["message"] and "pydantic" not in err["message"]
    assert u.structured_content["error"]["kind"] == "not_found" and "job_status" in u.content[0].text
    assert m.structured_content["error"] == {"kind": "not_found", "message": m.structured_content["error"]["message"],
                                             "next_call": "list_jobs()"}


def test_error_body_kinds():
    assert error_body(BadInput("x")).kind == "bad_argument"
    assert error_body(NotFound("no task 'foo'")).next_call == "list_tasks()"
    tnf = error_body(ToolNotFound("ncu", env_var="NCU", hint="Install the CUDA toolkit: apt-get install ..."))
    assert tnf.kind == "tool_missing" and "apt-get" not in tnf.message and "apt-get" in tnf.detail
    assert tnf.next_call.startswith("query_rocminfo()")
    crash = error_body(RuntimeError("secret internals"))
    assert crash.kind == "internal" and "secret" not in crash.message
    assert set(ERROR_KINDS) >= {"bad_argument", "not_found", "tool_missing", "timeout", "internal"}


@pytest.mark.parametrize("kind", ["bad_argument", "not_found"])
def test_error_kinds_closed_set(kind):
    from evokernel_mcp.errors import EvoError

    assert error_body(EvoError("m", kind=kind)).kind == kind
    assert error_body(EvoError("m", kind="made_up")).kind == "failed"
