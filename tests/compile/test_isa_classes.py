"""compile/isa.py: integer v_mad_* and SASS FP compare/select are not misfiled."""

from evokernel_mcp.compile.isa import summarize_amdgcn, summarize_sass

AMD = """\t.text
\t.amdhsa_code_object_version 5
\t.globl\tk
k:
\tv_mad_u64_u32 v[2:3], s[0:1], s2, v[0:1]
\tv_mad_u32_u24 v4, v5, v6, v7
\tv_fmac_f32_e32 v1, v2, v3
\tv_mad_f32 v1, v2, v3, v4
\ts_endpgm
.Lfunc_end0:
\t.amdhsa_kernel k
\t.end_amdhsa_kernel
"""

SASS = """\tcode for sm_90
\t\tFunction : k
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   FSETP.GEU.AND P0, PT, R8, -126, PT ;
        /*0010*/                   FMNMX R2, R3, R4, !PT ;
        /*0020*/                   FSEL R5, R6, R7, P0 ;
        /*0030*/                   IMAD R1, R2, R3, R4 ;
        /*0040*/                   EXIT ;
"""


def test_integer_mad_is_not_counted_as_fma():
    s = summarize_amdgcn(AMD, kernel="k")
    assert s.classes["valu_fma"] == 2  # v_fmac_f32 + v_mad_f32
    assert s.classes["valu_other"] == 2  # v_mad_u64_u32 + v_mad_u32_u24 (address arithmetic)


def test_sass_fp_compare_select_is_not_integer():
    s = summarize_sass(SASS, kernel="k")
    assert s.classes["FP32_other"] == 3
    assert s.classes["int"] == 1
