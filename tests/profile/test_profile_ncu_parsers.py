"""ncu parsers on the genuine H200 recordings in tests/fixtures/cuda (Nsight Compute 2025.3.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evokernel_mcp.errors import ParseError
from evokernel_mcp.profile.derived import DeviceSpec, derive
from evokernel_mcp.profile.findings import classify
from evokernel_mcp.profile.ncu_parsers import parse_ncu_raw_csv, parse_ncu_source_csv, unit_scale
from evokernel_mcp.profile.trace import summarize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

CU = FIXTURES / "cuda"
H200 = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=4800, peak_tflops={"fp32": 66.9}, source="test")


def test_metrics_long_csv_with_program_output_before():
    ds = parse_ncu_raw_csv((CU / "ncu_metrics_axpy_fma_h200.csv").read_text(), "m.csv")
    assert [(d.dispatch_id, d.kernel) for d in ds] == [(0, "axpy_kernel"), (1, "fma_loop_kernel"),
                                                       (2, "axpy_kernel"), (3, "fma_loop_kernel")]
    a, f = ds[0], ds[1]
    assert a.duration_ns == 182496 and a.grid_size == 65536 and a.workgroup_size == 128
    assert a.counters["dram__bytes_read.sum"] == 536879360 and a.counters["dram__bytes_write.sum"] == 249009920
    assert a.counters["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == 89.52
    assert f.counters["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 17179869184
    assert f.counters["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 96.36


def test_classification_on_recorded_kernels():
    ds = parse_ncu_raw_csv((CU / "ncu_metrics_axpy_fma_h200.csv").read_text(), "m.csv")
    da = derive(ds[0].counters, ds[0].duration_ns, H200)
    assert da["dram_gbs"].value == pytest.approx((536879360 + 249009920) / 182496, rel=1e-4)
    assert classify(da)[0] == "memory-bound"
    df = derive(ds[1].counters, ds[1].duration_ns, H200)
    assert classify(df)[0] == "compute-bound" and df["flops"].value == 2 * 17179869184


def test_raw_page_units_and_section_prefixes():
    (d,) = parse_ncu_raw_csv((CU / "ncu_raw_axpy_full_h200.csv").read_text(), "raw.csv")
    assert d.kernel == "axpy_kernel" and d.grid_size == 16384
    assert d.duration_ns == 44704  # 44.704000 us
    assert d.counters["dram__bytes_read.sum"] == pytest.approx(134225408)  # 134.225408 Mbyte
    assert d.counters["sm__warps_active.avg.pct_of_peak_sustained_active"] == pytest.approx(81.769768)
    assert "l1tex__t_sector_hit_rate.pct" in d.counters  # from 'SM_B.TriageCompute.l1tex__...'


def test_details_page_short_rows():
    (d,) = parse_ncu_raw_csv((CU / "ncu_details_axpy_full_h200.csv").read_text(), "details.csv")
    assert d.counters["DRAM Throughput"] == 84.26 and d.counters["Elapsed Cycles"] == 88323


@pytest.mark.parametrize("name,n,total,top_class", [
    ("ncu_source_sass_axpy_h200.csv", 56, 5360, "FP32 FMA/arith"),
    ("ncu_source_sass_fma_loop_h200.csv", 368, 17479, "FP32 FMA/arith"),
])
def test_source_sass(name, n, total, top_class):
    rows = parse_ncu_source_csv((CU / name).read_text(), name)
    assert len(rows) == n and sum(r.cycles for r in rows) == total
    br, hot, stall, _src, t = summarize(rows, "nvidia", top_n=20)
    assert t == total and sum(br.values()) == pytest.approx(1.0, abs=2e-3)
    assert next(iter(br)) == top_class and sum(stall.values()) == pytest.approx(1.0, abs=2e-3)
    assert all(not k.endswith("(Not Issued)") for k in stall)
    assert len(json.dumps([h.model_dump(by_alias=True) for h in hot])) / 4 < 4000


def test_source_first_row_values():
    rows = parse_ncu_source_csv((CU / "ncu_source_sass_axpy_h200.csv").read_text())
    r = rows[0]
    assert (r.instruction, r.address, r.cycles, r.stall_cycles, r.hits) == (
        "LDC R1, c[0x0][0x28]", 0x7fa6d77a2800, 44, 43, 65536)
    assert r.stall_reasons == {"no_inst": 44}


def test_unit_scale():
    assert (unit_scale("us"), unit_scale("Mbyte"), unit_scale("Tbyte/s"), unit_scale("%"), unit_scale("")) == (
        1e3, 1e6, 1e12, 1.0, 1.0)


def test_ncu_malformed():
    with pytest.raises(ParseError, match="no CSV rows"):
        parse_ncu_raw_csv("==PROF== No kernels were profiled.\n", "x.csv")
    text = (CU / "ncu_metrics_axpy_fma_h200.csv").read_text().replace('"89.52"', '"8x9"', 1)
    with pytest.raises(ParseError, match="Metric Value"):
        parse_ncu_raw_csv(text, "x.csv")
    src = (CU / "ncu_source_sass_axpy_h200.csv").read_text()
    with pytest.raises(ParseError, match="fields"):
        parse_ncu_source_csv(src[: len(src) // 2].rsplit(",", 3)[0] + "\n", "s.csv")
    with pytest.raises(ParseError, match="Address"):
        parse_ncu_source_csv('"a","b"\n"1","2"\n', "s.csv")


def test_pmc_result_from_recording_fits_budget():
    from evokernel_mcp.profile import collect, presets

    ds = parse_ncu_raw_csv((CU / "ncu_metrics_axpy_fma_h200.csv").read_text(), "m.csv")
    metrics = presets.ncu_metrics("compute", None)
    argv = ["ncu", "--metrics", ",".join(metrics), "--", "python", "-m", "evokernel_mcp.profile.runner"]
    res = collect._pmc_result("ncu", "/usr/local/cuda/bin/ncu", "2025.3.1.0", argv, H200,
                              collect._pmc_dispatches(ds, H200, 4), len(ds), {"ncu_raw.csv": "x"}, metrics,
                              [], "compute")
    assert res.bound == "compute-bound"  # the longest dispatch is fma_loop_kernel
    assert res.findings[0].evidence["kernel"] == "fma_loop_kernel"
    assert len(json.dumps(res.model_dump(mode="json"))) / 4 < 4000


def test_cuda_sass_view_with_unescaped_quotes_in_the_source_text():
    """ncu's cuda,sass source view leaves the quotes inside a source line undoubled (recorded on an H100 from a
    kernel with inline PTX); every instruction still gets its file:line, and the line's text is whole."""
    from evokernel_mcp.profile.ncu_parsers import has_line_info, parse_ncu_source_csv

    rows = parse_ncu_source_csv((CU / "ncu_source_cuda_sass_quotes_h100.csv").read_text(), "src.csv")
    assert rows and has_line_info(rows) and all(r.source and r.source.startswith("quotes_lineinfo.cu:") for r in rows)
    (fadd,) = [r for r in rows if r.instruction.startswith("FADD")]
    assert fadd.source == "quotes_lineinfo.cu:6"
    assert fadd.source_text.startswith('asm volatile("add.f32 %0, %0, %0;" : "+f"(v));') and '"a quoted comment"' \
        in fadd.source_text


def test_an_unreadable_source_view_is_named_as_such_not_as_missing_line_info():
    from evokernel_mcp.profile.collect import _source_rows

    sass = (CU / "ncu_source_sass_axpy_h200.csv").read_text()
    _, rows, notes = _source_rows(sass, '"Line No","Source","Address"\n"2","oops\n')  # a field never closed
    assert rows and len(notes) == 1 and "could not be read" in notes[0] and "-lineinfo" not in notes[0]
    _, _, notes = _source_rows(sass, None)
    assert "compile with -lineinfo" in notes[0]


def test_cuda_sass_view_counts_an_inlined_instruction_once():
    """ncu lists an inlined function's instruction under the function's line and again under its call site's,
    with the same counts: the parser keeps the first, so shares per line and class do not count it twice."""
    text = (CU / "ncu_source_cuda_sass_quotes_h100.csv").read_text()
    once = parse_ncu_source_csv(text, "src.csv")
    lines = text.splitlines()
    fadd = next(ln for ln in lines if "FADD" in ln)
    call_site = '"9","copy(y);"' + ',"-"' * (fadd.count('","') - 1)
    twice = parse_ncu_source_csv("\n".join(lines + [call_site, fadd]) + "\n", "src.csv")
    assert len(twice) == len(once)
    assert [r.source for r in twice if r.instruction.startswith("FADD")] == ["quotes_lineinfo.cu:6"]
    assert sum(r.cycles for r in twice) == sum(r.cycles for r in once)
