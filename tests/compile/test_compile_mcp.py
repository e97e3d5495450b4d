"""compile_kernel through the real MCP SDK client (in-memory)."""

from __future__ import annotations

import anyio
from mcp import Client

from evokernel_mcp.server import build_server

SRC = '''\
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * 2.0, mask=offs < n)
'''
ARGS = {"source": SRC, "language": "triton", "kernel": "scale", "target": "gfx942",
        "signature": {"x_ptr": "*fp32", "n": "i32"}, "constexprs": {"BLOCK": 256}, "options": {"num_warps": 4}}


def test_compile_kernel_via_mcp_client():
    async def main():
        async with Client(build_server()) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert "compile_kernel" in tools and "read_artifact" in tools
            assert "Compile a GPU kernel" in tools["compile_kernel"].description
            r = await c.call_tool("compile_kernel", ARGS)
            assert not r.is_error, r.content
            sc = r.structured_content
            assert sc["ok"] is True and sc["target"] == "gfx942" and sc["kernels"][0]["name"] == "scale"
            assert sc["kernels"][0]["vgpr_count"] > 0 and sc["kernels"][0]["wavefront_size"] == 64
            page = await c.call_tool("read_artifact", {"artifact_id": sc["artifact_id"], "limit": 20})
            assert not page.is_error and page.structured_content["total"] > 20
            again = await c.call_tool("compile_kernel", ARGS)
            assert again.structured_content["cached"] is True
            bad = await c.call_tool("compile_kernel", ARGS | {"target": "gfx1200"})
            assert bad.is_error and "unsupported target" in bad.content[0].text
            bad = await c.call_tool("compile_kernel", ARGS | {"options": {"flags": ["-O3"]}})
            assert bad.is_error and "flags not allowed" in bad.content[0].text

    anyio.run(main)
