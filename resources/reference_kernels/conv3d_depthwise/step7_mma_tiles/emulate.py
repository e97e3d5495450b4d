"""Step 7's kernel emulated lane by lane in float64 on the CPU: its #defines, shared-memory layout (ring
slots, padded planes, zero halo, output tile), copy and flush maps, fragment maps (NVIDIA mma.sync
m16n8k16 and AMD MFMA 16x16x16), pair loop and accumulator slots. Shared memory starts as NaN, so a read
of a never-written element poisons the output; `y` starts as NaN, so an unwritten output shows.

  emulate(x, w, source_text, target) -> y (float64, [C, D - 2, H, W])
  bank_conflicts(source_text, W) -> worst ways of the NVIDIA B reads, output-tile writes and flush reads
Used by test_conv3d_steps.py and bench/conv3d_step7_search.py (a variant is checked here before any GPU
time is spent on it).
"""
from __future__ import annotations

import re

import numpy as np


def config(src: str, target: str = "nvidia") -> dict:
    """The kernel's compile-time constants, derived as kernel.cu derives them."""
    v = {k: int(re.search(rf"#define {k} (\d+)", src).group(1)) for k in ("WARPS", "NPB", "NPN", "NT", "STAGES", "MINB")}
    m = re.search(r"#define PPS (\d+)", src)
    v["NPPS"] = int(m.group(1)) if m and target == "nvidia" else 1
    lanes, nb, nstage = (32, 8, v["STAGES"]) if target == "nvidia" else (64, 16, 2)
    if target != "nvidia":
        v["NT"] = (v["NT"] + 1) // 2  # tiles twice as wide (N = 16)
    spn = nb // v["NPN"]
    tilew = 4 * spn
    wmax = v["WARPS"] * v["NT"] * tilew * v["NPN"] // v["NPB"]
    m = re.search(r"#define TMA (\d+)", src)
    v["TMA"] = int(m.group(1)) if m and target == "nvidia" else 0  # 1: loads and stores, 2: stores only
    if v["TMA"] == 1:  # the load's box, dense, ring slots on 128 bytes
        rowe = wmax + 24
        planee = 2 * rowe
        slote = -(-2 * (v["NPB"] + 2) * planee // 128) * 64
    else:
        rowe = wmax + 16
        planee = 2 * (rowe + ((32 // v["NPN"] - rowe) % 32 + 32) % 32)  # C's % of a negative: same result here
        slote = (v["NPB"] + 2) * planee
    threads, wch = v["WARPS"] * lanes, wmax // 8
    # the flush: thread t < FTHR takes chunk t % WCH of output rows (plane, row) t // WCH + FRS k, k < NFL
    frs = threads // wch // 4 * 4
    nfl = -(-4 * v["NPB"] // max(frs, 1))
    # the swizzled output tile (NVIDIA, cp.async stores): column c of row r at c ^ 4r, rows dense
    m = re.search(r"#define OSWZ (\d+)", src)
    oq = tilew * v["WARPS"] // (v["NPB"] // v["NPN"])
    v["OSW"] = int(bool(m and int(m.group(1)) and target == "nvidia" and not v["TMA"] and wch % 2 == 0 and oq % 16 == 0))
    orowe = wmax if v["OSW"] else wmax + 8
    if v["TMA"]:  # the store's box, dense, on 128 bytes
        otile_at, oplanee = -(-2 * nstage * slote // 128) * 64, 4 * orowe
    else:
        otile_at, oplanee = nstage * slote, 4 * orowe + (16 if v["NPN"] == 4 else 8)
    # NVIDIA's flush reads every step unpredicated: planes past the last tile, read and never stored
    opad = max(0, frs // 4 * nfl - v["NPB"]) if target == "nvidia" and not v["TMA"] else 0
    smem = 2 * (otile_at + (v["NPPS"] * v["NPB"] + opad) * oplanee) + (8 * nstage if v["TMA"] == 1 else 0)
    v.update(LANES=lanes, NB=nb, NSTAGE=nstage, SPN=spn, TILEW=tilew, WMAX=wmax, ROWE=rowe, PLANEE=planee, OTILE_AT=otile_at,
             SLOTE=slote, OROWE=orowe, OPLANEE=oplanee, THREADS=threads, WCH=wch, OPAD=opad, SMEM_BYTES=smem)
    v["NCHUNK"] = (v["NPB"] + 2) * 2 * v["WCH"]
    v["CPT"] = -(-v["NCHUNK"] // v["THREADS"])
    v["NOUT"] = v["NPB"] * 4 * v["WCH"]
    v["FRS"], v["FTHR"], v["NFL"], v["OQ"] = frs, frs * wch, nfl, oq
    return v


def ocol(col: int, r: int, cf: dict) -> int:
    """Where column col of output-tile row r sits: col ^ 4r with the swizzle (OSW), else col."""
    return col ^ (4 * r) if cf["OSW"] else col


def _c_mod(a: int, b: int) -> int:  # C's % (truncating)
    return a - b * int(a / b)


def _tile(b, cf):  # the output tile of block b (the kernel's b % NPPS)
    return b % cf["NPPS"]


def m_row(m):
    return (m >> 1) & 3


def m_col(m):
    return 2 * (m & 1) + (m >> 3)


def a_elem(wq, kd, j, m, k):
    kh, kw = 2 * j + (k >> 3) - m_row(m), (k & 7) - m_col(m)
    return wq[kd, kh, kw] if 0 <= kh < 5 and 0 <= kw < 5 else 0.0


def tab_entry(wq, i):
    """The kernel's pair table: (wt[kd, kh, kw], wt[kd, kh, kw + 1]) for kh, kw in -3..7, zero outside the filter."""
    kd, kh, kw = i // 121, (i // 11) % 11 - 3, i % 11 - 3

    def tap(kw):
        return wq[kd, kh, kw] if 0 <= kh < 5 and 0 <= kw < 5 else 0.0
    return tap(kw), tap(kw + 1)


def tab_index(kd, j, m, k):
    return kd * 121 + (2 * j + (k >> 3) - m_row(m) + 3) * 11 + ((k & 7) - m_col(m) + 3)


# lane maps: (lane, register element) -> matrix cell
def a_cells(target, lane):
    if target == "nvidia":
        g, t = lane >> 2, lane & 3
        return [(g + 8 * (q & 1), 2 * t + 8 * (q >> 1) + h) for q in range(4) for h in range(2)]
    return [(lane & 15, 4 * (lane >> 4) + i) for i in range(4)]


def b_reads(target, lane, rowe):
    """(k, element offset from the lane's B pointer) of the lane's B fragment, n = b_col(lane)."""
    if target == "nvidia":
        t = lane & 3
        return [(2 * t, 0), (2 * t + 1, 1), (2 * t + 8, rowe), (2 * t + 9, rowe + 1)]
    kq = lane >> 4
    return [(4 * kq + i, i) for i in range(4)]


def b_col(target, lane):
    return lane >> 2 if target == "nvidia" else lane & 15


def b_k0(target, lane):
    return 2 * (lane & 3) if target == "nvidia" else 4 * ((lane >> 4) & 1)


def b_e(target, lane):
    return 0 if target == "nvidia" else lane >> 5


def c_cells(target, lane):
    if target == "nvidia":
        return [((lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)) for i in range(4)]
    return [(4 * (lane >> 4) + i, lane & 15) for i in range(4)]


def emulate(x, w, src: str, target: str = "nvidia") -> np.ndarray:
    cf = config(src, target)
    x = np.asarray(x, dtype=np.float64)[0]
    w = np.asarray(w, dtype=np.float64)[:, 0]
    C, D, H, W = x.shape
    if W > cf["WMAX"] or W % cf["TILEW"] or W % 8:
        raise ValueError(f"W = {W} outside this variant (W <= {cf['WMAX']}, W % {cf['TILEW']} == 0)")
    NPB, NPN, SPN, NT, WARPS, LANES, NB = (cf[k] for k in ("NPB", "NPN", "SPN", "NT", "WARPS", "LANES", "NB"))
    NSTAGE, SLOTE, PLANEE, ROWE = cf["NSTAGE"], cf["SLOTE"], cf["PLANEE"], cf["ROWE"]
    OPLANEE, OROWE, THREADS, WCH = cf["OPLANEE"], cf["OROWE"], cf["THREADS"], cf["WCH"]
    Dout, nb = D - 2, (H + 3) // 4
    npairs, wch = 2 * nb + 2, W // 8
    y = np.full((C, Dout, H, W), np.nan)
    NPG = NPB // NPN
    for c in range(C):
        A = np.zeros((3, 4, 16, 16))
        for kd in range(3):
            for j in range(4):
                seen = np.zeros((16, 16), int)
                tab = [tab_entry(w[c], i) for i in range(3 * 121)]
                for lane in range(LANES):
                    for m, k in a_cells(target, lane):  # each register: one table pair (k even, k + 1)
                        A[kd, j, m, k] = tab[tab_index(kd, j, m, k - (k & 1))][k & 1]
                        assert A[kd, j, m, k] == a_elem(w[c], kd, j, m, k)
                        seen[m, k] += 1
                assert (seen == 1).all(), "A fragment map does not cover 16 x 16 exactly once"
        for bx in range(-(-Dout // NPB)):
            d0 = bx * NPB
            smem = np.full(cf["OTILE_AT"] + (cf["NPPS"] * NPB + cf["OPAD"]) * OPLANEE, np.nan)
            assert len(smem) == cf["SMEM_BYTES"] // 2 - (4 * NSTAGE if cf["TMA"] == 1 else 0)
            if cf["TMA"] != 1:  # the cp.async kernel zeroes its ring once; a TMA load writes its whole box
                smem[:NSTAGE * SLOTE] = 0.0
            otile = cf["OTILE_AT"]

            def chunks():
                for tid in range(THREADS):
                    for k in range(cf["CPT"]):
                        cid = tid + THREADS * k
                        p, e, ch = cid // (2 * WCH), (cid // WCH) & 1, cid % WCH
                        if cid < cf["NCHUNK"] and ch < wch:
                            yield p, e, ch, p * PLANEE + e * ROWE + 8 + 8 * ch

            def load(i):
                slot, out = i % NSTAGE, []
                if cf["TMA"] == 1:  # the box: NPB + 2 planes x 2 rows x ROWE columns from column -8, zeros outside
                    for p in range(NPB + 2):
                        for e in range(2):
                            ih, row = 2 * i - 2 + e, np.zeros(ROWE)
                            if d0 + p < D and 0 <= ih < H:
                                row[8:8 + W] = x[c, d0 + p, ih]
                            out.append((slot * SLOTE + p * PLANEE + e * ROWE, row))
                    return out
                for p, e, ch, dst in chunks():
                    ih = 2 * i - 2 + e
                    ok = d0 + p < D and 0 <= ih < H
                    out.append((slot * SLOTE + dst, x[c, d0 + p, ih, 8 * ch:8 * ch + 8] if ok else np.zeros(8)))
                    assert 0 <= dst and dst + 8 <= SLOTE
                return out

            def land(writes):
                for a, v in writes:
                    smem[a:a + len(v)] = v

            acc = np.zeros((WARPS, 2, NT, 16, NB))
            bofs, oofs = {}, {}
            for warp in range(WARPS):
                for q in range(NT):
                    T = warp + WARPS * q  # tiles past W: columns past W, inside the row, never flushed
                    pg, ct = T % NPG, T // NPG
                    oofs[warp, q] = pg * NPN * OPLANEE, ct * cf["TILEW"]  # AMD's output-tile plane and column
                    for lane in range(LANES):
                        n = b_col(target, lane)
                        pl, col = pg * NPN + n // SPN, ct * cf["TILEW"] + 4 * (n % SPN)
                        bofs[warp, q, lane] = pl * PLANEE + b_e(target, lane) * ROWE + 8 + col - 2 + b_k0(target, lane)
            NPPS = cf["NPPS"]
            assert NPPS == 1 or NSTAGE >= 4
            for i in range(NSTAGE - NPPS):
                land(load(i))
            pend = -1

            def flush(b):
                t0 = otile + _tile(b, cf) * NPB * OPLANEE
                if target == "nvidia" and not cf["TMA"]:
                    # the kernel's map: thread tid reads its NFL chunks (planes FRS / 4 apart) unpredicated, inside
                    # the tiles or their OPAD planes, and stores those of its planes, rows and columns inside y
                    assert cf["FRS"] >= 4 and cf["FRS"] % 4 == 0
                    cids = []
                    for tid in range(THREADS):
                        fso, swap = flush_offset(tid, cf) if tid < cf["FTHR"] else (0, False)
                        pr, ch = tid // WCH, tid % WCH
                        for k in range(cf["NFL"]):
                            a = t0 + fso + cf["FRS"] // 4 * k * OPLANEE
                            assert otile <= a and a + 8 <= len(smem), "a flush read outside the output tiles"
                            v = smem[a:a + 8]
                            v = np.concatenate([v[4:], v[:4]]) if swap else v
                            p, r = pr // 4 + cf["FRS"] // 4 * k, pr % 4
                            if tid < cf["FTHR"] and p < NPB:
                                cids.append(4 * WCH * p + WCH * r + ch)
                                if ch < wch and d0 + p < Dout and 4 * b + r < H:
                                    y[c, d0 + p, 4 * b + r, 8 * ch:8 * ch + 8] = v
                    assert sorted(cids) == list(range(cf["NOUT"])), "the flush map does not cover the tile once"
                    return
                if not cf["TMA"]:  # AMD: the same map, each read and store predicated
                    cids = [(tid // WCH + cf["FRS"] * k) * WCH + tid % WCH for tid in range(cf["FTHR"])
                            for k in range(cf["NFL"]) if tid // WCH + cf["FRS"] * k < 4 * NPB]
                    assert sorted(cids) == list(range(cf["NOUT"])), "the flush map does not cover the tile once"
                else:
                    cids = range(cf["NOUT"])
                for cid in cids:
                    p, r, ch = cid // (4 * WCH), (cid // WCH) & 3, cid % WCH
                    oh = 4 * b + r
                    if ch < wch and d0 + p < Dout and oh < H:
                        a = t0 + p * OPLANEE + r * OROWE + 8 * ch
                        y[c, d0 + p, oh, 8 * ch:8 * ch + 8] = smem[a:a + 8]

            def body(i):
                """One pair's MMAs; an odd pair completes a block into output tile (block % NPPS). Returns the
                completed block, or -1."""
                P = i % 4
                sn, jn = (P >> 1) & 1, P & 1
                so, jo, bn = sn ^ 1, jn + 2, i >> 1
                sl = (i % NSTAGE) * SLOTE
                for warp in range(WARPS):
                    for q in range(NT):  # every tile, also past W (columns past W, never flushed)
                        for kd in range(3):
                            B = np.full((16, NB), np.nan)
                            for lane in range(LANES):
                                base = sl + bofs[warp, q, lane] + kd * PLANEE
                                for k, off in b_reads(target, lane, ROWE):
                                    assert sl <= base + off < sl + SLOTE, "B read outside its ring slot"
                                    B[k, b_col(target, lane)] = smem[base + off]
                            # no MMAs for block -1 (pairs 0, 1) and block nb (the last two pairs): their
                            # accumulators are poisoned instead, so that a stored block that needed them shows
                            acc[warp, sn, q] += A[kd, jn] @ B if i < npairs - 2 else np.nan
                            acc[warp, so, q] += A[kd, jo] @ B if i >= 2 else np.nan
                done = -1
                if P & 1:
                    if bn >= 1:  # to_tile: the completed block -> its output tile
                        for warp in range(WARPS):
                            for q in range(NT):  # tiles past W too: columns past W, never flushed
                                for lane in range(LANES):
                                    for i, (m, n) in enumerate(c_cells(target, lane)):
                                        t0 = otile + _tile(bn - 1, cf) * cf["NPB"] * OPLANEE
                                        if target == "nvidia":  # the kernel's coff: register i + 2 is the next column
                                            a = t0 + c_offset(warp, lane, i & 1, cf) + cf["OQ"] * q + (i >> 1)
                                        else:
                                            pl0, col0 = oofs[warp, q]
                                            a = t0 + pl0 + (n // SPN) * OPLANEE + m_row(m) * OROWE + col0 + 4 * (n % SPN) \
                                                + m_col(m)
                                        smem[a] = acc[warp, so, q, m, n]
                        done = bn - 1
                    acc[:, so] = 0.0
                return done

            # one barrier interval = NPPS pairs. Within it the kernel's warps run in any order, so the emulation
            # takes the worst: the interval's copies land first (before its reads), and its output-tile writes
            # come before the flush of the previous block (an output tile shared by both would show).
            for i0 in range(0, npairs, NPPS):
                pres = [load(i0 + NSTAGE - NPPS + u) for u in range(NPPS)]
                if target == "nvidia":  # cp.async: lands during the interval, in slots nobody reads now
                    for pre in pres:
                        land(pre)
                old, new = pend, -1
                for u in range(NPPS):
                    done = body(i0 + u)
                    if target != "nvidia":
                        land(pres[u])  # AMD: after the pair's MFMAs
                    new = done if done >= 0 else new
                if old >= 0:
                    flush(old)
                pend = new
            if pend >= 0:
                flush(pend)
    return y


def c_offset(warp: int, lane: int, i: int, cf: dict) -> int:
    """The kernel's coff[i] (NVIDIA): the output-tile element of C registers i (and i + 2, one column further) in the
    warp's first tile; tile q's is OQ q further."""
    npg = cf["NPB"] // cf["NPN"]
    m, n = c_cells("nvidia", lane)[i]
    col = (warp // npg) * cf["TILEW"] + 4 * (n % cf["SPN"]) + m_col(m)
    return ((warp % npg) * cf["NPN"] + n // cf["SPN"]) * cf["OPLANEE"] + m_row(m) * cf["OROWE"] + ocol(col, m_row(m), cf)


def flush_offset(tid: int, cf: dict) -> tuple:
    """The kernel's flush read of thread tid < FTHR, first step: (output-tile element offset of the 16-byte chunk as it
    sits, halves swapped)."""
    pr, ch = tid // cf["WCH"], tid % cf["WCH"]
    p, r = pr // 4, pr % 4
    return p * cf["OPLANEE"] + r * cf["OROWE"] + (ocol(8 * ch, r, cf) & ~7), bool(cf["OSW"] and r & 1)


def bank_conflicts(src: str, W: int) -> dict:
    """Worst number of distinct 4-byte words one bank serves in one warp-wide access (1 = conflict-free), NVIDIA
    layout, 32 banks: the B reads (one per tile and plane), the output-tile writes of the C fragments and the flush's
    16-byte reads (those counted a quarter warp at a time, 8 threads x 16 bytes = the 32 banks once)."""
    cf = config(src, "nvidia")
    NPN, SPN, TILEW = cf["NPN"], cf["SPN"], cf["TILEW"]
    NPG = cf["NPB"] // NPN
    worst = {"b_read": 1, "c_write": 1, "flush_read": 1}

    def ways(addrs):  # element addresses of one warp access -> worst distinct words per bank
        banks: dict = {}
        for a in addrs:
            banks.setdefault((a // 2) % 32, set()).add(a // 2)
        return max(len(v) for v in banks.values())

    for T in range(NPG * (W // TILEW)):
        pg, ct = T % NPG, T // NPG
        for kd in range(3):
            for k, off in ((0, 0), (8, cf["ROWE"])):  # the two reads of a B fragment
                addrs = []
                for lane in range(32):
                    n = b_col("nvidia", lane)
                    pl, col = pg * NPN + n // SPN + kd, ct * TILEW + 4 * (n % SPN)
                    addrs.append(pl * cf["PLANEE"] + 8 + col - 2 + b_k0("nvidia", lane) + off)
                worst["b_read"] = max(worst["b_read"], ways(addrs))
        for i in range(4):
            addrs = []
            for lane in range(32):
                m, n = c_cells("nvidia", lane)[i]
                addrs.append(pg * NPN * cf["OPLANEE"] + (n // SPN) * cf["OPLANEE"] + m_row(m) * cf["OROWE"]
                             + ocol(ct * TILEW + 4 * (n % SPN) + m_col(m), m_row(m), cf))
            worst["c_write"] = max(worst["c_write"], ways(addrs))
    if not cf["TMA"]:
        for k in range(cf["NFL"]):
            for q0 in range(0, cf["FTHR"], 8):
                addrs = []
                for tid in range(q0, min(q0 + 8, cf["FTHR"])):
                    pr = tid // cf["WCH"] + cf["FRS"] * k
                    if pr < 4 * cf["NPB"] and tid % cf["WCH"] < W // 8:
                        a = flush_offset(tid, cf)[0] + cf["FRS"] // 4 * k * cf["OPLANEE"]
                        addrs += range(a, a + 8, 2)  # the chunk's 4 words
                if addrs:
                    worst["flush_read"] = max(worst["flush_read"], ways(addrs))
    return worst
