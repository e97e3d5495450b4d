"""Helpers of the KernelBench CI tests: where the level-1 files are (../shared/kernelbench/level1, MIT,
read in place, never copied into the repo), the same-code and perturbed candidates, one verify call."""

from __future__ import annotations

from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[2]
_PLACES = (REPO.parent / "shared" / "kernelbench" / "level1", Path("/work/shared/kernelbench/level1"))

from evokernel_mcp.kb_candidates import PERTURB, perturbed, same_code  # noqa: E402,F401 - re-exported


def level1() -> Path | None:
    return next((p for p in _PLACES if p.is_dir() and any(p.glob("*.py"))), None)


def problem(number: int) -> tuple[str, str]:
    """(file name, source) of level-1 problem `number`."""
    d = level1()
    assert d is not None
    (path,) = list(d.glob(f"{number}_*.py"))
    return path.name, path.read_text()


def verify(candidate: str, reference: str, **kw):
    from evokernel_mcp.verify import verify_vs_pytorch

    kw.setdefault("seeds", 1)
    kw.setdefault("wait_s", 300)
    kw.setdefault("timeout_s", 280)
    return anyio.run(lambda: verify_vs_pytorch(candidate, reference=reference, **kw))


def summary(r) -> str:
    err = f" error {r.error.kind}: {r.error.message[:300]}" if r.error else ""
    cases = "; ".join(f"{'probe ' if c.probe else ''}seed {c.seed}: {'pass' if c.passed else 'FAIL'} "
                      f"({c.mismatches} mismatches, {c.bar}, {c.note})" for c in r.cases)
    return f"passed={r.passed}{err} [{cases}]"
