"""Helpers of the KernelBench CI tests: where the level-1 files are (../shared/kernelbench/level1, MIT,
read in place, never copied into the repo), the same-code and perturbed candidates, one verify call."""

from __future__ import annotations

from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[2]
_PLACES = (REPO.parent / "shared" / "kernelbench" / "level1", Path("/work/shared/kernelbench/level1"))

# output * 1.01 + 1e-3 for floating outputs (Python floats too), index + 1 for integer ones
PERTURB = '''
def _evk_perturb(o):
    if isinstance(o, torch.Tensor):
        return o * 1.01 + 1e-3 if o.is_floating_point() else o + 1
    if isinstance(o, (tuple, list)):
        return type(o)(_evk_perturb(v) for v in o)
    return o * 1.01 + 1e-3 if isinstance(o, float) else o


class ModelNew(Model):
    def forward(self, *args, **kwargs):
        return _evk_perturb(super().forward(*args, **kwargs))
'''


def level1() -> Path | None:
    return next((p for p in _PLACES if p.is_dir() and any(p.glob("*.py"))), None)


def problem(number: int) -> tuple[str, str]:
    """(file name, source) of level-1 problem `number`."""
    d = level1()
    assert d is not None
    (path,) = list(d.glob(f"{number}_*.py"))
    return path.name, path.read_text()


def same_code(src: str) -> str:
    return src + "\nclass ModelNew(Model):\n    pass\n"


def perturbed(src: str) -> str:
    return src + PERTURB


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
