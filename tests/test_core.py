"""The spine: artifacts, subprocess helper, arch table, server registration."""

from __future__ import annotations

import sys

import anyio
import pytest

from evokernel_mcp import artifacts
from evokernel_mcp.arch import table
from evokernel_mcp.errors import BadInput, NotFound, ToolNotFound, ToolTimeout
from evokernel_mcp.subproc import run_async, run_sync


def test_artifact_paging_by_lines():
    text = "\n".join(f"line {i}" for i in range(250))
    aid = artifacts.put("asm", {"kernel.s": text, "other.txt": "x"})
    p1 = artifacts.read_artifact(aid, offset=0, limit=100)
    assert p1.name == "kernel.s" and p1.total == 250 and p1.next_offset == 100
    assert p1.text.splitlines()[0] == "line 0" and p1.text.splitlines()[-1] == "line 99"
    p3 = artifacts.read_artifact(aid, offset=200, limit=100)
    assert p3.next_offset is None and p3.text.splitlines()[-1] == "line 249"
    assert artifacts.read_artifact(aid, name="other.txt").text == "x"


def test_artifact_bad_ids_are_refused():
    with pytest.raises(BadInput):
        artifacts.read_artifact("../../etc/passwd")
    with pytest.raises(NotFound):
        artifacts.read_artifact("0123456789abcdef")
    aid = artifacts.put("x", {"a.txt": "1"})
    with pytest.raises(NotFound):
        artifacts.read_artifact(aid, name="../meta.json")


def test_run_sync_timeout_kills_group():
    with pytest.raises(ToolTimeout):
        run_sync([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)


def test_run_sync_missing_tool():
    with pytest.raises(ToolNotFound):
        run_sync(["/nonexistent/tool-xyz"], timeout_s=5)


def test_run_async_output_and_timeout():
    async def main():
        res = await run_async([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
                              timeout_s=20)
        assert res.returncode == 0 and res.stdout.strip() == "out" and res.stderr.strip() == "err"
        with pytest.raises(ToolTimeout):
            await run_async([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)

    anyio.run(main)


def test_arch_table_has_sources_for_core_facts():
    for arch in ("gfx90a", "gfx942", "gfx950"):
        f = table.fact(arch, "lds_per_cu_kib")
        assert f.source and f.ref.endswith(f"{arch}.lds_per_cu_kib")
    assert table.value("gfx950", "lds_per_cu_kib") == 160
    assert table.value("gfx942", "lds_per_cu_kib") == 64
    assert table.value("sm_90", "warp_size") == 32
    with pytest.raises(BadInput):
        table.fact("gfx000", "lds_per_cu_kib")


def test_probe_version_skips_banner_lines(tmp_path):
    from evokernel_mcp.subproc import probe_version

    exe = tmp_path / "fake-ncu"  # replays the shape of ncu --version (recorded in tests/fixtures/cuda/versions_h200.txt)
    exe.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\n"
                   "echo 'Copyright (c) 2018-2025 NVIDIA Corporation'\n"
                   "echo 'Version 2025.3.1.0 (build 36398880) (public-release)'\n")
    exe.chmod(0o755)
    assert probe_version(str(exe)) == "Version 2025.3.1.0 (build 36398880) (public-release)"


def test_artifact_resource_and_tool_through_the_mcp_client():
    from mcp import Client

    from evokernel_mcp.server import build_server

    aid = artifacts.put("asm", {"kernel.s": "v_fmac_f32 v0, v1, v2\ns_endpgm"})

    async def main():
        async with Client(build_server()) as c:
            r = await c.read_resource(f"evokernel://artifacts/{aid}/kernel.s")
            assert r.contents[0].text.startswith("v_fmac_f32")
            page = await c.call_tool("read_artifact", {"artifact_id": aid, "offset": 1, "limit": 1})
            assert not page.is_error and page.structured_content["text"] == "s_endpgm"
            assert page.structured_content.get("next_offset") is None and page.structured_content["total"] == 2

    anyio.run(main)


def test_prune_old_dirs_keeps_the_newest(tmp_path):
    import os

    from evokernel_mcp.paths import prune_old_dirs

    for i in range(5):
        d = tmp_path / f"job{i}"
        d.mkdir()
        (d / "candidate.py").write_text("x")
        os.utime(d, (1000 + i, 1000 + i))
    (tmp_path / "not_a_dir.txt").write_text("kept")
    assert prune_old_dirs(tmp_path, keep=2) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job3", "job4", "not_a_dir.txt"]


def test_one_product_matcher_for_live_device_names():
    assert table.match_product("gfx942", "AMD Instinct MI300X VF") == "MI300X"
    assert table.match_product("sm_90", "NVIDIA H200") == "H200_SXM"
    assert table.match_product("sm_90", "NVIDIA H100 PCIe") is None  # not the SXM part the table describes
    assert table.product_for("sm_90", "NVIDIA H100 PCIe") == "H100_SXM5"  # falls back to the arch default
    assert table.product_for("gfx950", None) == "MI355X"
