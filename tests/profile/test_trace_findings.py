"""thread_trace findings on the genuine H200 ncu source-page recordings (tests/fixtures/cuda) and on
instruction rows of our own model (the wgmma and bank-conflict rules, which those recordings do not exercise)."""

from __future__ import annotations

from pathlib import Path

from evokernel_mcp.profile import collect
from evokernel_mcp.profile.models import TraceInstruction
from evokernel_mcp.profile.ncu_parsers import has_line_info, parse_ncu_source_csv
from evokernel_mcp.profile.trace import trace_findings

CU = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"


def test_axpy_long_scoreboard_finding_names_the_instruction():
    rows = parse_ncu_source_csv((CU / "ncu_source_sass_axpy_h200.csv").read_text())
    found = trace_findings(rows, "nvidia")
    first = found[0]
    assert first.kind == "stall" and first.evidence["reason"] == "long_sb"
    assert first.evidence["share_of_stalls"] == 0.745  # 74.5% of the recorded stall samples
    assert first.evidence["instruction"].startswith("29: FFMA") and "long scoreboard" in first.text
    assert "instruction 29 (FFMA)" in first.text


def test_trace_result_carries_findings_and_says_when_there_are_no_source_lines():
    rows = parse_ncu_source_csv((CU / "ncu_source_sass_fma_loop_h200.csv").read_text())
    assert not has_line_info(rows)  # the SASS view: no file:line
    res = collect.trace_result(rows, "nvidia", "fma_loop_kernel", "ncu", "ncu", "2025.3.1", ["ncu"], 20, {}, [])
    assert res.findings and all(f.evidence for f in res.findings)
    assert res.findings[0].evidence["reason"] == "not_selected"


def _ins(i, text, cycles, reasons=None, source=None, ways=None):
    return TraceInstruction(index=i, instruction=text, cycles=cycles, stall_reasons=reasons or {}, source=source,
                            shared_conflict_ways=ways)


def test_wgmma_waits_and_bank_conflicts_with_source_lines():
    rows = [_ins(0, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", 10, {"math": 10}, "k.py:40"),
            _ins(1, "WARPGROUP.DEPBAR.LE gsb0, 0x0", 60, {"wait": 60}, "k.py:40", None),
            _ins(2, "LDS.128 R4, [R2]", 20, {"short_sb": 20}, "k.py:38", 4),
            _ins(3, "FFMA R1, R2, R3, R1", 10, {"selected": 10}, "k.py:44")]
    found = trace_findings(rows, "nvidia")
    wg = found[0]
    assert "wgmma" in wg.text and wg.evidence["share_of_samples"] == 0.6
    assert wg.evidence["source_line"] == "k.py:40" and wg.evidence["top_reason"] == "wait"
    assert "at k.py:40" in wg.text
    bank = [f for f in found if f.kind == "lds"]
    assert bank and bank[0].evidence["conflict_ways"] == 4 and bank[0].evidence["source_line"] == "k.py:38"


def test_no_samples_no_findings():
    assert trace_findings([_ins(0, "EXIT", 0)], "nvidia") == []


def test_amd_att_findings_name_the_triton_source_line():
    ui = (Path(__file__).resolve().parents[1] / "fixtures" / "rocm" / "rocprofv3" / "att_gfx950_rocm6.4_skinny_M128"
          / "ui_output_agent_1026_dispatch_20")
    rows, kernel, _ = collect.read_att_dir(ui)
    found = trace_findings(rows, "amd")
    assert kernel == "_gemm_afp4_wfp4_kernel"
    bar = found[0]
    assert bar.evidence["reason"] == "stall in barrier" and bar.evidence["share_of_stalls"] == 0.53
    assert bar.evidence["instruction"] == "544: s_barrier"
    assert bar.evidence["source_line"].endswith("gemm_afp4wfp4.py:140") and "stall cycles" in bar.text


def test_trace_note_gives_the_read_artifact_call_for_the_full_table():
    from evokernel_mcp import artifacts

    rows = parse_ncu_source_csv((CU / "ncu_source_sass_axpy_h200.csv").read_text())
    res = collect.trace_result(rows, "nvidia", "axpy_kernel", "ncu", "ncu", "2025.3.1", ["ncu"], 5, {"x.csv": "x"}, [])
    (note,) = [n for n in res.notes if "read_artifact(" in n]
    assert f"read_artifact('{res.artifact_id}', name='instructions.csv')" in note
    page = artifacts.read_artifact(res.artifact_id)
    assert page.name == "instructions.csv" and page.total == len(rows) + 1
