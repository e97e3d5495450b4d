"""The self-test on this CPU host (CI) and its capture bundle against REPLAY tools, read back by our parsers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from evokernel_mcp.selftest import bundle, runner, steps
from evokernel_mcp.subproc import probe_version

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
GENUINE = FIX / "rocm"


def test_selftest_cli_on_this_host_reports_and_exits_zero(tmp_path):
    """CI: the whole self-test through the real CLI and a stdio server; nothing fails on a CPU-only host."""
    env = dict(os.environ, EVOKERNEL_HOME=str(tmp_path / "home"))
    for v in ("ROCPROFV3", "NCU"):
        env.pop(v, None)
    p = subprocess.run([sys.executable, "-m", "evokernel_mcp", "selftest", "--json",
                        "--only", "query_rocminfo,compile_triton,compile_hip,verify,benchmark,profile_pmc,thread_trace"],
                       capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    rep = json.loads(p.stdout)
    by = {s["name"]: s for s in rep["steps"]}
    assert p.returncode == 0 == rep["exit_code"], p.stdout[-3000:] + p.stderr[-3000:]
    assert not [s for s in rep["steps"] if s["status"] in ("fail", "degraded")]
    assert by["query_rocminfo"]["status"] == "pass" and by["compile_triton"]["status"] == "pass"
    assert by["compile_hip"]["status"] in ("pass", "skip")
    if rep["backend"] == "none":
        assert by["verify"]["status"] == "pass"  # CPU path (TRITON_INTERPRET=1)
        assert by["benchmark"]["status"] == "skip" and "no GPU" in by["benchmark"]["detail"]
    for name in ("profile_pmc_overview", "profile_pmc_lds", "thread_trace"):
        if not shutil.which("rocprofv3") and not shutil.which("ncu"):
            assert by[name]["status"] == "skip" and "profiler" in by[name]["detail"]
    assert all(s["duration_s"] is not None for s in rep["steps"] if s["status"] != "skip")
    assert set(rep["versions"]) >= {"rocm", "rocprofv3", "att_decoder", "torch", "triton", "nvcc", "ncu",
                                    "nvidia_driver"}
    assert "compile_cuda" not in by  # --only


def test_selftest_only_rejects_unknown_steps():
    with pytest.raises(ValueError, match="unknown step"):
        runner.select(["no_such_step"])
    assert [s[0] for s in runner.select(["compile_hip"])] == ["query_rocminfo", "compile_hip"]
    assert len([s for s in steps.STEPS if s[1] == "profile_pmc"]) == 5  # one per preset


@pytest.fixture
def replay_host(monkeypatch, tmp_path):
    """rocminfo (MI300X recording), rocprofv3 (recorded fixture files), an ATT decoder library placeholder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for src in (FIX / "rocm_replay_bin" / "rocminfo", FIX / "rocm_replay" / "rocprofv3"):
        (bin_dir / src.name).write_text(f'#!/bin/sh\nexec "{src}" "$@"\n')  # the replay finds its files from $0
        (bin_dir / src.name).chmod(0o755)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "librocprof-trace-decoder.so").write_bytes(b"")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ROCPROF_ATT_LIBRARY_PATH", str(lib))
    monkeypatch.setenv("EVOKERNEL_HOME", str(tmp_path / "home"))
    for v in ("ROCPROFV3", "ROCMINFO", "REPLAY_RUN_CHILD", "AMD_SMI"):
        monkeypatch.delenv(v, raising=False)
    probe_version.cache_clear()
    return tmp_path


def test_replay_capture_bundle_round_trips_through_our_parsers(replay_host):
    cap = replay_host / "bundle"
    rep = anyio.run(lambda: runner.run_selftest(only=["compile_hip"], capture_dir=str(cap), inproc=True))
    assert rep.backend == "rocm" and rep.steps[0].status == "pass"
    man, checks = bundle.check_bundle(cap)
    bad = [c for c in checks if not c.ok]
    assert not bad, bad
    parsers = {c.parser for c in checks}
    assert {"rocminfo", "rocprofv3_list_avail", "rocprofv3_counter_collection", "rocprofv3_kernel_trace",
            "rocprofv3_agent_info", "att_code_json", "att_filenames", "att_wave", "amdgpu_metadata"} <= parsers
    # the same layout as tests/fixtures/rocm: <tool>/<file>, rocprofv3's own tree inside rocprofv3/<run>/
    paths = [f.path for f in man.files]
    assert any(p.startswith("rocminfo/rocminfo_amd_instinct_mi300x_vf_gfx942_rocm") for p in paths)
    assert any(p.startswith("rocprofv3/pmc_") and "/pmc_2/" in p for p in paths)
    assert any(p.startswith("rocprofv3/att_") and p.endswith("/code.json") for p in paths)
    assert any(p.startswith("code_object/readelf_notes_gfx942") for p in paths)
    # verbatim: the captured rocminfo is the recording byte for byte
    rocminfo = next(cap / p for p in paths if p.startswith("rocminfo/"))
    assert rocminfo.read_text() == (GENUINE / "rocminfo" / "mi300x_vf_gfx942_rocm6.2.2.txt").read_text()
    m = json.loads((cap / "manifest.json").read_text())
    assert m["gpus"] and m["gpus"][0]["arch"] == "gfx942" and m["created_utc"] and m["files"]
    assert all(f["command"] for f in m["files"])
    assert any(s["what"] == "amd-smi" for s in m["skipped"])  # not on this host: named, not silently absent
    assert (cap / "SOURCES.md").read_text().startswith("# Captured by")
    assert json.loads((cap / "selftest.json").read_text())["steps"][0]["name"] == "query_rocminfo"


def test_replay_check_bundle_flags_a_file_our_parsers_cannot_read(replay_host):
    cap = replay_host / "bundle"
    anyio.run(lambda: runner.run_selftest(only=["query_rocminfo"], capture_dir=str(cap), inproc=True))
    man, _ = bundle.check_bundle(cap)
    target = next(f for f in man.files if f.parser == "rocprofv3_counter_collection")
    (cap / target.path).write_text("Counter_Name\nSQ_WAVES,1,2\n")  # truncated / malformed
    _, checks = bundle.check_bundle(cap)
    bad = [c for c in checks if not c.ok]
    assert [c.path for c in bad] == [target.path] and "ParseError" in bad[0].detail


def test_a_bundle_captured_on_the_h200_parses_back():
    """`selftest --capture` run on the GPU machine (2x H200, 2026-11-23; its report is cited in
    bench/RESULTS.md), returned as a tarball and unpacked here unchanged: every file it
    captured parses with our parsers, and what it could not capture is named."""
    man, checks = bundle.check_bundle(FIX / "selftest_bundle_h200")
    assert man.backend == "cuda" and man.gpus[0]["name"] == "NVIDIA H200" and man.gpus[0]["arch"] == "sm_90"
    assert len(checks) == 4 and all(c.ok for c in checks), [(c.path, c.detail) for c in checks if not c.ok]
    assert {c.parser for c in checks} >= {"nvidia_smi_xml", "ncu_raw_csv", "ncu_source_csv"}
    assert {s["what"] for s in man.skipped} >= {"rocprofv3", "amd-smi"}
