"""A small docs tree in tmp, served through paths.RESOURCES_DIR (the real tree is in resources/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel_mcp import paths

INDEX = """\
# Tiny map

The map of the tiny docs. It links every page.

- [LDS](lds.md#lds-size-per-arch) and [scheduling](sched.md)
- [kernels](../reference_kernels/index.md)
"""

LDS = """\
# LDS: local data share

Local data share per CU, banks and widths.

## LDS size per arch

gfx942 has 64 KB of LDS per CU [S1]. gfx950 has 160 KB of LDS per CU [S1].

### Allocation granule

The granule is 512 bytes on gfx942 [S1] (and 1280 bytes on gfx950).

## Bank conflicts: `ds_read_b128` & friends!

LDS has 32 banks of 4 bytes [S1]. Padding avoids conflicts; see [size](#lds-size-per-arch).

## Notes

First notes.

## Notes

Second notes.

```
code 123 is not a fact
```

## Sources

- S1: ROCm GPU hardware specifications table
"""

SCHED = """\
# Scheduling

Waits and scheduling barriers.

## s_waitcnt counters

`s_waitcnt lgkmcnt(0)` waits for LDS, GDS, constant and message operations.

## sched_group_barrier mask bits

The mask of sched_group_barrier selects instruction classes: 0x8 is MFMA, 0x100 is DS read.
"""

KERNELS = """\
# Reference kernels

- [vector add](vadd/README.md)
"""

VADD = """\
# Vector add

A memory-bound kernel. Source: [kernel.py](kernel.py).
"""


def make_tree(base: Path) -> Path:
    files = {
        "gpu_arch/index.md": INDEX, "gpu_arch/lds.md": LDS, "gpu_arch/sched.md": SCHED,
        "reference_kernels/index.md": KERNELS, "reference_kernels/vadd/README.md": VADD,
        "reference_kernels/vadd/kernel.py": "def add(x, y):\n    return x + y\n",
    }
    for rel, text in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return base


@pytest.fixture
def docs_tree(tmp_path, monkeypatch) -> Path:
    base = make_tree(tmp_path / "resources")
    monkeypatch.setattr(paths, "RESOURCES_DIR", base)
    return base
