"""Job engine + runner pool on the CPU runner: wait_s/job ids, progress, FIFO per device, cancel, and
the runner being replaced after a segfault; exceptions keep the runner."""

from __future__ import annotations

import anyio
import pytest

from evokernel_mcp.errors import NotFound
from evokernel_mcp.runtime import protocol
from evokernel_mcp.runtime.jobs import JobManager
from evokernel_mcp.runtime.submit import run_worker_job


@pytest.fixture(scope="module")
def mgr():
    m = JobManager(devices=["cpu"])
    yield m
    anyio.run(m.aclose)


def job(mgr, payload, timeout_s=20.0, wait_s=60.0, op="selftest"):
    return anyio.run(lambda: run_worker_job(kind="test", op=op, payload=payload, timeout_s=timeout_s,
                                            wait_s=wait_s, jobs=mgr))


def ping_pid(mgr) -> int:
    out = job(mgr, {}, op="ping")
    assert out.state == "done" and out.result.ok, out
    return out.result.result["pid"]


def test_ping_and_capture_keeps_protocol_clean(mgr):
    out = job(mgr, {"print": '{"event": "result", "id": 999, "result": {}}', "echo": 7})
    reply = out.result
    assert reply.ok and reply.result["echo"] == 7
    assert '"event": "result"' in reply.stdout and '"event": "result"' in reply.stderr
    assert reply.worker_info.get("torch")


def test_job_outlives_wait_s_and_result_is_fetched_later(mgr):
    seen = []

    async def main():
        out = await run_worker_job(kind="test", op="selftest", payload={"progress_steps": 4, "step_s": 0.25},
                                   timeout_s=20, wait_s=0.2, jobs=mgr)
        assert out.state in ("queued", "running") and out.result is None
        assert mgr.status(out.job_id).state in ("queued", "running")

        async def on_progress(done, total, msg):
            seen.append((done, total, msg))

        final = await mgr.wait(out.job_id, 30, on_progress=on_progress)
        return final

    final = anyio.run(main)
    assert final.state == "done" and final.result.ok
    assert seen and seen[-1][:2] == (4.0, 4.0)


def test_segfault_is_a_crash_with_the_fault_message_and_next_job_runs(mgr):
    # (hang and os._exit are covered at the verify level: tests/verify/test_verify_cpu.py)
    pid = ping_pid(mgr)
    out = job(mgr, {"segv": True})
    assert out.result.error.kind == "crash" and "SIGSEGV" in out.result.error.message
    assert "Segmentation fault" in (out.result.error.detail or "") and out.result.worker_replaced
    assert ping_pid(mgr) != pid


def test_exception_keeps_the_runner(mgr):
    pid = ping_pid(mgr)
    out = job(mgr, {"raise": "boom"})
    assert out.result.error.kind == "exception" and "boom" in out.result.error.message
    assert not out.result.worker_replaced and ping_pid(mgr) == pid


def test_fifo_per_device_and_cancel(mgr):
    async def main():
        a = await run_worker_job(kind="t", op="selftest", payload={"sleep_s": 30}, timeout_s=60, wait_s=0.3, jobs=mgr)
        b = await run_worker_job(kind="t", op="ping", payload={}, timeout_s=60, wait_s=0.3, jobs=mgr)
        assert mgr.status(a.job_id).state == "running"
        st_b = mgr.status(b.job_id)
        assert st_b.state == "queued" and st_b.queue_position == 0
        st_a = await mgr.cancel(a.job_id)
        assert st_a.state == "cancelled" and st_a.error.kind == "cancelled"
        return await mgr.wait(b.job_id, 60)

    out_b = anyio.run(main)
    assert out_b.state == "done" and out_b.result.ok


def test_unknown_job_and_op(mgr):
    with pytest.raises(NotFound):
        mgr.status("job-000000000000")
    out = job(mgr, {}, op="no_such_op")
    assert out.result.error.kind == "exception" and "unknown runner op" in out.result.error.message


def test_protocol_decoding_is_a_closed_set():
    assert protocol.decode_event(protocol.encode({"event": "ready", "pid": 1, "device": "cpu"})).pid == 1
    for bad in (b"hello\n", b'{"event": "launch"}\n', b"[1]\n", b'{"event": "ready", "pid": "one", "device": "cpu"}\n',
                b'{"event": "result", "id": 1, "result": {}, "extra": 1}\n'):
        with pytest.raises(protocol.DecodeError):
            protocol.decode_event(bad)
    assert protocol.classify_text("RuntimeError: CUDA error: an illegal memory access was encountered") == "gpu_fault"
    assert protocol.classify_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate") == "oom"
    assert protocol.classify_text("ValueError: shapes differ") is None


def test_op_log_sums_quick_transfer_notes_and_keeps_the_stages():
    from evokernel_mcp.runtime.pool import _events_text

    chatter = [f"case 0.0{i % 3} s in the child; moved arena 8 MiB in 0.01 s" for i in range(60)]
    text = _events_text(["take (bench): 1 ready", *chatter, "load 2.50 s in the child; moved arena 8 MiB in 0.30 s",
                         "benchmark medium: done at 0.64 s"])
    assert "benchmark medium: done at 0.64 s" in text and "load 2.50 s in the child" in text
    assert "60 quick child requests with transfers: 0.60 s in the children, 0.60 s moving (moved arena 480 MiB)" in text
    routes = _events_text(["run 0.10 s in the child; moved vmm 2048 MiB in 0.20 s, arena 3 MiB in 0.00 s"])
    assert "moved vmm 2048 MiB, arena 3 MiB" in routes, "the routes stay: a test reads that big tensors took vmm"
    assert "case 0.00 s" not in text
