"""The shipped exploit corpus: one YAML file per family under corpus/, each entry an Exploit."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from evokernel_mcp.integrity.models import FAMILIES, Exploit

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"


@lru_cache(maxsize=1)
def load_corpus() -> tuple[Exploit, ...]:
    """Every exploit, validated; a family file's entries must belong to that family and names are unique."""
    out: list[Exploit] = []
    for family in FAMILIES:
        path = CORPUS_DIR / f"{family}.yaml"
        for entry in yaml.safe_load(path.read_text()) or []:
            ex = Exploit.model_validate({"family": family, **entry})
            if ex.family != family:
                raise ValueError(f"{path.name}: {ex.name} says family {ex.family}")
            out.append(ex)
    names = [e.name for e in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"exploit names used twice: {dupes}")
    return tuple(out)


def select(families: list[str] | None = None, backend: str = "cpu", names: list[str] | None = None
           ) -> tuple[list[Exploit], dict[str, str]]:
    """The exploits to replay on this backend, and those left out with the reason."""
    chosen, skipped = [], {}
    for ex in load_corpus():
        if families and ex.family not in families:
            continue
        if names and ex.name not in names:
            continue
        if backend not in ex.backends:
            skipped[ex.name] = f"needs {'/'.join(ex.backends)} (this device: {backend})"
            continue
        chosen.append(ex)
    return chosen, skipped
