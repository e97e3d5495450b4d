"""GPU faults, on the H200: an illegal memory access, a device OOM and work left on a side stream
must each fail their own job with the device's reason and leave the next jobs' verdicts right."""

from __future__ import annotations

import pytest
from faultkit import assert_next_jobs_right, call, verify

pytestmark = [pytest.mark.gpu, pytest.mark.cuda]

ILLEGAL = '''
import torch, triton, triton.language as tl

@triton.jit
def bad(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + (1 << 36), tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

def run(x, y):
    out = torch.empty_like(x)
    bad[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    torch.cuda.synchronize()
    return out
'''
OOM = "import torch\ndef run(x, y):\n    big = torch.empty(1 << 40, device='cuda')\n    return x + y\n"
SIDE = ("import torch\n_s = torch.cuda.Stream()\n\ndef run(x, y):\n    with torch.cuda.stream(_s):\n"
        "        out = torch.add(x, y)\n        for _ in range(20):\n            out = out * 1.0\n    return out\n")


def test_fault_illegal_memory_access(server):
    r = verify(server, ILLEGAL)
    body = r.structured_content
    assert body["passed"] is False and body["error"]["kind"] in ("gpu_fault", "crash", "exception"), body
    assert_next_jobs_right(server)


def test_fault_device_oom(server):
    r = verify(server, OOM)
    body = r.structured_content
    assert body["passed"] is False and body["error"]["kind"] in ("oom", "exception"), body
    assert_next_jobs_right(server)


def test_fault_work_left_on_a_side_stream_is_invalid(server):
    r = call(server, "benchmark", {"task": "vector_add", "candidate": SIDE, "shapes": ["medium"], "max_time_s": 0.5,
                                    "wait_s": 300})
    res = r.structured_content["results"][0]
    assert res["valid"] is False and res.get("speedup") is None, res
    assert res["invalid_reason"] in ("device_work_outside_timed_window", "work_pending_at_return",
                                     "wrong_output_in_timed_call", "wrong_output_after_timing", "timer_fallback"), res
    assert_next_jobs_right(server)
