"""The ROCm invocation path end to end with a REPLAY executable standing in for rocprofv3
(tests/fixtures/rocm_replay/rocprofv3 writes the recorded fixture files where rocprofv3 would)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import standin
from local_session import local_launch

from evokernel_mcp import artifacts
from evokernel_mcp.errors import BadInput, ToolNotFound
from evokernel_mcp.profile import api, collect, presets
from evokernel_mcp.profile.derived import DeviceSpec
from evokernel_mcp.subproc import probe_version

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

REPLAY_DIR = FIXTURES / "rocm_replay"
REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n" \
      "def get_inputs():\n    return [torch.randn(64)]\ndef get_init_inputs():\n    return []\n"
CAND = "def run(x):\n    return x * 2\n"


@pytest.fixture
def replay(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{REPLAY_DIR}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("ROCPROFV3", raising=False)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    probe_version.cache_clear()
    return log


def _argvs(log: Path) -> list[list[str]]:
    return [json.loads(x) for x in log.read_text().splitlines()]


def test_replay_pmc_pipeline_multi_pass(replay, tmp_path):
    names = presets.preset_counters("memory", "gfx942")
    passes = presets.split_passes(names, "gfx942")
    launch = local_launch(tmp_path / "work", {"reference": REF, "candidate": CAND, "warmup": 1, "iters": 2})
    spec = DeviceSpec(arch="gfx942", vendor="amd", compute_units=304, num_xcc=8, peak_gbs=5300, source="t")
    res = anyio.run(collect.pmc_rocm, launch, passes, "addition_kernel", spec, 3, names, "memory")
    runs = [a for a in _argvs(replay) if "--" in a]
    argv = runs[0]
    assert argv[:2] == ["-i", "pmc_input_run01.txt"]  # relative to the child's scratch dir (its cwd)
    assert argv[argv.index("--kernel-include-regex") + 1] == "addition_kernel"
    assert argv[argv.index("--kernel-iteration-range") + 1] == "[2-3]"
    assert len(runs) == len(passes) >= 2  # one run of a fresh child per pass
    assert all(len((tmp_path / "work" / a[1]).read_text().splitlines()) == 1 for a in runs)
    # recorded 7.0 counter CSV: 4 dispatches, SQ_WAVES 16384 each, durations End-Start
    assert res.tool.name == "rocprofv3" and "REPLAY" in res.tool.version
    assert res.dispatches_total == 4 and len(res.dispatches) == 3
    assert res.dispatches[0].counters == {"SQ_WAVES": 16384.0} and res.dispatches[0].duration_ns == 52151
    assert res.arch == "gfx950"  # refined from the recorded agent_info.csv (MI350X)
    assert res.passes == passes and res.findings  # not enough counters -> a note, never a fake bottleneck
    assert res.bound == "unknown"
    files = artifacts.info(res.artifact_id).files
    assert any(f.name.endswith("counter_collection.csv") for f in files)
    assert any(f.name == "dispatches.jsonl" for f in files)
    assert len(res.model_dump_json()) / 4 < 4000


def test_replay_profile_pmc_api_runs_runner(replay, monkeypatch, tmp_path):
    standin.use(monkeypatch, standin.install(tmp_path / "bin", "rocprofv3"))  # runs the sandboxed child first
    res = anyio.run(lambda: api.profile_pmc(candidate=CAND, reference=REF, preset="occupancy", arch="gfx942",
                                            device="cpu", wait_s=120, timeout_s=120))
    assert res.job_id and res.preset == "occupancy" and res.dispatches_total == 4
    assert any(a == ["--list-avail"] for a in _argvs(replay))
    out = json.dumps(res.model_dump(mode="json", by_alias=True))
    assert len(out) / 4 < 4000


def _standin_argv(aid: str, name: str) -> list[str]:
    text = artifacts.read_artifact(aid, name=name, limit=10**9).text
    return json.loads(text.split("STANDIN-ARGV ", 1)[1].splitlines()[0])


def test_replay_thread_trace_att(replay, tmp_path, monkeypatch):
    standin.use(monkeypatch, standin.install(tmp_path / "bin", "rocprofv3"))
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "librocprof-trace-decoder.so").write_bytes(b"")  # presence check only; the replay decodes nothing
    monkeypatch.setenv("ROCPROF_ATT_LIBRARY_PATH", str(lib))
    res = anyio.run(lambda: api.thread_trace(candidate=CAND, reference=REF, kernel_filter="gemm", device="cpu",
                                             top_n=20, wait_s=120, timeout_s=120))
    argv = _standin_argv(res.artifact_id, "rocprofv3_stderr.txt")
    for flag, val in (("--att-target-cu", "1"), ("--att-shader-engine-mask", "0x1"), ("--att-simd-select", "0xF"),
                      ("--att-library-path", str(lib)), ("--kernel-iteration-range", "[2]")):
        assert argv[argv.index(flag) + 1] == val
    assert res.kernel == "_gemm_afp4_wfp4_kernel" and res.total_cycles == 6167428
    assert res.instructions_total == 921 and len(res.hot_instructions) == 20
    assert sum(res.class_breakdown.values()) == pytest.approx(1.0, abs=1e-3)
    assert res.hot_instructions[0].instruction == "s_barrier"
    assert res.findings and all(f.evidence for f in res.findings)  # e.g. waves waiting at s_barrier
    assert res.stall_reasons and sum(res.stall_reasons.values()) == pytest.approx(1.0, abs=1e-3)
    assert any("1 of 48" in n for n in res.notes)
    dumped = json.dumps(res.model_dump(mode="json", by_alias=True))
    assert '"class":' in dumped and len(dumped) / 4 < 4000
    page = artifacts.read_artifact(res.artifact_id, name="instructions.csv", limit=5)
    assert page.total == 922 and page.text.startswith("index,class,hits")


def test_att_decoder_missing_says_how_to_install(replay, monkeypatch, tmp_path):
    monkeypatch.setenv("ROCPROF_ATT_LIBRARY_PATH", str(tmp_path))
    with pytest.raises(ToolNotFound, match="rocprof-trace-decoder package"):
        anyio.run(lambda: api.thread_trace(candidate=CAND, reference=REF, device="cpu"))


def test_no_profiler_tool_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ROCPROFV3", raising=False)
    monkeypatch.delenv("NCU", raising=False)
    with pytest.raises(ToolNotFound, match="rocprofiler-sdk.*Nsight Compute"):
        anyio.run(lambda: api.profile_pmc(candidate=CAND, reference=REF, device="cpu"))


def test_bad_inputs(replay):
    with pytest.raises(BadInput, match="exactly one of task"):
        anyio.run(lambda: api.profile_pmc(candidate=CAND, device="cpu"))
    with pytest.raises(BadInput, match="close"):
        anyio.run(lambda: api.profile_pmc(candidate=CAND, reference=REF, counters=["SQ_WAVEZ"], arch="gfx942",
                                          device="cpu"))


@pytest.fixture(scope="module", autouse=True)
def _close_jobs():
    yield
    from evokernel_mcp.app import close_app

    anyio.run(close_app)


def test_replay_mcp_client_thread_trace_and_errors(replay, tmp_path, monkeypatch):
    from mcp import Client

    from evokernel_mcp.server import build_server

    standin.use(monkeypatch, standin.install(tmp_path / "bin", "rocprofv3"))
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "librocprof-trace-decoder.so").write_bytes(b"")
    monkeypatch.setenv("ROCPROF_ATT_LIBRARY_PATH", str(lib))

    async def go():
        async with Client(build_server()) as client:
            r = await client.call_tool("thread_trace", {"candidate": CAND, "reference": REF, "device": "cpu",
                                                        "top_n": 5, "wait_s": 600})  # the result, however loaded
            assert not r.is_error, r.content
            sc = r.structured_content
            assert sc["kernel"] == "_gemm_afp4_wfp4_kernel" and sc["hot_instructions"][0]["class"] == "barrier"
            assert sc["tool"]["name"] == "rocprofv3" and sc["job_id"]
            r = await client.call_tool("profile_pmc", {"candidate": CAND, "reference": REF, "device": "cpu",
                                                       "counters": ["TCC_HITT_sum"], "arch": "gfx942"})
            assert r.is_error and "TCC_HIT_sum" in r.content[0].text

    anyio.run(go)


def test_a_job_that_fails_is_a_result_with_error_not_a_raise(replay, monkeypatch):
    from evokernel_mcp.profile import session

    async def broken(*a, **k):
        raise RuntimeError("pipeline bug")
    monkeypatch.setattr(session, "run_pipeline", broken)
    res = anyio.run(lambda: api.profile_pmc(candidate=CAND, reference=REF, preset="occupancy", arch="gfx942",
                                            device="cpu", wait_s=60, timeout_s=60))
    assert res.state == "failed" and res.error is not None and "pipeline bug" in res.error.message
    assert res.job_id and res.dispatches == []
