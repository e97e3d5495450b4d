"""The rocprofv3 guards (evokernel_mcp/profile/rocprof_safe.py) against a REPLAY rocprofv3 that hangs, aborts
with rc 134, reports an unschedulable counter group (genuine stderr), or traces no wave
(tests/fixtures/rocm_replay_faults/SOURCES.md). Without a fault the replay writes the recorded fixture files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from local_session import local_launch

from evokernel_mcp.profile import collect, presets, rocprof_safe
from evokernel_mcp.profile.derived import DeviceSpec
from evokernel_mcp.subproc import probe_version

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAULTS = FIXTURES / "rocm_replay_faults"
REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n" \
      "def get_inputs():\n    return [torch.randn(64)]\ndef get_init_inputs():\n    return []\n"
CAND = "def run(x):\n    return x * 2\n"
TRITON_CAND = ("import triton\nimport triton.language as tl\n\n@triton.jit\ndef twice_kernel(x_ptr, n, B: tl.constexpr):\n"
               "    pass\n\ndef run(x):\n    return x * 2\n")
SPEC = DeviceSpec(arch="gfx942", vendor="amd", compute_units=304, num_xcc=8, peak_gbs=5300, source="test")
FAULT_VARS = ("REPLAY_FAULT", "REPLAY_HANG_IF", "REPLAY_ABORT_IF", "REPLAY_UNSCHEDULABLE",
              "REPLAY_MAX_COUNTERS_PER_PASS", "REPLAY_ATT_MIN_SE_MASK")


@pytest.fixture
def replay(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAULTS}:{os.environ['PATH']}")
    monkeypatch.delenv("ROCPROFV3", raising=False)
    for v in FAULT_VARS:
        monkeypatch.delenv(v, raising=False)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    probe_version.cache_clear()
    return log


def _argvs(log: Path) -> list[list[str]]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def _pmc_lines(argv: list[str], work: Path) -> list[list[str]]:
    return [ln.split()[1:] for ln in (work / argv[argv.index("-i") + 1]).read_text().splitlines()]


def _launch(tmp_path, cand=CAND, timeout_s=60.0, pass_timeout_s=None):
    return local_launch(tmp_path / "work", {"reference": REF, "candidate": cand, "warmup": 1, "iters": 2},
                        timeout_s=timeout_s, pass_timeout_s=pass_timeout_s)


def _pmc(launch, names, passes=None, kfilter="addition_kernel"):
    passes = passes or presets.split_passes(names, "gfx942")
    return anyio.run(collect.pmc_rocm, launch, passes, kfilter, SPEC, 3, names, "memory")


def _no_zero_stand_ins(res) -> None:
    for d in res.dispatches:
        for name in res.counters_not_collected:
            assert name not in d.counters  # missing means absent, never a 0


def test_replay_rocprofv3_hang_is_degraded_with_reason_not_zero(replay, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_FAULT", "hang")
    names = presets.preset_counters("memory", "gfx942")
    res = _pmc(_launch(tmp_path, timeout_s=4, pass_timeout_s=1.0), names)
    assert res.degraded and res.dispatches == [] and res.dispatches_total == 0
    assert set(res.counters_not_collected) == set(names)
    assert any("did not finish within" in r for r in res.degraded_reasons)
    assert res.findings[0].text.startswith("DEGRADED") and res.bound == "unknown"
    assert res.passes == []


def test_replay_rocprofv3_hang_on_one_counter_is_bisected_away(replay, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_HANG_IF", "TCP_TCC_WRITE_REQ_sum")
    names = presets.preset_counters("memory", "gfx942")
    passes = [names[:5], names[5:]]
    res = _pmc(_launch(tmp_path, timeout_s=60, pass_timeout_s=1.0), names, passes)
    assert res.degraded and "did not finish within" in res.counters_not_collected["TCP_TCC_WRITE_REQ_sum"]
    collected = [c for g in res.passes for c in g]
    assert sorted(collected) == sorted(n for n in names if n != "TCP_TCC_WRITE_REQ_sum")
    assert res.dispatches and res.dispatches[0].counters == {"SQ_WAVES": 16384.0}  # the recorded CSV
    _no_zero_stand_ins(res)
    assert any("split into" in n for n in res.notes)


def test_replay_rocprofv3_rc134_abort_is_degraded_not_an_exception(replay, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_FAULT", "abort")
    names = ["SQ_WAVES", "SQ_INSTS_VALU", "SQ_INSTS_LDS", "GRBM_GUI_ACTIVE"]
    res = _pmc(_launch(tmp_path), names, [names])
    assert res.degraded and not res.dispatches
    assert any("rc 134" in r for r in res.degraded_reasons)
    assert set(res.counters_not_collected) == set(names)
    # gives up after a few failures with no success: not a counter problem, no endless bisection
    assert len([a for a in _argvs(replay) if "-i" in a]) == rocprof_safe.MAX_FAILURES_BEFORE_A_SUCCESS


def test_replay_rocprofv3_sigabrt_on_one_counter_drops_only_it(replay, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_ABORT_IF", "SQ_INSTS_LDS")
    names = ["SQ_WAVES", "SQ_INSTS_VALU", "SQ_INSTS_LDS", "GRBM_GUI_ACTIVE"]
    res = _pmc(_launch(tmp_path), names, [names])
    assert list(res.counters_not_collected) == ["SQ_INSTS_LDS"] or "SQ_INSTS_LDS" in res.counters_not_collected
    assert "fails alone" in res.counters_not_collected["SQ_INSTS_LDS"]
    assert "rc 134" in res.counters_not_collected["SQ_INSTS_LDS"]
    assert sorted(c for g in res.passes for c in g) == sorted(n for n in names if n != "SQ_INSTS_LDS")


def test_replay_rocprofv3_unschedulable_group_is_bisected(replay, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_MAX_COUNTERS_PER_PASS", "3")
    names = presets.preset_counters("overview", "gfx942")
    passes = presets.split_passes(names, "gfx942")
    assert max(len(p) for p in passes) > 3
    res = _pmc(_launch(tmp_path), names, passes)
    runs = [a for a in _argvs(replay) if "-i" in a]
    refused = [a for a in runs if any(len(ln) > 3 for ln in _pmc_lines(a, tmp_path / "work"))]
    assert refused, "the replay must have refused the big groups"
    assert all(len(g) <= 3 for g in res.passes)
    assert sorted(c for g in res.passes for c in g) == sorted(names)  # every counter collected by splitting
    assert not any("fails alone" in r for r in res.counters_not_collected.values())
    assert any("(unschedulable); split into" in n for n in res.notes)
    assert res.dispatches and res.dispatches_total == 4


def test_replay_rocprofv3_counter_that_never_fits_is_named(replay, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAY_UNSCHEDULABLE", "TCC_HIT_sum")
    names = ["GRBM_GUI_ACTIVE", "TCC_HIT_sum", "TCC_MISS_sum"]
    res = _pmc(_launch(tmp_path), names, [names])
    why = res.counters_not_collected["TCC_HIT_sum"]
    assert "fails alone" in why and "exceeds the capabilities of the hardware" in why
    assert res.degraded and res.dispatches
    _no_zero_stand_ins(res)


def test_single_visibility_env_rules():
    env, notes = rocprof_safe.single_visibility_env({"HIP_VISIBLE_DEVICES": "3"})
    assert env == {"HIP_VISIBLE_DEVICES": "3"} and notes == []  # HIP alone stays (unsetting would expose all GPUs)
    env, _ = rocprof_safe.single_visibility_env({"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1"})
    assert env == {"ROCR_VISIBLE_DEVICES": "0,1"}
    env, _ = rocprof_safe.single_visibility_env({"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "2"})
    assert env == {"HIP_VISIBLE_DEVICES": "2"}
    env, _ = rocprof_safe.single_visibility_env({"ROCR_VISIBLE_DEVICES": "5", "CUDA_VISIBLE_DEVICES": "0"})
    assert env == {"ROCR_VISIBLE_DEVICES": "5"}


def test_replay_kernel_filter_always_passed_when_known(replay, tmp_path):
    res = _pmc(_launch(tmp_path, cand=TRITON_CAND), ["SQ_WAVES"], [["SQ_WAVES"]], kfilter=None)
    argv = [a for a in _argvs(replay) if "-i" in a][0]
    assert argv[argv.index("--kernel-include-regex") + 1] == "twice_kernel"
    assert res.kernel_filter == "twice_kernel" and "derived" in res.kernel_filter_source
    assert rocprof_safe.kernel_names_in('__global__ __launch_bounds__(256) void k1(float* a) {}\n'
                                        'extern "C" __global__ void k2(int n) {}') == ["k1", "k2"]


def _att_lib(tmp_path, monkeypatch) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "librocprof-trace-decoder.so").write_bytes(b"")  # presence check only; the replay decodes nothing
    monkeypatch.setenv("ROCPROF_ATT_LIBRARY_PATH", str(lib))
    return lib


def _trace(launch, **kw):
    args = dict(target_cu=1, se_mask="0x1", simd_select="0xF", buffer_size="0x6000000", att_library_path=None)
    args.update(kw)
    return anyio.run(lambda: collect.trace_rocm(launch, "gemm", 10, **args))


def test_replay_att_no_waves_is_retried_wider(replay, tmp_path, monkeypatch):
    _att_lib(tmp_path, monkeypatch)
    monkeypatch.setenv("REPLAY_ATT_MIN_SE_MASK", "0xF")
    res = _trace(_launch(tmp_path))
    att = [a for a in _argvs(replay) if "--att" in a]
    assert [(a[a.index("--att-target-cu") + 1], a[a.index("--att-shader-engine-mask") + 1]) for a in att] == \
        [("1", "0x1"), ("0", "0xF")]
    assert not res.degraded and res.kernel == "_gemm_afp4_wfp4_kernel" and res.total_cycles == 6167428
    assert any("caught no wave" in n for n in res.notes)


def test_replay_att_no_waves_anywhere_is_degraded(replay, tmp_path, monkeypatch):
    _att_lib(tmp_path, monkeypatch)
    monkeypatch.setenv("REPLAY_ATT_MIN_SE_MASK", "0xFFFF")
    res = _trace(_launch(tmp_path))
    assert res.degraded and res.kernel is None and not res.hot_instructions and res.class_breakdown == {}
    assert len(res.degraded_reasons) == 3 and all("no wave" in r for r in res.degraded_reasons)
    assert res.artifact_id


def test_replay_att_hang_is_degraded(replay, tmp_path, monkeypatch):
    _att_lib(tmp_path, monkeypatch)
    monkeypatch.setenv("REPLAY_FAULT", "hang")
    res = _trace(_launch(tmp_path, timeout_s=4, pass_timeout_s=1.5))
    assert res.degraded and "did not finish within" in res.degraded_reasons[0]
    assert len([a for a in _argvs(replay) if "--att" in a]) == 1  # a hang is not retried wider
