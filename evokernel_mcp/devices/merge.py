"""Live facts + the arch table -> one DeviceInfo with provenance and conflicts (shared by AMD and NVIDIA).

Rules: a live value always wins; the table fills what no tool reported; where both exist and disagree, the
live value is kept and a Conflict carries both. Peaks come from the product entry matched by name (scaled
when the device is a fraction of the product, e.g. one MI250X GCD) or are computed from live CUs x live clock
x the table's per-CU rate; provenance says which.
"""

from __future__ import annotations

from typing import Any

from evokernel_mcp.arch import table
from evokernel_mcp.arch.table import Fact
from evokernel_mcp.devices.models import Conflict, DeviceInfo
from evokernel_mcp.models import Provenance

KIB, MIB, GIB = 1024, 1024**2, 1024**3


class DeviceBuilder:
    """Accumulates one device: values, provenance (field -> source) and conflicts."""

    def __init__(self, index: int, arch: str | None):
        self.index = index
        self.arch = arch if arch in table.arch_names() else None
        self.raw_arch = arch
        self.values: dict[str, Any] = {"index": index, "arch": arch}
        self.provenance: list[Provenance] = []
        self.conflicts: list[Conflict] = []
        self.live_sources: dict[str, str] = {}
        self.product: str | None = None

    def path(self, field: str) -> str:
        return f"devices[{self.index}].{field}"

    def live(self, field: str, value: Any, source: str, detail: str | None = None) -> None:
        """Set a field from a tool, unless an earlier (preferred) tool already set it."""
        if value is None or self.values.get(field) is not None:
            return
        self.values[field] = value
        self.live_sources[field] = source
        self.provenance.append(Provenance(field=self.path(field), source=source, detail=detail))

    def fact(self, key: str) -> Fact | None:
        if self.arch is None:
            return None
        try:
            return table.fact(self.arch, key)
        except KeyError:
            return None

    def product_fact(self, key: str) -> Fact | None:
        if self.arch is None or self.product is None:
            return None
        return table.product_fact(self.arch, self.product, key)

    def from_table(self, field: str, f: Fact | None, scale: float = 1.0, pick: str | None = None) -> None:
        """Fill a field nobody measured from the table (value x scale; `pick` a key of a dict value)."""
        v = _numeric(f.value if f else None, pick)
        if f is None or v is None or self.values.get(field) is not None:
            return
        self.values[field] = int(v * scale) if float(v * scale).is_integer() else v * scale
        self.provenance.append(f.provenance(self.path(field)))

    def check(self, field: str, f: Fact | None, scale: float = 1.0, rel_tol: float = 0.0, note: str = "",
              pick: str | None = None) -> None:
        """Flag a live value that contradicts the table (beyond rel_tol); both values are returned."""
        live, expected = self.values.get(field), _numeric(f.value if f else None, pick)
        if f is None or expected is None or live is None or field not in self.live_sources:
            return
        expected = expected * scale
        if abs(live - expected) <= rel_tol * max(abs(expected), 1e-12):
            return
        default = f"live {live} differs from the arch table's {expected:g}; the live value is used."
        self.conflicts.append(Conflict(
            field=field, live_value=live, live_source=self.live_sources[field],
            table_value=int(expected) if float(expected).is_integer() else expected,
            table_source=f"{f.ref} ({f.source})", note=note or default))

    def finish(self) -> tuple[DeviceInfo, list[Provenance]]:
        self.values["product"] = self.product
        self.values["conflicts"] = self.conflicts
        if not self.values.get("name"):
            self.values["name"] = self.product or self.raw_arch or f"device {self.index}"
        return DeviceInfo(**self.values), self.provenance


def _numeric(v: Any, pick: str | None = None) -> float | None:
    if isinstance(v, dict) and pick is not None:
        v = v.get(pick)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


match_product = table.match_product  # one matcher for devices, benchmark and docs


def add_peaks(b: DeviceBuilder, rate_key: str, label: str | None = None) -> None:
    """peak_tflops and peak_bandwidth_gbs: product entry (scaled to this device's share) or computed."""
    cus, product_cus = b.values.get("compute_units"), _numeric(getattr(b.product_fact("cus") or
                                                                       b.product_fact("sms"), "value", None))
    share = cus / product_cus if cus and product_cus and cus != product_cus else 1.0
    peaks = b.product_fact("peak_tflops")
    if peaks is not None and isinstance(peaks.value, dict):
        vals = {k: round(v * share, 1) for k, v in peaks.value.items() if _numeric(v) is not None}
        if vals:
            b.values["peak_tflops"] = vals
            p = peaks.provenance(b.path("peak_tflops"))
            if share != 1.0:
                p.detail = (f"product peaks x {cus}/{int(product_cus)} CUs (this device is a part of a "
                            f"{b.product}: a GCD or a compute partition). " + (p.detail or ""))
            b.provenance.append(p)
    else:
        _computed_peaks(b, rate_key, label)
    bw = b.product_fact("hbm_bandwidth_tb_s")
    if bw is not None and _numeric(bw.value) is not None:
        mem, prod_mem = b.values.get("memory_bytes"), _numeric(getattr(
            b.product_fact("hbm_gib") or b.product_fact("hbm_gb"), "value", None))
        frac = mem / (prod_mem * GIB) if mem and prod_mem and mem < 0.9 * prod_mem * GIB else 1.0
        frac = max(round(frac * 8) / 8, 0.125)  # GCDs / memory partitions hold 1/2, 1/4 or 1/8 of the HBM
        b.values["peak_bandwidth_gbs"] = round(bw.value * 1000 * frac, 1)
        p = bw.provenance(b.path("peak_bandwidth_gbs"))
        if frac != 1.0:
            p.detail = f"product bandwidth x this device's share of its memory ({frac:.2f}). " + (p.detail or "")
        b.provenance.append(p)


def _computed_peaks(b: DeviceBuilder, rate_key: str, label: str | None) -> None:
    rates, cus, mhz = b.fact(rate_key), b.values.get("compute_units"), b.values.get("max_clock_mhz")
    if rates is None or not cus or not mhz:
        return
    per_cu = rates.value if isinstance(rates.value, dict) else {label or rate_key: rates.value}
    vals = {k: round(cus * mhz * 1e6 * v / 1e12, 1)
            for k, v in per_cu.items() if _numeric(v) is not None}
    if not vals:
        return
    b.values["peak_tflops"] = vals
    src = ", ".join(f"{f}: {b.live_sources.get(f, 'arch table')}" for f in ("compute_units", "max_clock_mhz"))
    b.provenance.append(Provenance(
        field=b.path("peak_tflops"), source="computed",
        detail=f"compute_units x max_clock_mhz x {rates.ref} per-CU FLOPs/clock ({src}); no product entry "
               f"matched the device name. Rate source: {rates.source}"))
