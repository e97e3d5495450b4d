"""The verify suite on a real GPU (CUDA or ROCm), plus a kernel that writes far out of bounds: the
server must survive it, report a GPU fault/crash, and replace the runner."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from evokernel_mcp.app import close_app
from evokernel_mcp.verify import verify_vs_pytorch

pytestmark = pytest.mark.gpu
CANDS = Path(__file__).parent / "candidates"

OOB = '''
import torch
import triton
import triton.language as tl


@triton.jit
def oob_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    # no mask, and 2**40 elements past the end: an illegal address on every GPU
    tl.store(out_ptr + offs + (1 << 40), tl.load(x_ptr + offs))


def run(x, y):
    out = torch.empty_like(x)
    oob_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
'''


@pytest.fixture(scope="module", autouse=True)
def _app():
    yield
    anyio.run(close_app)


def verify(candidate_src: str, task: str, **kw):
    kw.setdefault("seeds", 2)
    kw.setdefault("wait_s", 300)
    return anyio.run(lambda: verify_vs_pytorch(candidate_src, task=task, **kw))


@pytest.mark.parametrize("task,cand", [("softmax", "softmax_triton.py"), ("rmsnorm", "rmsnorm_triton.py"),
                                       ("vector_add", "vadd_triton.py")])
def test_correct_triton_candidates_pass_on_gpu_all_shapes(task, cand):
    r = verify((CANDS / cand).read_text(), task, shapes=["small", "medium"])
    assert r.passed is True, r
    assert r.device != "cpu" and r.device_name and all(c.deterministic for c in r.cases)


def test_wrong_candidates_fail_on_gpu():
    r = verify((CANDS / "softmax_off_by_one.py").read_text(), "softmax", shapes=["small"], seeds=1)
    assert r.passed is False and r.cases[0].first_mismatch_index is not None
    r = verify((CANDS / "vadd_half.py").read_text(), "vector_add", shapes=["small"], seeds=1)
    assert r.passed is False and r.cases[0].unwritten_count == 500


def test_hang_raise_exit_then_next_verify_succeeds_on_gpu():
    ok = (CANDS / "vadd_triton.py").read_text()
    assert verify((CANDS / "hang.py").read_text(), "vector_add", shapes=["small"], seeds=1,
                  timeout_s=5).error.kind == "timeout"
    assert verify(ok, "vector_add", shapes=["small"], seeds=1).passed is True
    assert verify((CANDS / "exits.py").read_text(), "vector_add", shapes=["small"], seeds=1).error.kind == "crash"
    assert verify(ok, "vector_add", shapes=["small"], seeds=1).passed is True


def test_out_of_bounds_write_is_survived_and_runner_replaced():
    r = verify(OOB, "vector_add", shapes=["medium"], seeds=1, timeout_s=60)
    assert r.passed is False and r.error is not None and r.error.kind in ("gpu_fault", "crash"), r
    print("OOB error reported:", r.error.kind, r.error.message[:300])
    r = verify((CANDS / "vadd_triton.py").read_text(), "vector_add", shapes=["small", "medium"], seeds=1)
    assert r.passed is True


def test_flagship_conv3d_reference_runs_at_full_size():
    cand = "import torch.nn.functional as F\n\ndef run(x, w):\n    return F.conv3d(x, w, padding=(0, 2, 2), groups=x.shape[1])\n"
    r = verify(cand, "conv3d_depthwise", seeds=1, timeout_s=600)
    assert r.passed is True and [c.shape for c in r.cases if not c.probe] == ["small", "medium", "full"], r


def test_a_triton_sources_compile_cache_does_not_reach_its_later_jobs():
    """runtime/kernel_cache.py on a real compile: what a job's process wrote to its Triton cache (its cubin, or
    anything dressed as one) is gone for the next job of the same source, which compiles again."""
    probe = """
import glob as _glob
import os as _os
_run = run


def run(x, y):
    pat = _os.environ["TRITON_CACHE_DIR"] + "/*/*.cubin"
    before = {p: _os.stat(p).st_mtime_ns for p in _glob.glob(pat)}
    out = _run(x, y)
    after = {p: _os.stat(p).st_mtime_ns for p in _glob.glob(pat)}
    print("KCACHE", "hit" if before and before == after else "miss", flush=True)
    return out
"""
    src = "# kernel cache check\n" + (CANDS / "vadd_triton.py").read_text() + probe
    first = verify(src, "vector_add", shapes=["small"], seeds=1)
    assert first.passed is True and "KCACHE miss" in first.stdout, first.stdout
    second = verify(src, "vector_add", shapes=["small"], seeds=1)
    lines = [ln for ln in second.stdout.splitlines() if ln.startswith("KCACHE")]
    # the job's first call compiles again (its later calls hit what that compile wrote, in the same job)
    assert second.passed is True and lines and lines[0] == "KCACHE miss", second.stdout
