"""Instruction mix of AMDGCN assembly and NVIDIA SASS: per class over the kernel and over its hottest loop.

Classification is table-driven: `AMD_CLASSES` / `SASS_CLASSES` map a regex on the mnemonic to a class.
A class with a width adds a second key `<class>.<width>` (e.g. `global_load` and `global_load.dwordx4`),
so keys with a dot break down the count of the key before the dot. LLVM prints scheduling pseudo
instructions as comments (`; sched_group_barrier mask(0x100) size(2) SyncID(0)`, `; sched_barrier mask(0x0)`,
`; iglp_opt(0)`); they are counted as markers (`sched_group_barrier`, `sched_barrier`, `iglp_opt`), not as
instructions. The hottest loop = the largest innermost loop: a backward branch to a label earlier in the kernel.
"""

from __future__ import annotations

import re
from collections import Counter

from evokernel_mcp.compile.models import IsaSummary
from evokernel_mcp.errors import BadInput

# (mnemonic regex, class, regex group holding the width or None). First match wins.
AMD_CLASSES: list[tuple[re.Pattern, str, int | None]] = [(re.compile(p), c, g) for p, c, g in [
    (r"^global_load_lds_(\w+)$", "lds_dma", 1),
    (r"^global_load_(\w+)$", "global_load", 1),
    (r"^global_store_(\w+)$", "global_store", 1),
    (r"^global_atomic_(\w+)$", "global_atomic", None),
    (r"^buffer_load_(\w+)$", "buffer_load", 1),
    (r"^buffer_store_(\w+)$", "buffer_store", 1),
    (r"^buffer_atomic_(\w+)$", "buffer_atomic", None),
    (r"^flat_load_(\w+)$", "flat_load", 1),
    (r"^flat_store_(\w+)$", "flat_store", 1),
    (r"^flat_atomic_(\w+)$", "flat_atomic", None),
    (r"^scratch_load_(\w+)$", "scratch_load", 1),
    (r"^scratch_store_(\w+)$", "scratch_store", 1),
    (r"^ds_(?:read|load)_?(\w+)$", "ds_read", 1),
    (r"^ds_(?:write|store)_?(\w+)$", "ds_write", 1),
    (r"^ds_(?:bpermute|permute|swizzle)\w*$", "ds_permute", None),
    (r"^ds_\w+$", "ds_other", None),
    (r"^v_(?:mfma|smfmac)\w*$", "mfma", None),
    (r"^v_wmma\w*$", "wmma", None),
    (r"^v_(?:pk_)?mad_(?:u|i)\d+\w*$", "valu_other", None),  # integer mad (address math), not an FP FMA
    (r"^v_(?:pk_fma|fmac|fma|mac|mad|pk_mad)\w*$", "valu_fma", None),
    (r"^v_(?:cvt|pack|perm)\w*$", "valu_cvt", None),
    (r"^v_(?:exp|log|rcp|rsq|sqrt|sin|cos)_\w+$", "valu_trans", None),
    (r"^v_\w+$", "valu_other", None),
    (r"^s_waitcnt\w*$", "s_waitcnt", None),
    (r"^s_nop$", "s_nop", None),
    (r"^s_barrier\w*$", "s_barrier", None),
    (r"^s_(?:branch|cbranch_\w+|setpc_b64|swappc_b64|call_b64)$", "branch", None),
    (r"^s_(?:load|buffer_load|store|buffer_store|dcache|memtime|memrealtime|scratch)\w*$", "smem", None),
    (r"^s_setprio$", "s_setprio", None),
    (r"^s_sched_barrier$", "sched_barrier", None),
    (r"^s_\w+$", "salu", None),
]]
AMD_MARKERS = re.compile(r";\s*(sched_group_barrier|sched_barrier|iglp_opt)\b")

# SASS: (opcode regex, class); loads/stores also get a width key from their modifiers (`LDG.E.128` -> LDG.128).
SASS_CLASSES: list[tuple[re.Pattern, str, int | None]] = [(re.compile(p), c, None) for p, c in [
    (r"^LDG(?:\.|$)", "LDG"), (r"^STG(?:\.|$)", "STG"), (r"^LDGSTS", "LDGSTS"),
    (r"^(?:UTMALDG|UTMASTG|UBLKCP|UTMAPF)", "TMA"), (r"^LDSM", "LDSM"), (r"^LDS(?:\.|$)", "LDS"),
    (r"^STS(?:\.|$)", "STS"), (r"^LDL(?:\.|$)", "LDL"), (r"^STL(?:\.|$)", "STL"), (r"^U?LDC(?:\.|$)", "LDC"),
    (r"^(?:ATOMG|ATOM|RED|ATOMS)(?:\.|$)", "atomic"),
    (r"^FFMA", "FFMA"), (r"^FADD", "FADD"), (r"^FMUL", "FMUL"), (r"^HGMMA", "HGMMA"), (r"^HMMA", "HMMA"),
    (r"^(?:IMMA|IGMMA)", "IMMA"), (r"^(?:QGMMA|DMMA|BMMA)", "MMA_other"), (r"^(?:HFMA2|HADD2|HMUL2)", "HFMA2"),
    (r"^(?:F2F|F2FP|I2F|F2I|I2I|PRMT|I2FP|F2IP)(?:\.|$)", "cvt"), (r"^MUFU", "MUFU"),
    (r"^(?:BAR|BSYNC|BSSY|WARPSYNC|SYNCS|DEPBAR|MEMBAR)(?:\.|$)", "BAR"),
    (r"^(?:BRA|BRX|JMP|CALL|RET)(?:\.|$)", "BRA"), (r"^EXIT", "EXIT"),
    (r"^U?(?:IMAD|IADD3|VIADD|LOP3|SHF|LEA|ISETP|IMNMX|VIMNMX|SEL|IABS|POPC|FLO|BREV|SGXT|MOV|PLOP3|P2R|R2P|"
     r"S2R|S2UR|CS2R|R2UR|SHFL|VOTE)(?:\.|$)", "int"),
    (r"^(?:FSETP|FSET|FSEL|FMNMX|FCHK)(?:\.|$)", "FP32_other"),  # FP compare/select/min-max: not integer work
    (r"^NOP", "NOP"),
]]
_SASS_WIDTH = re.compile(r"\.(128|64|U8|S8|U16|S16)(?=\.|$)")
_SASS_WIDTH_CLASSES = {"LDG", "STG", "LDS", "STS", "LDL", "STL"}
_SASS_LINE = re.compile(r"/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?:(?P<pred>@!?U?P\w+)\s+)?(?P<op>[A-Z][A-Z0-9_.]*)"
                        r"(?P<rest>[^;]*);")
_SASS_BRA = re.compile(r"^(?:BRA|JMP)\S*$")
_SASS_TARGET = re.compile(r"(?:0x(?P<addr>[0-9a-f]+)|`?\(?(?P<label>\.L_\w+)\)?`?)\s*$")
_AMD_LABEL = re.compile(r"^(?P<label>[.$\w]+):")
_AMD_BRANCH = re.compile(r"^s_(?:branch|cbranch_\w+)$")


def kernel_names(asm: str) -> list[str]:
    """Kernels in AMDGCN assembly (`.amdhsa_kernel NAME`) or SASS (`Function : NAME`)."""
    names = re.findall(r"^\s*\.amdhsa_kernel\s+(\S+)", asm, re.M)
    return names or re.findall(r"^\s*Function : (\S+)", asm, re.M)


def kernel_matches(symbol: str, kernel: str) -> bool:
    """True if `symbol` is `kernel` or a C++ mangling of a function named `kernel` (e.g. _Z6kernelPf)."""
    if symbol == kernel:
        return True
    if not symbol.startswith("_Z"):
        return False
    return re.search(rf"(?<![0-9]){len(kernel)}{re.escape(kernel)}(?:I|E|P|[a-z]|$)", symbol) is not None


def _pick(names: list[str], kernel: str | None, text_kind: str) -> str | None:
    if kernel is None:
        return names[0] if len(names) == 1 else None
    hits = [n for n in names if kernel_matches(n, kernel)]
    if not hits:
        raise BadInput(f"kernel {kernel!r} is not in this {text_kind}; it has: {', '.join(names) or 'no kernels'}")
    return hits[0]


def extract_kernel_asm(asm: str, kernel: str | None) -> str:
    """The body of one kernel: AMDGCN from `NAME:` to `.Lfunc_end`, SASS from `Function : NAME` to the next.
    kernel=None: the only kernel, or the whole text when there are several."""
    names = kernel_names(asm)
    if re.search(r"^\s*Function : ", asm, re.M):
        name = _pick(names, kernel, "SASS")
        if name is None:
            return asm
        m = re.search(rf"^\s*Function : {re.escape(name)}\s*$(?P<body>.*?)(?=^\s*Function : |\Z)", asm, re.M | re.S)
        return m.group("body") if m else asm
    name = _pick(names, kernel, "assembly")
    if name is None:
        return asm
    m = re.search(rf"^{re.escape(name)}:.*?$(?P<body>.*?)^(?:\.Lfunc_end\d+:|\s*; -- End function)", asm,
                  re.M | re.S)
    if m is None:
        raise BadInput(f"kernel {name!r} has no function body in this assembly (truncated?)")
    return m.group("body")


def _classify(op: str, table) -> tuple[str, str | None]:
    for rx, cls, grp in table:
        if m := rx.match(op):
            width = m.group(grp) if grp else None
            return cls, width
    return "other", None


def _add(counts: Counter, cls: str, width: str | None) -> None:
    counts[cls] += 1
    if width:
        counts[f"{cls}.{width}"] += 1


def _parse_amd(body: str) -> tuple[list[tuple[str, str | None, str]], dict[str, int], list[tuple[int, str]]]:
    """Instructions (class, width, operands), label -> index, branches (index, target)."""
    insts: list[tuple[str, str | None, str]] = []
    labels: dict[str, int] = {}
    for raw in body.splitlines():
        if mk := AMD_MARKERS.search(raw):
            insts.append(("#" + mk.group(1), None, ""))
            continue
        line = raw.split(";")[0].split("//")[0].strip()
        if not line:
            continue
        if m := _AMD_LABEL.match(line):
            labels[m.group("label")] = len(insts)
            continue
        if line.startswith("."):
            continue
        op, _, rest = line.partition(" ")
        cls, width = _classify(op, AMD_CLASSES)
        if cls == "buffer_load" and re.search(r"\blds\b", rest):
            cls = "lds_dma"
        insts.append((cls, width, rest.strip()))
    return insts, labels, []


def _count(insts, lo: int, hi: int) -> Counter:
    c: Counter = Counter()
    for cls, width, _ in insts[lo:hi]:
        if cls.startswith("#"):
            c[cls[1:]] += 1
        else:
            _add(c, cls, width)
    return c


def _loops(branches: list[tuple[int, int]]) -> tuple[int, int] | None:
    """branches: (branch index, target index); loops are backward ones. The largest innermost loop."""
    loops = [(t, b + 1) for b, t in branches if t < b]  # t == b: a trap self-loop
    inner = [lp for lp in loops if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in loops)]
    return max(inner, key=lambda lp: lp[1] - lp[0]) if inner else None


def _block_notes(insts, loop: tuple[int, int], starts: dict[int, str]) -> list[str]:
    """One line per basic block of the loop: 'loop block .LBB0_2 (9 instr): ds_read 2, valu_fma 1, ...'."""
    cuts = sorted({loop[0], *(i for i in starts if loop[0] < i < loop[1])})
    notes = []
    for lo, hi in zip(cuts, cuts[1:] + [loop[1]]):
        c = _count(insts, lo, hi)
        n = sum(1 for cls, _, _ in insts[lo:hi] if not cls.startswith("#"))
        mix = ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]) if "." not in k)
        notes.append(f"loop block {starts.get(lo, f'#{lo}')} ({n} instr): {mix}")
    return notes


def _summary(insts, loop: tuple[int, int] | None, label: str | None, notable: list[str]) -> IsaSummary:
    total = _count(insts, 0, len(insts))
    n = sum(1 for cls, _, _ in insts if not cls.startswith("#"))
    hot = _count(insts, *loop) if loop else None
    return IsaSummary(total=n, classes=dict(sorted(total.items())), hottest_loop=dict(sorted(hot.items())) if hot
                      else None, hottest_loop_label=label if loop else None, notable=notable)


def summarize_amdgcn(asm: str, kernel: str | None = None) -> IsaSummary:
    """Instruction classes of one AMDGCN kernel (whole body and hottest loop)."""
    insts, labels, _ = _parse_amd(extract_kernel_asm(asm, kernel))
    branches, where = [], {}
    for i, (cls, _, rest) in enumerate(insts):
        target = rest.split(",")[0].strip() if cls == "branch" else ""
        if target in labels:
            branches.append((i, labels[target]))
            where[labels[target]] = target
    loop = _loops(branches)
    notable = []
    counts = _count(insts, 0, len(insts))
    if not counts.get("mfma"):
        notable.append("no MFMA")
    if counts.get("scratch_store") or counts.get("scratch_load"):
        notable.append("scratch (private memory) accesses: spills or a private array")
    if loop:
        notable += _block_notes(insts, loop, {i: lab for lab, i in labels.items()})
    return _summary(insts, loop, where.get(loop[0]) if loop else None, notable)


def summarize_sass(sass: str, kernel: str | None = None) -> IsaSummary:
    """Instruction classes of one SASS function (cuobjdump -sass / nvdisasm text)."""
    insts: list[tuple[str, str | None, str]] = []
    addrs: dict[int, int] = {}
    labels: dict[str, int] = {}
    jumps: list[tuple[int, str]] = []
    for raw in extract_kernel_asm(sass, kernel).splitlines():
        if lm := re.match(r"^\s*(\.L_\w+):", raw):
            labels[lm.group(1)] = len(insts)
        m = _SASS_LINE.search(raw)
        if not m:
            continue
        op = m.group("op")
        cls, _ = _classify(op, SASS_CLASSES)
        width = None
        if cls in _SASS_WIDTH_CLASSES:
            width = (w.group(1) if (w := _SASS_WIDTH.search(op)) else "32")
        addrs[int(m.group("addr"), 16)] = len(insts)
        if _SASS_BRA.match(op) and (t := _SASS_TARGET.search(m.group("rest").strip())):
            jumps.append((len(insts), t.group("addr") or t.group("label")))
        insts.append((cls, width, m.group("rest")))
    branches = []
    for i, tgt in jumps:
        idx = labels.get(tgt) if tgt.startswith(".L") else addrs.get(int(tgt, 16))
        if idx is not None:
            branches.append((i, idx))
    loop = _loops(branches)
    counts = _count(insts, 0, len(insts))
    notable = ["local memory (LDL/STL): spills or a local array"] if counts.get("LDL") or counts.get("STL") else []
    label = None
    if loop:
        at = {i: f"/*{a:04x}*/" for a, i in addrs.items()}
        cut = {t for _, t in branches} | {b + 1 for b, _ in jumps} | {loop[0]}
        starts = {i: at[i] for i in cut if i in at}
        label = starts.get(loop[0])
        notable += _block_notes(insts, loop, starts)
    return _summary(insts, loop, label, notable)
