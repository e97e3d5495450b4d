"""The runtime: events are matched to their request, a candidate that patches torch
or the harness fails and its runner child is replaced, capture files are read by their tail only."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import anyio
import pytest

from evokernel_mcp.runtime import protocol
from evokernel_mcp.runtime.jobs import JobManager
from evokernel_mcp.runtime.ops import make_call
from evokernel_mcp.runtime.pool import _read_capture
from evokernel_mcp.runtime.submit import run_worker_job
from evokernel_mcp.tasks import load_task
from evokernel_mcp.verify import build_payload

CANDS = Path(__file__).resolve().parent.parent / "verify" / "candidates"

# A stand-in runner: says ready, then answers each request first with an event for another request (a
# stale or forged line, e.g. written by a candidate to the protocol pipe), then with the right one.
FAKE_WORKER = r'''
import json, sys
print(json.dumps({"event": "ready", "pid": 1, "device": "cpu", "info": {}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    print(json.dumps({"event": "result", "id": 999999, "result": {"forged": True}}), flush=True)
    print(json.dumps({"event": "result", "id": req["id"], "result": {"real": True}}), flush=True)
'''

# Makes the reference agree with it (softmax -> zeros) by patching torch at import.
PATCHER = '''
import torch
torch.softmax = lambda x, dim=-1, **kw: torch.zeros_like(x)

def run(x):
    return torch.zeros_like(x)
'''


@pytest.fixture(scope="module")
def mgr():
    m = JobManager(devices=["cpu"])
    yield m
    anyio.run(m.aclose)


def _verify(mgr, task: str, candidate: str):
    payload = build_payload(load_task(task), candidate, ["small"], 1, None, False)
    return anyio.run(lambda: run_worker_job(kind="verify", op="verify", payload=payload, timeout_s=60, wait_s=120,
                                            jobs=mgr)).result


def test_event_for_another_request_is_never_taken_as_the_result():
    from scripted_runner import exchange_with_script

    reply = exchange_with_script(FAKE_WORKER, make_call(5, "ping", {}, None), register=True)
    assert not reply.ok and reply.result is None and reply.error.kind == "crash" and reply.worker_replaced
    assert "999999" in reply.error.message


def test_candidate_patching_torch_fails_and_does_not_poison_the_next_job(mgr):
    bad = _verify(mgr, "softmax", PATCHER)  # the patch lives and dies in the candidate's own process
    assert bad.ok and bad.result["cases"] and bad.result["cases"][0]["passed"] is False, bad.result
    good = _verify(mgr, "softmax", (CANDS / "softmax_triton.py").read_text())
    assert good.ok and good.result["cases"][0]["passed"] is True, good.result


def test_capture_is_read_by_its_tail_only(tmp_path):
    big = "x" * (24 << 20) + "\nthe last line\n"
    (tmp_path / "stdout.txt").write_text(big)
    tracemalloc.start()
    try:
        out, err = _read_capture(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.endswith("the last line\n") and err == ""
    assert len(out) < protocol.OUTPUT_TAIL_CHARS + 100 and "cut" in out
    assert peak < 4 << 20, f"read {peak} bytes into memory for an 8000-char tail"


def test_read_tail_small_file_is_verbatim(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("héllo\n")
    assert protocol.read_tail(p) == "héllo\n"
    assert protocol.read_tail(tmp_path / "missing.txt") == ""
