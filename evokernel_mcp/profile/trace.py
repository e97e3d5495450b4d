"""Instruction classing (AMDGCN and SASS) and aggregation of per-instruction rows into an agent-sized
summary: class breakdown, hot instructions with neighbours, stall reasons, hot source lines."""

from __future__ import annotations

import re
from collections import defaultdict

from evokernel_mcp.profile.models import Finding, HotInstruction, TraceInstruction

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
                                  address=hex(r.address) if r.address is not None else None,
                                  cycles=r.cycles, stall_cycles=r.stall_cycles, hits=r.hits, source_line=r.source,
                                  source_text=r.source_text[:80] if r.source_text else None,
                                  fraction=round(r.cycles / total, 4) if total else 0.0, neighbours=near))
    return breakdown, hot, stall, src, total


# ---------------------------------------------------------------- findings (rules on stall reasons, with evidence)

# ncu PC-sampling reasons (column suffixes of the source page) -> what they mean for the kernel's author.
_NV_REASON = {
    "long_sb": "waiting on global/local memory results (long scoreboard): loads are not hidden; prefetch earlier, "
               "more stages (software pipelining) or more warps in flight",
    "barrier": "waiting at a block barrier: unbalanced work between warps, or a barrier per loop iteration",
    "mio": "the shared-memory/special-function (MIO) queue is full: shared-memory traffic or bank conflicts",
    "short_sb": "waiting on shared-memory or special-function results (short scoreboard): shared-memory latency "
                "or bank conflicts",
    "lg": "the global-memory (LSU) queue is full: too many memory instructions; vectorize loads",
    "math": "a math pipe is saturated (math pipe throttle): the kernel is compute-bound on that pipe",
    "wait": "fixed-latency dependencies between instructions: more independent work (ILP) per warp",
    "no_inst": "no instruction fetched (instruction-cache misses or branches)",
    "membar": "waiting on a memory fence",
    "branch_resolving": "waiting for branch targets",
    "tex": "the texture/L1 pipe is full",
    "drain": "draining memory stores at exit",
    "dispatch": "dispatch stalls",
    "imc": "constant-cache misses",
    "sleep": "sleeping warps",
    "not_selected": "eligible but another warp was selected: the schedulers are busy issuing (issue-bound; "
                    "fewer instructions per result helps, more warps do not)",
    "selected": "issuing",
}
MIN_SHARE = 0.10  # a stall reason with at least this share of all samples gets its finding
MIN_TENSOR_WAIT = 0.05


def _hottest(ins: list[TraceInstruction], key) -> TraceInstruction | None:
    best = max(ins, key=key, default=None)
    return best if best is not None and key(best) > 0 else None


def _where(r: TraceInstruction) -> dict[str, float | str]:
    ev: dict[str, float | str] = {"instruction": f"{r.index}: {r.instruction}"[:120]}
    if r.source:
        ev["source_line"] = r.source
    if r.source_text:
        ev["source_text"] = r.source_text[:100]
    return ev


def _at(r: TraceInstruction) -> str:
    return f"instruction {r.index} ({opcode(r.instruction)})" + (f" at {r.source}" if r.source else "")


def trace_findings(rows: list[TraceInstruction], vendor: str) -> list[Finding]:
    """Findings from the per-instruction samples: waits on tensor-core (wgmma) completion, the dominant stall
    reasons each with the instruction (and source line) where they pile up, shared-memory bank conflicts.
    Each cites its numbers: shares of all samples (NVIDIA) or cycles (AMD)."""
    ins = [r for r in rows if not r.is_label]
    total = sum(r.cycles for r in ins)
    if not total:
        return []
    out: list[Finding] = []
    if vendor != "amd":
        waits = [r for r in ins if opcode(r.instruction).upper().startswith(("WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE"))]
        share = sum(r.cycles for r in waits) / total
        top = _hottest(waits, lambda r: r.cycles)
        if top and share >= MIN_TENSOR_WAIT:
            reason = max(top.stall_reasons, key=top.stall_reasons.get) if top.stall_reasons else None
            ev = {"share_of_samples": round(share, 3), **_where(top)} | ({"top_reason": reason} if reason else {})
            out.append(Finding(kind="stall", evidence=ev, text=(
                f"{100 * share:.0f}% of warp samples wait on tensor-core (wgmma) completion, most at {_at(top)}: "
                "the MMAs are not overlapped with the next tile's loads/MMAs; more stages or wgmma pipelining "
                "(wait for the previous MMA, not the current one) or a larger tile per warpgroup.")))
    reasons: dict[str, float] = {}
    for r in ins:
        for k, v in r.stall_reasons.items():
            reasons[k] = reasons.get(k, 0.0) + v
        if vendor == "amd" and r.stall_cycles:
            k = f"stall in {classify_amd(r.instruction)}"
            reasons[k] = reasons.get(k, 0.0) + r.stall_cycles
    rs = sum(reasons.values())
    ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
    for i, (reason, v) in enumerate(ranked[:4]):
        share = v / rs if rs else 0.0
        if share < MIN_SHARE and i > 0:
            break
        if vendor == "amd":
            top = _hottest([r for r in ins if f"stall in {classify_amd(r.instruction)}" == reason],
                           lambda r: r.stall_cycles or 0)
            what = {"stall in waitcnt": "waves wait in s_waitcnt (vmcnt: global loads, lgkmcnt: LDS or scalar "
                                        "loads): their latency is not hidden",
                    "stall in barrier": "waves wait at s_barrier",
                    "stall in MFMA": "waves wait on MFMA results or the matrix pipe"}.get(reason, reason)
        else:
            top = _hottest(ins, lambda r, k=reason: r.stall_reasons.get(k, 0.0))
            what = _NV_REASON.get(reason, reason)
        ev = {"reason": reason, "share_of_stalls": round(share, 3)} | (_where(top) if top else {})
        unit = "stall cycles" if vendor == "amd" else "stall samples"
        out.append(Finding(kind="stall", evidence=ev, text=(
            f"{100 * share:.0f}% of {unit}: {what}" + (f"; warps wait most at {_at(top)}." if top else "."))))
    conf = [r for r in ins if (r.shared_conflict_ways or 0) > 1 and r.cycles > 0]
    top = _hottest(conf, lambda r: r.cycles)
    if top:
        out.append(Finding(kind="lds", evidence={"conflict_ways": top.shared_conflict_ways, **_where(top)}, text=(
            f"shared-memory bank conflicts: {top.shared_conflict_ways:g}-way at {_at(top)}; pad or swizzle the "
            "shared-memory layout.")))
    return out
