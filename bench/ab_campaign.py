"""The GPU acceptance campaign of a benchmark verdict at DEFAULT arguments, through the MCP client, in one run
(bench/ab_same_code.py --campaign; about 8 minutes on an H100):

1. the wall time of a default call (control arm on) against a plain two-arm call (control=false), same problem,
   after a warm-up call of each kind (the server's and the problem's first start, not counted);
2. TF32 / fp16 / bf16 downgrades of an fp32 matmul: valid=false expected;
3. forges (a rescaled timer, skipping the repetitions it guesses are unchecked, memoising by address and
   version), each without and with confirm: valid=false expected, or the true speedup (about 1);
4. 5 % more work (KernelBench 1, fp32 N=4096, >= 1 ms): resolved as slower in >= 9 of 10 calls;
5. 2 % more work on the same >= 1 ms kernel: resolved in >= 8 of 10;
6. same code on both sides over 12 kernels of 10 kinds, round-robin until --same-calls calls (the default
   calls of 1. count): resolved false in >= 95 %.
Sections run in this order under one deadline (--budget-s): a section cut short says so in the table.
KernelBench problems come from --kb (a level1 directory) at sizes set by overrides, so each runs fast.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench.ab_same_code import _row, call, make_ref, same_code_candidate

HERE = Path(__file__).resolve().parent / "candidates_ab"
CAMP = HERE / "campaign"
MM = "1_Square_matrix_multiplication_"

# KernelBench level-1 problems and the constants that make them fast (16M-element tensors at most)
KB_SAME = {
    "40_LayerNorm": {"dim1": 64, "dim2": 64},
    "95_CrossEntropyLoss": {"batch_size": 4096},
    "97_ScaledDotProductAttention": {"batch_size": 4, "num_heads": 16, "embedding_dimension": 64},
    "23_Softmax": {"dim": 4096},
    "19_ReLU": {"dim": 4096},
    "42_Max_Pooling_2D": {"batch_size": 4, "height": 256, "width": 256},
    "47_Sum_reduction_over_a_dimension": {"batch_size": 16, "dim1": 1024, "dim2": 1024},
    "36_RMSNorm_": {"batch_size": 16, "dim1": 128, "dim2": 128},
    MM: {},  # fp32 4096^3: about 2.7 ms
}
INLINE_SAME = {  # kind: a cuBLAS GEMM, a 2-3 us kernel, a multi-kernel candidate
    "gemm_bf16_4096": make_ref("a, b", "return a @ b", "torch.randn(4096, 4096, dtype=torch.bfloat16), "
                               "torch.randn(4096, 4096, dtype=torch.bfloat16)"),
    "add_2us": make_ref("x, y", "return x + y", "torch.randn(1 << 16), torch.randn(1 << 16)"),
    "elementwise_chain_3_kernels": make_ref("x", "y = x * 1.5\ny = y + 0.25\nreturn torch.relu(y)",
                                            "torch.randn(1 << 24)"),
}


def _kb(kb: Path, name: str) -> str:
    return (kb / f"{name}.py").read_text()


def _same_args(kb: Path, name: str) -> dict:
    if name in INLINE_SAME:
        ref = INLINE_SAME[name]
        return {"reference": ref, "candidate": same_code_candidate(ref)}
    ref = _kb(kb, name)
    args = {"reference": ref, "candidate": same_code_candidate(ref)}
    if KB_SAME[name]:
        args["overrides"] = KB_SAME[name]
    return args


async def _one(client, args: dict, log: list, section: str, label: str) -> dict:
    t0 = time.monotonic()
    sc = await call(client, {"wait_s": 600, "timeout_s": 1800, **args})
    sc["_wall_s"] = round(time.monotonic() - t0, 1)
    row = {"section": section, "label": label, **_row(sc)}
    res = (sc.get("results") or [{}])[-1]
    row.update(runner_clock=(res.get("runner_clock") or "")[:300] or None,
               confirm_speedup=res.get("confirm_speedup"), flags=res.get("flags"))
    log.append(row)
    print(section, label, row["valid"], row["invalid_reason"], row["speedup"], row["ci"], row["resolved"],
          row["wall_s"], flush=True)
    return row


async def run_campaign(a, save) -> dict:
    from mcp import Client

    from evokernel_mcp.server import build_server

    kb = Path(a.kb)
    deadline = time.monotonic() + a.budget_s
    out: dict = {"rows": [], "cut": []}
    log = out["rows"]
    mm = _kb(kb, MM)
    mm_small = {"overrides": {"N": 2048}}

    chosen = set((getattr(a, "sections", None) or "wall,downgrade,forge,five_percent,two_percent,same_code")
                 .split(","))

    def left(section: str) -> bool:
        if section not in chosen:
            return False
        if time.monotonic() < deadline:
            return True
        if section not in out["cut"]:
            out["cut"].append(section)
        return False

    async with Client(build_server()) as client:
        # 1. wall: default call vs two-arm call, in the order A B B A after two warm-up calls, one of each
        # (not counted): the first pays the server's and the problem's first start, and the spares a default
        # call takes are started again behind both; the default calls count as same-code calls too
        for i, control in enumerate((True, False, True, False, False, True)):
            if left("wall"):
                args = {**_same_args(kb, "40_LayerNorm"), **({"control": False} if control is False else {})}
                label = ("warm-up (not counted)" if i < 2 else
                         "default" if control else "two-arm (control=false)")
                await _one(client, args, log, "wall", label)
                save(out)
        for name in ("downgrade_tf32", "downgrade_fp16", "downgrade_bf16"):  # 2. precision downgrades
            if left("downgrade"):
                await _one(client, {"reference": mm, "candidate": (CAMP / f"{name}.py").read_text(), **mm_small},
                           log, "downgrade", name)
                save(out)
        for name in ("forge_timer_scaled", "forge_skip_unchecked", "forge_memo_version"):  # 3. forges
            for confirm in (False, True):
                if left("forge"):  # the rescale on the >= 1 ms kernel (where the runner's bound is tight)
                    await _one(client, {"reference": mm, "candidate": (CAMP / f"{name}.py").read_text(),
                                        **({} if name == "forge_timer_scaled" else mm_small),
                                        **({"confirm": True} if confirm else {})},
                               log, "forge", name + (" +confirm" if confirm else ""))
                    save(out)
        for section, src in (("five_percent", HERE / "five_percent_more.py"),  # 4., 5. honest differences
                             ("two_percent", CAMP / "two_percent_more.py")):
            for i in range(10):
                if left(section):
                    await _one(client, {"reference": mm, "candidate": src.read_text()}, log, section, str(i))
                    save(out)
        names = [n for n in (*KB_SAME, *INLINE_SAME) if n in INLINE_SAME or (kb / f"{n}.py").exists()]
        done = sum(1 for r in log if r["section"] == "wall" and r["label"] == "default")
        names = names[1:] + names[:1] if done else names  # 40_LayerNorm had its default calls above
        for i in range(max(a.same_calls - done, 0)):  # 6. same code, round-robin: a cut leaves every kernel alike
            if left("same_code"):
                name = names[i % len(names)]
                await _one(client, _same_args(kb, name), log, "same_code", name)
                save(out)
    return out


def _fmt(x, f="{:.4f}"):
    return "-" if x is None else f.format(x)


def to_markdown(res: dict, meta: dict) -> str:
    rows = res["rows"]
    sec = {s: [r for r in rows if r["section"] == s] for s in
           ("wall", "downgrade", "forge", "five_percent", "two_percent", "same_code")}
    same = sec["same_code"] + [{**r, "label": "40_LayerNorm"} for r in sec["wall"] if r["label"] == "default"]
    kinds = sorted({r["label"] for r in same})
    held = sum(1 for r in same if r["valid"] and not r["resolved"])
    lines = [f"# Benchmark verdicts at default arguments: the GPU campaign ({meta['device']}, {meta['date']})", "",
             f"versions: {meta['versions']}; default arguments (control arm on) unless the row says otherwise; "
             f"one command: `{meta['command']}`; the whole campaign took {meta.get('campaign_wall_s', '-')} s", ""]
    if res.get("cut"):
        lines += [f"**Cut short by the deadline: {', '.join(res['cut'])}.**", ""]
    lines += ["## Summary", "", "| check | expected | got |", "|---|---|---|",
              f"| same code, resolved false | >= 95 % of >= 48 calls over >= 12 kernels | {held} of {len(same)} "
              f"calls over {len(kinds)} kernels |"]
    for s, want in (("five_percent", 9), ("two_percent", 8)):
        got = sum(1 for r in sec[s] if r["valid"] and r["resolved"] and (r["speedup"] or 1) < 1)
        lines.append(f"| {s.replace('_', ' ')}: resolved as slower | >= {want} of 10 | {got} of {len(sec[s])} |")
    bad = sum(1 for r in sec["downgrade"] if r["valid"] is False)
    lines.append(f"| TF32 / fp16 / bf16 downgrades: valid=false | 3 of 3 | {bad} of {len(sec['downgrade'])} |")
    ok = sum(1 for r in sec["forge"] if r["valid"] is False or (r["speedup"] and r["speedup"] < 1.1))
    lines.append(f"| forges: valid=false or true speedup within 10 % | all | {ok} of {len(sec['forge'])} |")
    walls = {m: [r["wall_s"] for r in sec["wall"]
             if r["label"] == ("default" if m else "two-arm (control=false)") and r["wall_s"]]
             for m in (True, False)}
    ratio = (statistics.median(walls[True]) / statistics.median(walls[False])) if all(walls.values()) else None
    lines.append(f"| wall of a default call / a two-arm call | <= 1.5 | {_fmt(ratio, '{:.2f}')} "
                 f"({walls[True]} s vs {walls[False]} s) |")
    lines += ["", "## Every call", "", "| section | case | valid | reason | speedup | interval | resolved | "
              "noise floor | wall s | runner's clock / detail |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        floor = (r.get("noise_floor") or {}).get("source") if isinstance(r.get("noise_floor"), dict) else None
        detail = (r.get("invalid_detail") or r.get("runner_clock") or str(r.get("error") or ""))[:160]
        ci = r["ci"]
        lines.append(f"| {r['section']} | {r['label']} | {r['valid']} | {r['invalid_reason'] or ''} | "
                     f"{_fmt(r['speedup'])} | {'-' if not ci else f'[{ci[0]:.4f}, {ci[1]:.4f}]'} | {r['resolved']} | "
                     f"{(floor or '')[:60]} | {r['wall_s']} | {detail.replace('|', '/')} |")
    first = next((r["clocks"] for r in rows if r.get("clocks")), None)
    lines += ["", f"Clocks (first call): {first}"]
    return "\n".join(lines) + "\n"
