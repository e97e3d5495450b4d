"""Parsers on every genuine rocprofv3 / rocprof sample (values asserted from the files) + corruptions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evokernel_mcp.errors import ParseError
from evokernel_mcp.profile.rocprof_parsers import (
    parse_att_code_json,
    parse_att_filenames,
    parse_att_occupancy,
    parse_att_stats_csv,
    parse_att_wave,
    parse_rocprofv3_agent_info,
    parse_rocprofv3_counter_collection,
    parse_rocprofv3_kernel_trace,
    parse_rocprofv3_list_avail,
    parse_rocprofv3_stats,
)

ROCM_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocm"

V3 = ROCM_FIXTURES / "rocprofv3"
ATT = V3 / "att_gfx950_rocm6.4_skinny_M128"
UI = ATT / "ui_output_agent_1026_dispatch_20"


def read(p):
    return p.read_text()


def test_counter_collection_622():
    ds = parse_rocprofv3_counter_collection(read(V3 / "docs_rocm6.2.2_counter_collection.csv"))
    assert len(ds) == 1
    d = ds[0]
    assert (d.dispatch_id, d.kernel, d.agent, d.grid_size, d.workgroup_size) == (
        1, "matrixTranspose(float*, float*, int)", "1", 1048576, 16)
    assert (d.vgpr_count, d.sgpr_count, d.accum_vgpr_count) == (8, 16, None)
    assert d.counters == {"SQ_WAVES": 65536.0} and d.duration_ns is None


def test_counter_collection_63dev():
    ds = parse_rocprofv3_counter_collection(read(V3 / "docs_rocm6.3dev_counter_collection.csv"))
    assert [d.dispatch_id for d in ds] == [1, 2, 5, 9, 13, 3, 6]
    assert ds[1].kernel == "subtract_kernel(float*, float const*, float const*, int, int)"
    assert all(d.counters == {"SQ_WAVES": 16384.0} for d in ds)


def test_counter_collection_70_durations():
    ds = parse_rocprofv3_counter_collection(read(V3 / "docs_rocm7.0_counter_collection.csv"))
    assert len(ds) == 4 and ds[0].agent == "Agent 1"
    assert ds[0].duration_ns == 3200098838483232 - 3200098838431081 == 52151
    assert ds[3].kernel.startswith("divide_kernel") and ds[3].vgpr_count == 12 and ds[3].accum_vgpr_count == 0


def test_kernel_trace_70():
    ks = parse_rocprofv3_kernel_trace(read(V3 / "docs_rocm7.0_kernel_trace.csv"))
    assert len(ks) == 9
    k = ks[0]
    assert k.duration_ns == 12800 and k.agent == "Agent 4" and k.grid == (1024, 1024, 1) and k.workgroup == (64, 1, 1)
    assert (k.vgpr_count, k.accum_vgpr_count, k.sgpr_count, k.lds_bytes) == (8, 0, 16, 0)
    assert ks[1].kernel.startswith("divide_kernel") and ks[1].accum_vgpr_count == 4 and ks[1].duration_ns == 11200


def test_kernel_trace_63dev():
    ks = parse_rocprofv3_kernel_trace(read(V3 / "docs_rocm6.3dev_kernel_trace.csv"))
    assert len(ks) == 7 and ks[0].duration_ns == 8819330200116308 - 8819330200067564
    assert ks[0].vgpr_count is None and ks[0].lds_bytes == 0 and ks[0].kernel_id == 16 and ks[0].agent == "1"


@pytest.mark.parametrize("name,n,first,last_pct", [
    ("kernel_stats_mi250x_jacobi_hpctraining.csv", 5, 517647434, 0.2360),
    ("kernel_stats_gfx90a_jacobi_mpi_hpctraining.csv", 7, 545275480, 4.671e-04),
    ("hip_api_stats_gfx90a_jacobi_hpctraining.csv", 22, 1248355080, 7.710e-05),
    ("docs_rocm7.0_domain_stats.csv", 1, 458514859, 100.0),
])
def test_stats(name, n, first, last_pct):
    rows = parse_rocprofv3_stats(read(V3 / name), name)
    assert len(rows) == n and rows[0].total_ns == first and rows[-1].percentage == pytest.approx(last_pct)


def test_stats_exponent_stddev():
    rows = parse_rocprofv3_stats(read(V3 / "kernel_stats_gfx90a_jacobi_mpi_hpctraining.csv"))
    last = rows[-1]
    assert (last.name, last.calls, last.min_ns, last.max_ns, last.stddev_ns) == (
        "__amd_rocclr_fillBufferAligned", 1, 5920, 5920, 0.0)


def test_list_avail_gfx90a():
    a = parse_rocprofv3_list_avail(read(V3 / "docs_rocm7.0_list-avail_gfx90a.txt"))
    assert (a.gpu, a.arch, a.truncated) == (0, "gfx90a", True)
    assert [c.name for c in a.counters] == ["processor_id_low", "ALUStalledByLDS", "SQ_WAVES"]
    assert a.counters[1].expression == \
        "400*reduce(SQ_WAIT_INST_LDS,sum)/reduce(SQ_WAVES,sum)/reduce(GRBM_GUI_ACTIVE,max)"
    assert a.counters[2].block == "SQ" and a.counters[2].dimensions.endswith("DIMENSION_SHADER_ENGINE[0:7]")


def test_agent_info_gfx950():
    ags = parse_rocprofv3_agent_info(read(ATT / "bg-126-035d" / "49424_agent_info.csv"))
    cpu, gpu = ags
    assert cpu.agent_type == "CPU" and gpu.agent_type == "GPU"
    assert (gpu.name, gpu.cu_count, gpu.lds_kib, gpu.num_xcc, gpu.device_id, gpu.max_clock_mhz) == (
        "gfx950", 256, 160, 8, 30112, 2200)
    assert (gpu.simd_count, gpu.max_waves_per_simd, gpu.max_waves_per_cu, gpu.wavefront_size) == (1024, 8, 32, 64)


def test_att_stats_csv_and_code_json_agree():
    s = parse_att_stats_csv(read(UI / "att_output.csv"), "att_output.csv")
    c = parse_att_code_json(read(UI / "code.json"))
    assert len(s) == len(c) == 922
    assert sum(r.cycles for r in s) == sum(r.cycles for r in c) == 6167428
    assert sum(r.hits for r in c) == 396912
    assert c[0].is_label and c[0].instruction == "; _gemm_afp4_wfp4_kernel"
    end = next(r for r in c if r.instruction == "s_endpgm")
    assert (end.index, end.address, end.hits, end.cycles) == (920, 11416, 48, 15848)
    store = s[919]
    assert store.instruction == "buffer_store_dwordx4 v[14:17], v0, s[8:11], 0 offen" and store.cycles == 2160
    assert store.source == "/app/aiter/aiter/ops/triton/gemm_afp4wfp4.py:118" and store.stall_cycles is None


def test_att_filenames_wave_occupancy():
    f = parse_att_filenames(read(UI / "filenames.json"))
    assert (f["version"], f["gfxip"], len(f["waves"])) == ("3.0.0", 9, 48)
    assert f["waves"][0] == (0, 0, 0, 0, "se0_sm0_sl0_wv0.json", 27508, 160020)
    w = parse_att_wave(read(UI / "se0_sm0_sl0_wv0.json"))
    assert (w.num_insts, len(w.instructions), w.duration_cycles, w.begin, w.end) == (8269, 8269, 132512, 27508, 160020)
    assert w.instructions[0] == (27540, 2, 0, 4, 62)
    o = parse_att_occupancy(read(UI / "occupancy.json"))
    assert o["shader_engines"] == {"0": 416, "1": 416, "2": 416, "3": 416} and o["dispatches"]["1"] == "4 / 0x1800"


def test_rocprof_v1_stats_read_as_rocprofv3_stats():
    st_ = parse_rocprofv3_stats(read(ROCM_FIXTURES / "rocprof_v1" / "results.stats_aiter-gemm-tuning.csv"))
    assert len(st_) == 3 and st_[0].calls == 6 and st_[0].min_ns is None


# ---------------------------------------------------------------- malformed input

def test_truncated_row_names_file_and_line():
    text = read(V3 / "docs_rocm7.0_kernel_trace.csv")
    cut = text[: text.index("\n", 500) - 30]  # first data row cut short
    with pytest.raises(ParseError, match=r"k\.csv line 2"):
        parse_rocprofv3_kernel_trace(cut, "k.csv")


def test_bad_number_names_field():
    text = read(V3 / "docs_rocm7.0_counter_collection.csv").replace("16384.000000", "abc", 1)
    with pytest.raises(ParseError, match="line 2 field Counter_Value"):
        parse_rocprofv3_counter_collection(text, "c.csv")


def test_missing_column_and_empty():
    with pytest.raises(ParseError, match="missing column"):
        parse_rocprofv3_counter_collection('"Dispatch_Id","Kernel_Name"\n1,"k"\n', "c.csv")
    with pytest.raises(ParseError, match="empty"):
        parse_rocprofv3_stats("", "s.csv")


def test_truncated_json():
    text = read(UI / "code.json")
    with pytest.raises(ParseError, match="code.json line 1"):
        parse_att_code_json(text[: len(text) // 2])
    with pytest.raises(ParseError, match="wave_filenames"):
        parse_att_filenames('{"version": "3.0.0"}')
    with pytest.raises(ParseError):
        parse_att_wave('{"name": "SE0", "wave": {"cu": 0}}')


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=1, max_value=1400))
def test_any_truncation_parses_or_raises_parse_error(cut):
    text = read(V3 / "docs_rocm7.0_kernel_trace.csv")[:cut]
    try:
        rows = parse_rocprofv3_kernel_trace(text, "k.csv")
    except ParseError as e:
        assert "k.csv" in str(e)
    else:
        assert all(r.duration_ns >= 0 for r in rows)
