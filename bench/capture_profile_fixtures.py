"""Record the ncu outputs that profile_pmc and thread_trace are tested on but no fixture holds yet: a
four-kernel candidate with Triton tensor-core GEMMs (bf16 and fp32 inputs, i.e. TF32) under the overview and
compute metric lists (raw page), and the source page of a Triton GEMM in both views (`cuda,sass` with line
info, and `sass`).

Run on the GPU machine from the repo root (about 2 minutes):
    PYTHONPATH=. python3 bench/capture_profile_fixtures.py [OUT_DIR]
Writes (to OUT_DIR, default $OUT or /tmp/profile_capture): ncu_raw_gemm4_overview.csv,
ncu_raw_gemm4_compute.csv, ncu_source_cuda_sass_gemm.csv, ncu_source_sass_gemm.csv, capture_log.txt,
versions.txt. Copy them to tests/fixtures/cuda/ and add a row per file to its SOURCES.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evokernel_mcp.profile import presets  # noqa: E402

PROGRAM = textwrap.dedent('''
    import torch, triton, triton.language as tl

    @triton.jit
    def zero_kernel(p, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(p + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)

    @triton.jit
    def gemm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def swish_kernel(x, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x + offs, mask=offs < n)
        tl.store(x + offs, v * tl.sigmoid(v), mask=offs < n)

    M = N = K = 4096
    a16 = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); b16 = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    a32 = a16.float(); b32 = b16.float()
    c = torch.empty(M, N, device="cuda")
    grid = (M // 128, N // 128)
    for _ in range(2):
        zero_kernel[(triton.cdiv(M * N, 1024),)](c, M * N, BLOCK=1024)
        gemm_kernel[grid](a16, b16, c, M, N, K, BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
        gemm_kernel[grid](a32, b32, c, M, N, K, BM=128, BN=128, BK=32, num_warps=8, num_stages=3)
        swish_kernel[(triton.cdiv(M * N, 1024),)](c, M * N, BLOCK=1024)
    torch.cuda.synchronize()
    print("done")
''')


def run(argv: list[str], log, out: Path | None = None, timeout: int = 300) -> None:
    log.write("$ " + " ".join(argv) + "\n")
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    log.write(f"rc={res.returncode}\n{res.stderr[-4000:]}\n")
    if out is not None:
        out.write_text(res.stdout)
    else:
        log.write(res.stdout[-4000:] + "\n")


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp/profile_capture"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/profile_capture_work")
    work.mkdir(exist_ok=True)
    prog = work / "gemm4.py"
    prog.write_text(PROGRAM)
    common = ["ncu", "--clock-control", "none", "--target-processes", "all", "--replay-mode", "kernel",
              "--cache-control", "all", "--force-overwrite"]
    with (out / "capture_log.txt").open("w") as log:
        run(["bash", "-c", "ncu --version; nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "
             "'import torch, triton; print(torch.__version__, triton.__version__)'"], log, out / "versions.txt")
        for preset in ("overview", "compute"):
            rep = work / f"gemm4_{preset}"
            run(common + ["--metrics", ",".join(presets.ncu_metrics(preset, None)), "--launch-count", "4",
                          "--kernel-name", "regex:zero_kernel|gemm_kernel|swish_kernel",
                          "--export", str(rep), "python3", str(prog)], log)
            run(["ncu", "--import", f"{rep}.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"], log,
                out / f"ncu_raw_gemm4_{preset}.csv")
        rep = work / "gemm_src"
        run(common + ["--section", "SourceCounters", "--section", "WarpStateStats", "--section", "LaunchStats",
                      "--import-source", "yes", "--kernel-name", "regex:gemm_kernel", "--launch-count", "1",
                      "--export", str(rep), "python3", str(prog)], log)
        for view, name in (("cuda,sass", "ncu_source_cuda_sass_gemm.csv"), ("sass", "ncu_source_sass_gemm.csv")):
            run(["ncu", "--import", f"{rep}.ncu-rep", "--csv", "--page", "source", "--print-source", view], log,
                out / name)
    print("\n".join(sorted(p.name for p in out.iterdir())))


if __name__ == "__main__":
    main()
