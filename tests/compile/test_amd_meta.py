"""The AMDGPU metadata parser on the recorded fixtures (tests/fixtures/rocm/code_object)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel_mcp.compile.amd_meta import parse_amdgpu_metadata
from evokernel_mcp.errors import ParseError

ROCM_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocm"

CO = ROCM_FIXTURES / "code_object"


def _by_name(items):
    return {k.name: k for k in items}


def test_readelf_notes_gfx942_gnu_style():
    ks = _by_name(parse_amdgpu_metadata((CO / "readelf_notes_gfx942_upstream-llvm19.txt").read_text()))
    assert set(ks) == {"vadd_lds", "mfma_32x32x8f16", "private_array"}
    v = ks["vadd_lds"]
    assert (v.vgpr_count, v.agpr_count, v.sgpr_count, v.group_segment_fixed_size) == (6, 0, 16, 1024)
    assert v.reqd_workgroup_size == [256, 1, 1] and v.max_flat_workgroup_size == 256 and v.wavefront_size == 64
    assert v.symbol == "vadd_lds.kd" and v.target == "amdgcn-amd-amdhsa--gfx942" and v.uses_dynamic_stack is False
    m = ks["mfma_32x32x8f16"]  # unified file: align(26 arch VGPRs, 4) + 16 AGPRs = 44 (remarks fixture says 26/16)
    assert (m.vgpr_count, m.agpr_count, m.sgpr_count) == (44, 16, 16)
    p = ks["private_array"]
    assert (p.private_segment_fixed_size, p.vgpr_count, p.sgpr_count, p.vgpr_spill_count) == (2052, 20, 27, 0)


def test_readobj_notes_gfx90a_llvm_style():
    (k,) = parse_amdgpu_metadata((CO / "readobj_notes_gfx90a_rocm6.3.3_mgpusim-doc.txt").read_text())
    assert k.name == "_Z9vectorAddiPiS_S_" and k.target == "amdgcn-amd-amdhsa--gfx90a"
    assert (k.vgpr_count, k.agpr_count, k.sgpr_count, k.group_segment_fixed_size) == (8, 0, 38, 0)
    assert k.max_flat_workgroup_size == 1024 and k.uses_dynamic_stack is None  # absent in that version


def test_truncated_and_malformed_metadata_raise_parse_error():
    text = (CO / "readelf_notes_gfx942_upstream-llvm19.txt").read_text()
    with pytest.raises(ParseError, match="truncated"):
        parse_amdgpu_metadata(text[: len(text) // 2])
    with pytest.raises(ParseError, match="YAML line"):
        parse_amdgpu_metadata(text.replace(".vgpr_count:     6", ".vgpr_count: [6"))
    with pytest.raises(ParseError, match="truncated"):
        parse_amdgpu_metadata("\t.amdgpu_metadata\n---\namdhsa.kernels:\n")
    with pytest.raises(ParseError, match="neither"):
        parse_amdgpu_metadata("no metadata here")
    with pytest.raises(ParseError, match="amdhsa.kernels"):
        parse_amdgpu_metadata("AMDGPU Metadata: ---\namdhsa.target: x\n...\n")
