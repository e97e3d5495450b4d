"""Realistic tool results for the journal tests, built with the tools' own models."""

from __future__ import annotations

from evokernel_mcp.benchmark.models import BenchmarkResult, ShapeResult, TimingStats
from evokernel_mcp.compile.models import CompileResult, KernelReport, Occupancy
from evokernel_mcp.models import ToolchainInfo
from evokernel_mcp.verify import VerifyResult


def timing(median_ms: float, rel: float = 0.02, reps: int = 30) -> TimingStats:
    lo, hi = median_ms * (1 - rel), median_ms * (1 + rel)
    return TimingStats(median_ms=median_ms, min_ms=lo * 0.99, mean_ms=median_ms, p10_ms=lo, p90_ms=hi, std_ms=0.01,
                       ci_median_ms=(lo, hi), reps=reps, rel_ci=rel)


def bench(medians: dict[str, float], baseline_ms: float = 3.0, correct: bool = True,
          device: str = "cuda:0") -> BenchmarkResult:
    rows = []
    for shape, m in medians.items():
        c, b = timing(m), timing(baseline_ms)
        row = ShapeResult(shape=shape, candidate=c, baseline=b, speedup=baseline_ms / m,
                          speedup_ci=(b.ci_median_ms[0] / c.ci_median_ms[1], b.ci_median_ms[1] / c.ci_median_ms[0]),
                          noise=False, correct_after_timing=correct, fraction_of_roofline=0.5, roofline_ms=m / 2)
        if not correct and "valid" in ShapeResult.model_fields:  # the benchmark's verdict: figures nulled
            row = row.model_copy(update={"valid": False, "invalid_reason": "wrong_output_after_timing",
                                         "candidate": None, "speedup": None, "speedup_ci": None})
        rows.append(row)
    return BenchmarkResult(results=rows, device=device)


def verify(passed: bool, max_abs_err: float = 0.0, mismatches: int = 0, **case) -> VerifyResult:
    from evokernel_mcp.verify import VerifyCase

    return VerifyResult(passed=passed, task="vector_add", device="cuda:0", cases=[
        VerifyCase(shape="small", seed=0, passed=passed, max_abs_err=max_abs_err, max_rel_err=max_abs_err,
                   mismatches=mismatches, **case)])


def compiled(vgpr: int = 32, lds: int = 0, waves: int = 8, ok: bool = True) -> CompileResult:
    k = KernelReport(name="add_kernel", vgpr_count=vgpr, sgpr_count=16, lds_bytes=lds, scratch_bytes=0,
                     vgpr_spill_count=0, occupancy=Occupancy(waves_per_simd=waves, limiter="vgpr",
                                                             limits={"vgpr": waves, "lds": 8}))
    return CompileResult(ok=ok, toolchain=ToolchainInfo(name="triton", version="3.6"), target="gfx942",
                         language="triton", kernels=[k] if ok else [])
