"""The arch table (resources/gpu_arch/arch.yaml): data with sources, not code.

Each fact is {value, source[, note]}. Accessors return a Fact so callers can attach provenance:
`fact("gfx950", "lds_per_cu_kib")` -> Fact(value=160, source="S1: ...", ref="resources/gpu_arch/arch.yaml#gfx950.lds_per_cu_kib").
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

from evokernel_mcp.errors import BadInput
from evokernel_mcp.models import Model, Provenance
from evokernel_mcp.paths import resources_dir

ARCH_FILE_REL = "resources/gpu_arch/arch.yaml"

# Which product a bare arch name stands for when no live device says otherwise.
DEFAULT_PRODUCT = {"gfx90a": "MI250X", "gfx942": "MI300X", "gfx950": "MI355X", "sm_90": "H100_SXM5"}
AMD_ARCHES = ("gfx90a", "gfx942", "gfx950")
NVIDIA_ARCHES = ("sm_90",)


class Fact(Model):
    value: Any
    source: str
    note: str | None = None
    ref: str

    def provenance(self, field: str) -> Provenance:
        detail = self.source + (f" (note: {self.note})" if self.note else "")
        return Provenance(field=field, source=self.ref, detail=detail)


@functools.lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    with open(resources_dir() / "gpu_arch" / "arch.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def arch_names() -> list[str]:
    return [k for k in _load() if k not in ("meta", "unsourced")]


def sources() -> dict[str, str]:
    return dict(_load()["meta"]["sources"])


def _arch(arch: str) -> dict[str, Any]:
    data = _load()
    if arch not in data or arch in ("meta", "unsourced"):
        raise BadInput(f"unknown arch {arch!r}; the arch table has: {', '.join(arch_names())}")
    return data[arch]


def has(arch: str, key: str) -> bool:
    return key in _arch(arch)


def fact(arch: str, key: str) -> Fact:
    entry = _arch(arch).get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        raise KeyError(f"{arch}.{key} is not in the arch table")
    return Fact(value=entry["value"], source=entry.get("source", "unsourced"), note=entry.get("note"),
                ref=f"{ARCH_FILE_REL}#{arch}.{key}")


def value(arch: str, key: str) -> Any:
    return fact(arch, key).value


def products(arch: str) -> list[str]:
    return list(_arch(arch).get("products", {}))


def product_fact(arch: str, product: str, key: str) -> Fact | None:
    entry = _arch(arch).get("products", {}).get(product, {}).get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        return None
    return Fact(value=entry["value"], source=entry.get("source", "unsourced"), note=entry.get("note"),
                ref=f"{ARCH_FILE_REL}#{arch}.products.{product}.{key}")


def match_product(arch: str | None, name: str | None) -> str | None:
    """Product entry for a marketing/product name ('AMD Instinct MI300X VF' -> 'MI300X', 'NVIDIA H200' ->
    'H200_SXM'); None when the name matches no entry (PCIe/NVL parts differ from the SXM entries we have)."""
    if not arch or not name or arch not in arch_names():
        return None
    up = name.upper()
    known = products(arch)
    m = re.search(r"MI\s?(\d{3}[A-Z]?)\b", up)
    if m and f"MI{m.group(1)}" in known:
        return f"MI{m.group(1)}"
    if "PCIE" in up or "NVL" in up:
        return None
    for family, key in (("H100", "H100_SXM5"), ("H200", "H200_SXM")):
        if family in up and key in known:
            return key
    return None


def product_for(arch: str, name: str | None) -> str | None:
    """match_product, else the arch's default product (DEFAULT_PRODUCT) when the table has it."""
    matched = match_product(arch, name)
    if matched:
        return matched
    default = DEFAULT_PRODUCT.get(arch)
    return default if arch in arch_names() and default in products(arch) else None


def raw(arch: str) -> dict[str, Any]:
    """The whole entry for an arch (lists such as `mfma` included), for docs and calculators."""
    return _arch(arch)
