"""Roofline arithmetic: achieved GB/s and TFLOP/s, fractions of datasheet peaks and measured ceilings,
the roofline-bound time max(bytes/bandwidth, flops/peak) and the gap to it.

`compute_roofline` is pure; `datasheet_peaks` reads the arch table (resources/gpu_arch/arch.yaml) and
returns each peak with the Provenance that cites it.
"""

from __future__ import annotations

from dataclasses import dataclass

from evokernel_mcp.arch import table
from evokernel_mcp.benchmark.models import Roofline
from evokernel_mcp.errors import BadInput
from evokernel_mcp.models import Provenance

# Arch-table peak_tflops keys to try, first found wins, per (dtype, unit). AMD keys first, then NVIDIA.
# 'vector' bf16/fp16 math is usually done in fp32 registers (upcast); NVIDIA has a packed fp16 vector rate.
PEAK_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("bf16", "matrix"): ("bf16_matrix", "fp16_bf16_tensor_dense"),
    ("fp16", "matrix"): ("fp16_matrix", "fp16_bf16_tensor_dense"),
    ("tf32", "matrix"): ("tf32_xf32", "tf32_tensor_dense"),
    ("fp32", "matrix"): ("fp32_matrix", "fp32"),
    ("fp8", "matrix"): ("fp8_matrix", "fp8_tensor_dense", "fp8_matrix_scaled", "fp8"),
    ("fp64", "matrix"): ("fp64_matrix", "fp64_tensor"),
    ("fp32", "vector"): ("fp32_vector", "fp32"),
    ("fp64", "vector"): ("fp64_vector",),
    ("fp16", "vector"): ("fp16_vector", "fp32_vector", "fp32"),
    ("bf16", "vector"): ("fp16_vector", "fp32_vector", "fp32"),
}
DTYPE_ALIASES = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
    "float64": "fp64", "double": "fp64", "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
}
@dataclass(frozen=True)
class Peak:
    value: float
    provenance: Provenance


def norm_dtype(dtype: str) -> str:
    d = dtype.lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(d, d)


def resolve_product(arch: str, device_name: str | None) -> str | None:
    """Arch-table product for a live device name; the arch's default product when the name says nothing."""
    return table.product_for(arch, device_name)


def _product_or_arch_fact(arch: str, product: str | None, key: str):
    if product:
        f = table.product_fact(arch, product, key)
        if f is not None:
            return f
    return table.fact(arch, key) if table.has(arch, key) else None


def datasheet_peaks(arch: str, product: str | None, dtype: str, unit: str = "matrix"
                    ) -> tuple[Peak | None, Peak | None]:
    """(peak bandwidth in GB/s, peak TFLOP/s for dtype/unit) from the arch table, each with provenance."""
    if unit not in ("matrix", "vector"):
        raise BadInput(f"compute unit {unit!r}: use 'matrix' or 'vector'")
    bw = None
    f = _product_or_arch_fact(arch, product, "hbm_bandwidth_tb_s")
    if f is not None:
        bw = Peak(float(f.value) * 1000.0, f.provenance("peak_bandwidth_gbs"))
    tf = None
    f = _product_or_arch_fact(arch, product, "peak_tflops")
    if f is not None and isinstance(f.value, dict):
        for key in PEAK_KEYS.get((norm_dtype(dtype), unit), ()):
            if key in f.value:
                p = f.provenance("peak_tflops")
                p.detail = f"{key} ({norm_dtype(dtype)} {unit}); {p.detail}"
                tf = Peak(float(f.value[key]), p)
                break
    return bw, tf


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def bound_ms(nbytes: float | None, flops: float | None, gbs: float | None, tflops: float | None
             ) -> tuple[float | None, str | None]:
    """max(bytes/bandwidth, flops/peak) in ms and which term is larger; None when neither term is known."""
    t_mem = nbytes / (gbs * 1e9) * 1e3 if nbytes and gbs else None
    t_cmp = flops / (tflops * 1e12) * 1e3 if flops and tflops else None
    if t_mem is None and t_cmp is None:
        return None, None
    if t_cmp is None or (t_mem is not None and t_mem >= t_cmp):
        return t_mem, "memory"
    return t_cmp, "compute"


def compute_roofline(median_ms: float, nbytes: float | None, flops: float | None, *,
                     peak_gbs: float | None = None, peak_tflops: float | None = None,
                     ceil_gbs: float | None = None, ceil_tflops: float | None = None) -> Roofline:
    """All roofline numbers for one median time. Measured ceilings win over datasheet peaks for roofline_ms."""
    if median_ms <= 0:
        raise BadInput(f"median time {median_ms} ms must be > 0 for a roofline")
    for name, v in (("bytes", nbytes), ("flops", flops), ("peak_gbs", peak_gbs), ("peak_tflops", peak_tflops),
                    ("ceil_gbs", ceil_gbs), ("ceil_tflops", ceil_tflops)):
        if v is not None and v < 0:
            raise BadInput(f"{name} = {v} is negative")
    s = median_ms * 1e-3
    gbs = nbytes / s / 1e9 if nbytes else None
    tfl = flops / s / 1e12 if flops else None
    sheet_ms, sheet_bound = bound_ms(nbytes, flops, peak_gbs, peak_tflops)
    best_gbs = ceil_gbs if ceil_gbs else peak_gbs
    best_tfl = ceil_tflops if ceil_tflops else peak_tflops
    roof_ms, bound = bound_ms(nbytes, flops, best_gbs, best_tfl)
    return Roofline(
        bytes=nbytes, flops=flops, achieved_gbs=gbs, achieved_tflops=tfl,
        fraction_of_peak_bandwidth=_ratio(gbs, peak_gbs), fraction_of_peak_tflops=_ratio(tfl, peak_tflops),
        fraction_of_measured_bandwidth=_ratio(gbs, ceil_gbs), fraction_of_measured_tflops=_ratio(tfl, ceil_tflops),
        fraction_of_peak=_ratio(sheet_ms, median_ms),
        roofline_ms=roof_ms, roofline_datasheet_ms=sheet_ms, bound=bound or sheet_bound,
        fraction_of_roofline=_ratio(roof_ms, median_ms), gap_ms=median_ms - roof_ms if roof_ms is not None else None,
    )
