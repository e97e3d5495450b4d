"""profile_pmc's result on the genuine H200 recordings (tests/fixtures/cuda, Nsight Compute 2025.3.1): static
device values kept out of the per-dispatch counters, a table of every dispatch, the heaviest first, findings
naming their dispatch, notes whose read_artifact call returns the file they name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evokernel_mcp import artifacts
from evokernel_mcp.profile import collect, presets
from evokernel_mcp.profile.derived import DeviceSpec, derive, derive_with_notes
from evokernel_mcp.profile.findings import findings_for
from evokernel_mcp.profile.models import PmcDispatch
from evokernel_mcp.profile.ncu_parsers import device_names, parse_ncu_raw_csv, split_static

CU = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
H200 = collect.table_spec("sm_90", "nvidia", "NVIDIA H200")


def _result(ds, max_dispatches=4, preset="overview"):
    files = {"dispatches.jsonl": collect._pmc_table(ds, H200), "ncu_raw.csv": "raw"}
    return collect._pmc_result("ncu", "ncu", "2025.3.1", ["ncu"], H200, collect._pmc_dispatches(ds, H200, max_dispatches),
                               len(ds), files, presets.ncu_metrics(preset, None), [], preset, raw=ds)


def test_device_attributes_are_not_counters():
    text = (CU / "ncu_raw_axpy_full_h200.csv").read_text()
    (raw,) = parse_ncu_raw_csv(text, "raw.csv")
    measured, static = split_static(raw.counters)
    assert len([k for k in static if k.startswith("device__attribute_")]) > 100 and "c2clink__present" in static
    assert not any(k.startswith(("device__attribute_", "c2clink__", "nvlink__", "profiler__")) for k in measured)
    assert "dram__bytes_read.sum" in measured
    (d,) = collect._pmc_dispatches([raw], H200, 3)
    assert not any(k.startswith("device__attribute_") for k in d.counters)
    short, full = collect._device_attributes([raw], device_names(text, "raw.csv"))
    assert short["display_name"] == "NVIDIA H200" and short["multiprocessor_count"] == 132
    assert json.loads(full)["device__attribute_l2_cache_size"] == 62914560


def test_every_dispatch_in_the_table_heaviest_first_findings_name_their_dispatch():
    ds = parse_ncu_raw_csv((CU / "ncu_metrics_axpy_fma_h200.csv").read_text(), "m.csv")  # 2 kernels x 2 launches
    res = _result(ds)
    assert [(r.index, r.kernel, r.grid, r.block) for r in res.dispatch_table] == [
        (0, "axpy_kernel", "(65536, 1, 1)", "(128, 1, 1)"), (1, "fma_loop_kernel", "(65536, 1, 1)", "(128, 1, 1)"),
        (2, "axpy_kernel", "(65536, 1, 1)", "(128, 1, 1)"), (3, "fma_loop_kernel", "(65536, 1, 1)", "(128, 1, 1)")]
    assert res.dispatch_table[1].metrics["sm_throughput"] == 96.4 and 3 <= len(res.dispatch_table[0].metrics) <= 4
    assert sum(r.time_pct for r in res.dispatch_table) == pytest.approx(100, abs=0.2)
    # the longest first, one per kernel before a repeat
    assert [(d.kernel, d.dispatch_id) for d in res.dispatches][:2] == [("fma_loop_kernel", 1), ("axpy_kernel", 0)]
    shown = {(d.kernel, str(d.dispatch_id)) for d in res.dispatches}
    assert res.findings and all((f.evidence["kernel"], f.evidence["dispatch"]) in shown for f in res.findings)
    assert all(f.text.startswith(f"{f.evidence['kernel']} #{f.evidence['dispatch']}: ") for f in res.findings)
    assert {f.evidence["kernel"] for f in res.findings} == {"fma_loop_kernel", "axpy_kernel"}
    assert res.bound == "compute-bound" and len(res.model_dump_json()) <= collect.MAX_RESULT_CHARS


def test_note_gives_the_read_artifact_call_that_returns_the_table():
    ds = parse_ncu_raw_csv((CU / "ncu_metrics_axpy_fma_h200.csv").read_text(), "m.csv")
    res = _result(ds, max_dispatches=1)
    (note,) = [n for n in res.notes if "read_artifact(" in n]
    assert "showing 1 of 4" in note
    call = note[note.index("read_artifact("):].rstrip(".")
    aid, name = call.split("'")[1], call.split("'")[3]
    assert (aid, name) == (res.artifact_id, "dispatches.jsonl")
    page = artifacts.read_artifact(aid, name=name)
    rows = [json.loads(x) for x in page.text.splitlines()]
    assert [r["dispatch_id"] for r in rows] == [0, 1, 2, 3] and "derived" in rows[0]
    assert artifacts.read_artifact(aid).name == "dispatches.jsonl"  # the default file too


def test_findings_of_one_dispatch_only_name_dispatches_shown():
    ds = parse_ncu_raw_csv((CU / "ncu_metrics_axpy_fma_h200.csv").read_text(), "m.csv")
    res = _result(ds, max_dispatches=1)
    assert {f.evidence["dispatch"] for f in res.findings} == {"1"}


SPEC = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=3350, source="t",
                  peak_tflops={"fp32": 66.9, "tf32_tensor_dense": 494.7, "fp16_bf16_tensor_dense": 989.4})
GEMM = {"gpu__time_duration.sum": 1_000_000, "dram__bytes_read.sum": 2e8, "dram__bytes_write.sum": 1e8,
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": 10.0,
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 70.0,
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 64.0,
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e10}


def test_tensor_pipe_flops_count_in_the_roofline():
    c = GEMM | {"sm__ops_path_tensor_src_tf32_dst_fp32.sum": 3e14}
    d, notes = derive_with_notes(c, 1_000_000, SPEC)
    assert not notes and d["tensor_flops"].value == 3e14 and d["flops"].value == 3e14 + 2e10
    assert d["tensor_pipe_busy"].value == 64.0
    assert d["arithmetic_intensity"].value == pytest.approx((3e14 + 2e10) / 3e8)
    peak = (3e14 + 2e10) / (3e14 / 494.7 + 2e10 / 66.9)  # each kind of work against its own peak
    assert d["roofline_fraction"].value == pytest.approx(100 * (3e14 + 2e10) / 1e6 / 1e3 / peak, rel=1e-3)
    _, found = findings_for([PmcDispatch(kernel="gemm", dispatch_id=7, duration_ns=1e6, counters=c, derived=d)])
    text = " ".join(f.text for f in found)
    assert "tensor pipe busy 64%" in text and "already runs on the matrix pipe" in text
    assert "move the math onto matrix cores" not in text and "Use faster instructions" not in text


def test_roofline_does_not_apply_without_tensor_counters_or_a_peak():
    d, notes = derive_with_notes(GEMM, 1_000_000, SPEC)  # a tensor GEMM profiled without the tensor op counters
    assert "roofline_fraction" not in d and "arithmetic_intensity" not in d
    assert notes and notes[0].startswith("roofline does not apply: the tensor pipe is 64% busy")
    _, found = findings_for([PmcDispatch(kernel="gemm", dispatch_id=2, duration_ns=1e6, counters=GEMM, derived=d,
                                         notes=notes)])
    assert any("roofline does not apply" in f.text and f.evidence["dispatch"] == "2" for f in found)
    no_tf32 = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=4800, peak_tflops={"fp32": 66.9}, source="H200 row")
    d, notes = derive_with_notes(GEMM | {"sm__ops_path_tensor_src_tf32_dst_fp32.sum": 3e14}, 1_000_000, no_tf32)
    assert "roofline_fraction" not in d and "no peak in the arch table" in notes[0]
    assert "tf32" in notes[0]


def test_idle_tensor_pipe_gets_the_matrix_core_advice():
    c = dict(GEMM, **{"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 0.0})
    _, found = findings_for([PmcDispatch(kernel="k", dispatch_id=0, duration_ns=1e6, counters=c,
                                         derived=derive(c, 1e6, SPEC))])
    assert "matrix pipe is idle" in found[0].text


def test_presets_ask_for_tensor_flops():
    for p in ("overview", "compute"):
        assert set(presets.NCU_TENSOR_FLOP) <= set(presets.ncu_metrics(p, None))


def test_tensor_peak_missing_from_the_table_comes_from_ncu_peak_and_clock():
    (raw,) = parse_ncu_raw_csv((CU / "ncu_raw_axpy_full_h200.csv").read_text(), "raw.csv")
    assert "tf32_tensor_dense" not in H200.peak_tflops  # the H200 row has no TF32 peak
    c = raw.counters | {"sm__ops_path_tensor_src_tf32_dst_fp32.sum": 3e14,
                        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 64.0}
    d, notes = derive_with_notes(c, 1_000_000, H200)
    assert not notes and "roofline_fraction" in d
    peak = 270_336 * 1.968163e9 / 1e12  # recorded dense HGMMA TF32 FLOP/cycle x recorded SM clock
    assert d["flops"].value == 3e14  # the full-set recording has no FFMA .sum: tensor FLOPs only
    assert "tf32_tensor_dense = sm__ops_path_tensor_op_hgmma_src_tf32" in d["roofline_ridge_point"].formula
    assert d["roofline_ridge_point"].value == pytest.approx(peak * 1e3 / 4800, rel=1e-3)


def test_amd_mfma_busy_without_mops_counters_has_no_roofline():
    spec = DeviceSpec(arch="gfx942", vendor="amd", compute_units=304, num_xcc=8, peak_gbs=5300,
                      peak_tflops={"bf16_matrix": 1307.4}, source="t")
    c = {"GRBM_GUI_ACTIVE": 8e6, "SQ_VALU_MFMA_BUSY_CYCLES": 0.5 * 1216 * 1e6, "FETCH_SIZE": 1e6, "WRITE_SIZE": 1e5}
    d, notes = derive_with_notes(c, 1e6, spec)
    assert d["mfma_busy"].value == pytest.approx(50.0) and "roofline_fraction" not in d
    assert notes[0].startswith("roofline does not apply: the MFMA is 50% busy")


def test_four_kernels_with_every_counter_all_shown_within_budget():
    (raw,) = parse_ncu_raw_csv((CU / "ncu_raw_axpy_full_h200.csv").read_text(), "raw.csv")  # 2,238 columns
    ds = []
    for i, (name, ns) in enumerate((("helper", 20_000), ("gemm_bf16", 900_000), ("gemm_tf32", 600_000),
                                    ("swish", 80_000))):
        ds.append(raw.model_copy(update={"dispatch_id": i, "kernel": name, "duration_ns": ns}, deep=True))
    res = _result(ds, max_dispatches=4)
    assert [d.kernel for d in res.dispatches] == ["gemm_bf16", "gemm_tf32", "swish", "helper"]
    assert not any(k.startswith("device__attribute_") for d in res.dispatches for k in d.counters)
    assert len(res.dispatch_table) == 4 and not res.notes
    assert len(res.model_dump_json()) <= collect.MAX_RESULT_CHARS
    assert {f.evidence["kernel"] for f in res.findings} <= {"gemm_bf16", "gemm_tf32", "swish"}


def test_ncu_pmc_result_from_the_recorded_raw_page():
    text = (CU / "ncu_raw_axpy_full_h200.csv").read_text()
    res = collect.ncu_pmc_result(text, "log", b"rep", "ncu", "2025.3.1", ["ncu"], collect.table_spec("sm_90", "nvidia"),
                                 presets.ncu_metrics("overview", None), 3, "overview")
    assert res.device_attributes["display_name"] == "NVIDIA H200" and "H200_SXM" in res.provenance[2].detail
    assert not any(k.startswith("device__attribute_") for k in res.dispatches[0].counters)
    assert [f.name for f in artifacts.info(res.artifact_id).files][:2] == ["dispatches.jsonl", "device_attributes.json"]
    assert res.dispatch_table[0].kernel == "axpy_kernel" and res.dispatch_table[0].grid == "(16384, 1, 1)"


def test_finding_label_drops_the_signature():
    from evokernel_mcp.profile.findings import _label

    d = PmcDispatch(kernel="void addition_kernel<float>(float*, float const*, int)", dispatch_id=1, counters={})
    assert _label(d) == "addition_kernel<float> #1"
