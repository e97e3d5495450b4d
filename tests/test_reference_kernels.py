"""Every reference kernel's own tests pass (run in a subprocess: they set TRITON_INTERPRET=1 on a CPU host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "resources" / "reference_kernels"
KERNEL_DIRS = sorted(p.parent for p in ROOT.glob("*/test_*.py"))


def test_there_are_reference_kernels_with_tests():
    assert KERNEL_DIRS, "no reference kernel folder has a test_*.py"


@pytest.mark.parametrize("kdir", KERNEL_DIRS, ids=[p.name for p in KERNEL_DIRS])
def test_reference_kernel_tests_pass(kdir):
    env = dict(os.environ)
    env.setdefault("TRITON_INTERPRET", "1")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(kdir)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=kdir)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
