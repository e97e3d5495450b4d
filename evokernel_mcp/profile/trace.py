"""Instruction classing (AMDGCN and SASS) and aggregation of per-instruction rows into an agent-sized
summary: class breakdown, hot instructions with neighbours, stall reasons, hot source lines."""

from __future__ import annotations

import re
from collections import defaultdict

from evokernel_mcp.profile.models import HotInstruction, TraceInstruction

# Order matters: first match wins.
_AMD_RULES: list[tuple[str, re.Pattern]] = [(k, re.compile(p)) for k, p in [
    ("MFMA", r"^v_(mfma|smfmac)"),
    ("waitcnt", r"^s_waitcnt"),
    ("NOP", r"^(s_nop|v_nop)"),
    ("barrier", r"^s_barrier"),
    ("branch", r"^(s_branch|s_cbranch|s_setpc|s_swappc|s_getpc|s_endpgm)"),
    ("SMEM", r"^s_(load|buffer_load|store|dcache|memtime|memrealtime)"),
    ("LDS", r"^ds_"),
    ("VMEM load", r"^(buffer_load|global_load|flat_load|scratch_load|buffer_atomic|global_atomic|image_load)"),
    ("VMEM store", r"^(buffer_store|global_store|flat_store|scratch_store|image_store)"),
    ("VALU conversion/packing", r"^v_(cvt|pack|perm|bfe|bfi|alignbit|alignbyte|lshl_or|and_or|or3|lshrrev|"
                                r"lshlrev|ashrrev|and_b32|or_b32|xor_b32|mov_b32_sdwa|.*_sdwa)"),
    ("VALU other", r"^v_(pk_)?mad_[ui]\d"),  # integer mad (v_mad_u64_u32: address math), not an FP FMA
    ("VALU FMA", r"^v_(fma|fmac|mac|mad|pk_fma|dot|pk_mul|pk_add|mul_f|add_f|sub_f|pk_mad)"),
    ("VALU other", r"^v_"),
    ("SALU", r"^s_"),
]]

_SASS_RULES: list[tuple[str, re.Pattern]] = [(k, re.compile(p)) for k, p in [
    ("tensor (MMA)", r"^(HMMA|IMMA|DMMA|HGMMA|IGMMA|QGMMA|BGMMA|UTCHMMA|WARPGROUP)"),
    ("FP32 FMA/arith", r"^(FFMA|FADD|FMUL|FMNMX|FSET|FSETP|FCHK|FSEL)"),
    ("FP16/BF16 arith", r"^(HFMA2|HADD2|HMUL2|HMNMX2|HSET2|HSETP2)"),
    ("FP64", r"^(DFMA|DADD|DMUL|DSETP)"),
    ("conversion/packing", r"^(F2F|F2I|I2F|I2FP|F2FP|PRMT|SHF|BFE|BFI|I2I|FRND)"),
    ("MUFU (special fn)", r"^MUFU"),
    ("shared memory", r"^(LDS|STS|LDSM|STSM|ATOMS|LDGSTS)"),
    ("constant load", r"^(LDC|ULDC)"),
    ("global load", r"^(LDG|LD|TLD|TEX|UTMALDG|UBLKCP)"),
    ("global store", r"^(STG|ST|RED|ATOM|ATOMG|UTMASTG)"),
    ("sync/barrier", r"^(BAR|DEPBAR|WARPSYNC|MEMBAR|SYNCS|ARRIVES|ERRBAR|CCTL|FENCE)"),
    ("NOP", r"^NOP"),
    ("branch/control", r"^(BRA|BRX|JMP|CALL|RET|EXIT|BSSY|BSYNC|BREAK|BPT|YIELD|WARPGROUP)"),
    ("integer/logic", r"^(IMAD|IADD|IADD3|ISETP|LOP|LOP3|LEA|SEL|MOV|IMNMX|ISCADD|POPC|FLO|SHL|SHR|IABS|VOTE|"
                      r"S2R|S2UR|CS2R|R2UR|UMOV|UIADD3|ULOP3|USHF|UISETP|ULEA|UIMAD|USEL|PLOP3|P2R|R2P|SHFL)"),
]]


def opcode(instruction: str) -> str:
    s = instruction.strip()
    if s.startswith("@"):  # predicated SASS: "@P0 BRA ..."
        s = s.split(None, 1)[1] if " " in s else ""
    return s.split(None, 1)[0] if s else ""


def classify_amd(instruction: str) -> str:
    op = opcode(instruction).lower()
    for name, rx in _AMD_RULES:
        if rx.match(op):
            return name
    return "other"


def classify_sass(instruction: str) -> str:
    op = opcode(instruction).upper()
    for name, rx in _SASS_RULES:
        if rx.match(op):
            return name
    return "other"


def summarize(rows: list[TraceInstruction], vendor: str, top_n: int = 20, neighbours: int = 2
              ) -> tuple[dict[str, float], list[HotInstruction], dict[str, float], dict[str, float], float]:
    """-> (class_breakdown fractions, hot instructions, stall_reasons fractions, source_lines, total cycles).

    AMD: cycles = ATT latency; stall reasons = cycles per class that were stall cycles (when the decoder
    reports Stall) — the ATT decoder gives no per-reason split. NVIDIA: cycles = warp-stall samples;
    stall reasons = ncu's per-reason sample columns."""
    classify = classify_amd if vendor == "amd" else classify_sass
    ins = [r for r in rows if not r.is_label]
    total = sum(r.cycles for r in ins)
    by_class: dict[str, float] = defaultdict(float)
    by_source: dict[str, float] = defaultdict(float)
    reasons: dict[str, float] = defaultdict(float)
    for r in ins:
        cls = classify(r.instruction)
        by_class[cls] += r.cycles
        if r.source:
            by_source[r.source] += r.cycles
        for k, v in r.stall_reasons.items():
            reasons[k] += v
        if vendor == "amd" and r.stall_cycles:
            reasons[f"stall in {cls}"] += r.stall_cycles
    breakdown = {k: round(v / total, 4) for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])} if total else {}
    rs = sum(reasons.values())
    stall = {k: round(v / rs, 4) for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:12]} if rs else {}
    src = {k: round(v / total, 4) for k, v in sorted(by_source.items(), key=lambda kv: -kv[1])[:10]} if total else {}
    order = sorted(range(len(ins)), key=lambda i: -ins[i].cycles)[:top_n]
    hot = []
    for i in order:
        r = ins[i]
        if r.cycles <= 0:
            break
        near = [f"{ins[j].index}: {ins[j].instruction}" for j in range(max(0, i - neighbours),
                                                                       min(len(ins), i + neighbours + 1)) if j != i]
        hot.append(HotInstruction(index=r.index, instruction=r.instruction, klass=classify(r.instruction),
                                  cycles=r.cycles, stall_cycles=r.stall_cycles, hits=r.hits, source_line=r.source,
                                  fraction=round(r.cycles / total, 4) if total else 0.0, neighbours=near))
    return breakdown, hot, stall, src, total
