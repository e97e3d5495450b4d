"""Big tensors by fd (runtime/courier.py) beside the frames pipe: what goes by memfd, what stays in the
pipe, and that the receiver rejects whatever a hostile sender puts on the socket (a pipe's fd, a file
shorter than the header says, fds out of order, an fd the header does not announce). The CUDA (VMM)
route is exercised by the GPU tests; here the host route and every check around it."""

from __future__ import annotations

import io
import os
import re
import socket

import anyio
import pytest
import torch

from evokernel_mcp.runtime import courier, frames

BIG = courier.THRESHOLD // 4 + 1024  # float32 elements: just over the threshold


def _pair():
    a, b = courier.pair()
    return courier.Courier(a), courier.Courier(b)


def _roundtrip(msg, tx: courier.Courier, rx: courier.Courier):
    buf = io.BytesIO()
    frames.write(buf, msg, tx)
    buf.seek(0)
    return frames.read(buf, max_bytes=1 << 40, courier=rx), buf.getvalue()


def test_big_host_tensors_go_by_memfd_small_ones_by_pipe_and_arrive_intact():
    tx, rx = _pair()
    big = torch.randn(BIG)
    ints = torch.arange(BIG, dtype=torch.int64).reshape(2, -1)
    small = torch.randn(7)
    got, wire = _roundtrip({"out": (big, [ints, small]), "n": 3}, tx, rx)
    assert torch.equal(got["out"][0], big) and torch.equal(got["out"][1][0], ints)
    assert torch.equal(got["out"][1][1], small) and got["n"] == 3
    assert len(wire) < 4096, "the big tensors' bytes must not be in the pipe"
    assert tx.stats["memfd_bytes"] == big.numel() * 4 + ints.numel() * 8
    assert tx.stats["pipe_bytes"] == 28
    assert rx.stats["memfd_bytes"] == tx.stats["memfd_bytes"]


def test_without_a_courier_everything_stays_in_the_pipe():
    buf = io.BytesIO()
    big = torch.randn(BIG)
    frames.write(buf, {"x": big})
    assert len(buf.getvalue()) > big.numel() * 4
    buf.seek(0)
    assert torch.equal(frames.read(buf, max_bytes=1 << 40)["x"], big)


def test_a_message_of_more_tensors_than_a_reader_takes_is_refused_by_its_sender_before_a_byte_is_written():
    t = torch.zeros(1)
    buf = io.BytesIO()
    with pytest.raises(frames.FrameError, match=f"{frames.MAX_TENSORS + 1} tensors in one message"):
        frames.write(buf, {"out": tuple(t for _ in range(frames.MAX_TENSORS + 1))})
    assert buf.getvalue() == b""
    frames.write(buf, {"out": tuple(t for _ in range(3))})  # under the limit: as before
    buf.seek(0)
    assert len(frames.read(buf, max_bytes=1 << 20)["out"]) == 3


def test_a_header_announcing_an_fd_on_a_channel_without_socket_is_refused():
    tx, _ = _pair()
    buf = io.BytesIO()
    frames.write(buf, {"x": torch.randn(BIG)}, tx)
    buf.seek(0)
    with pytest.raises(frames.FrameError, match="without an fd socket"):
        frames.read(buf, max_bytes=1 << 40)


def _header(nbytes: int, via: str = "memfd", **extra) -> io.BytesIO:
    import json

    spec = {"dtype": "uint8", "shape": [nbytes], "nbytes": nbytes, "via": via, **extra}
    return io.BytesIO(json.dumps({"msg": {"__t__": 0}, "tensors": [spec]}).encode() + b"\n")


def _send_raw_fd(sock: socket.socket, fd: int, tag: int = 0) -> None:
    import array

    sock.sendmsg([tag.to_bytes(8, "little")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])


@pytest.mark.parametrize("attack", ["pipe_fd", "short_file", "out_of_order", "unknown_via", "huge_claim"])
def test_hostile_fds_are_a_frame_error_never_a_crash_or_a_read_past_the_end(attack):
    a, b = courier.pair()
    rx = courier.Courier(a)
    n = 4096
    if attack == "pipe_fd":
        r, w = os.pipe()
        _send_raw_fd(b, r)
        os.close(r)
        os.close(w)
        buf = _header(n)
    elif attack in ("short_file", "huge_claim"):
        fd = os.memfd_create("short")
        os.write(fd, b"x" * 100)
        _send_raw_fd(b, fd)
        os.close(fd)
        buf = _header(n if attack == "short_file" else 1 << 40)
    elif attack == "out_of_order":
        fd = os.memfd_create("ok")
        os.ftruncate(fd, n)
        _send_raw_fd(b, fd, tag=5)
        os.close(fd)
        buf = _header(n)
    else:
        fd = os.memfd_create("ok")
        os.ftruncate(fd, n)
        _send_raw_fd(b, fd)
        os.close(fd)
        buf = _header(n, via="telepathy")
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(frames.FrameError):
        frames.read(buf, max_bytes=1 << 41 if attack == "huge_claim" else 1 << 20, courier=rx)
    assert len(os.listdir("/proc/self/fd")) == before, "a received fd was left open"
    b.close()
    rx.close()


def test_an_announced_fd_that_never_comes_is_end_of_stream_when_the_peer_goes():
    a, b = courier.pair()
    rx = courier.Courier(a)
    b.close()
    with pytest.raises(EOFError):
        frames.read(_header(4096), max_bytes=1 << 20, courier=rx)


REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return (x * y + 1.0, torch.argmax(x, dim=1))

def get_inputs():
    return [torch.randn(512, 1024), torch.randn(512, 1024)]

def get_init_inputs():
    return []
"""


def _verify_same_and_wrong_and_routes(caplog, ref: str, wrong_ref: str, wait_s: float) -> str:
    """Verify the same code (must pass) and a wrong copy (must fail, not error); the transfers the
    server logged (the job events' 'moved ...' lines), joined."""
    import logging

    from evokernel_mcp.app import close_app
    from evokernel_mcp.verify import verify_vs_pytorch

    caplog.set_level(logging.INFO, logger="evokernel_mcp.runtime.pool")
    tail = "\nclass ModelNew(Model):\n    pass\n"

    async def both():
        same = await verify_vs_pytorch(ref + tail, reference=ref, seeds=2, wait_s=wait_s)
        wrong = await verify_vs_pytorch(wrong_ref + tail, reference=ref, seeds=2, wait_s=wait_s)
        return same, wrong

    try:
        same, wrong = anyio.run(both)
    finally:
        anyio.run(close_app)
    assert same.passed is True, same
    assert wrong.passed is False and wrong.error is None, wrong
    return "\n".join(r.getMessage() for r in caplog.records if "moved" in r.getMessage())


def test_verify_with_megabyte_tensors_through_the_sandbox_passes_same_code_and_fails_a_wrong_one(caplog):
    """4 MiB inputs and outputs cross by memfd between the runner and the sandboxed children."""
    moved = _verify_same_and_wrong_and_routes(caplog, REF, REF.replace("x * y + 1.0", "x * y + 1.001"), 180)
    assert "memfd" in moved, moved
    # the op's own account comes first in its events: requests to children, their time, the runner's CPU time
    m = re.search(r"op verify: ([\d.]+) s, (\d+) child requests ([\d.]+) s \(([\d.]+) s in the children\), "
                  r"runner CPU ([\d.]+) s", moved)
    assert m and int(m.group(2)) >= 4 and float(m.group(3)) <= float(m.group(1)), moved


# ---------------------------------------------------------------- CUDA: device to device (VMM)
GPU_REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return x * y + 1.0

def get_inputs():
    return [torch.randn(8192, 16384), torch.randn(8192, 16384)]

def get_init_inputs():
    return []
"""


@pytest.mark.gpu
def test_gpu_vmm_roundtrip_in_process_and_hostile_handles_are_frame_errors(monkeypatch):
    from evokernel_mcp.runtime import cuda_vmm

    if not cuda_vmm.available():
        pytest.skip("no CUDA VMM on this device")
    monkeypatch.setattr(courier, "ARENA_BYTES", 0)  # an allocation per tensor (the arena has its own test)
    tx, rx = _pair()
    x = torch.randn(BIG * 3, device="cuda").to(torch.bfloat16).reshape(3, -1)
    got, wire = _roundtrip({"x": x}, tx, rx)
    assert got["x"].device.type == "cuda" and torch.equal(got["x"], x) and len(wire) < 4096
    assert tx.stats["vmm_bytes"] == x.numel() * 2
    # a memfd announced as device memory, and a real allocation claimed bigger than it is
    a, b = courier.pair()
    hostile = courier.Courier(a)
    fd = os.memfd_create("not-cuda")
    os.ftruncate(fd, 4 << 20)
    _send_raw_fd(b, fd)
    os.close(fd)
    with pytest.raises(frames.FrameError):
        frames.read(_header(4 << 20, via="vmm", alloc=4 << 20), max_bytes=1 << 30, courier=hostile)
    fd, size, mapping = cuda_vmm.export(torch.ones(1 << 20, dtype=torch.uint8, device="cuda"))
    _send_raw_fd(b, fd, tag=1)
    os.close(fd)
    with pytest.raises(frames.FrameError):
        frames.read(_header(size * 4, via="vmm", alloc=size * 4), max_bytes=1 << 34, courier=hostile)
    mapping.release()


def _adopter(monkeypatch):
    """A child process whose courier adopts what the runner hands over (_ADOPTER), and the runner's courier."""
    import subprocess
    import sys

    from evokernel_mcp.runtime import cuda_vmm

    if not cuda_vmm.available():
        pytest.skip("no CUDA VMM on this device")
    monkeypatch.setattr(courier, "ARENA_BYTES", 0)
    a, b = courier.pair()
    proc = subprocess.Popen([sys.executable, "-c", _ADOPTER, str(b.fileno())], pass_fds=(b.fileno(),),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    b.close()
    return proc, courier.Courier(a)


def _line(proc) -> dict:
    import json

    return json.loads(proc.stdout.readline())


_ADOPTER = """
import json, socket, sys, torch
from evokernel_mcp.runtime import courier, frames
c = courier.Courier(socket.socket(fileno=int(sys.argv[1])), adopt=True)
free = lambda: torch.cuda.mem_get_info()[0]
torch.cuda.init()
print(json.dumps({"ready": free()}), flush=True)
got = frames.read(sys.stdin.buffer, max_bytes=1 << 40, courier=c)
x = got["x"]
held, first = free(), int(x[:4096].sum().item())
got = x = None
print(json.dumps({"held": held, "after": free(), "first": first}), flush=True)
"""


@pytest.mark.gpu
def test_gpu_a_child_adopts_what_the_runner_sends_and_the_runner_can_take_it_on_the_host(monkeypatch):
    """A child's courier (adopt=True) keeps the runner's exported allocation as its tensor: one copy on the
    device, not two, given back when the tensor goes; the runner asking for the host gets host memory."""
    proc, runner = _adopter(monkeypatch)
    n = 1 << 30
    x = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    ready = _line(proc)["ready"]
    with runner.handing_over():
        frames.write(proc.stdin, {"x": x}, runner)
    proc.stdin.flush()
    rep = _line(proc)
    proc.wait(timeout=60)
    assert rep["first"] == int(x[:4096].sum().item())
    assert ready - rep["held"] < 1.5 * n, "the child's tensor is the runner's export, not a copy of it"
    assert rep["after"] - rep["held"] > 0.9 * n, "the adopted allocation goes with its tensor"
    rx, tx = _pair()
    buf = io.BytesIO()
    frames.write(buf, {"y": x}, tx)
    buf.seek(0)
    host = frames.read(buf, max_bytes=1 << 40, device="cpu", courier=rx)
    assert host["y"].device.type == "cpu" and torch.equal(host["y"], x.cpu())
    runner.close()


@pytest.mark.gpu
def test_gpu_a_host_tensor_handed_over_arrives_on_the_childs_device_as_one_copy(monkeypatch):
    """The runner keeps a big shape's inputs on the host while the benchmark's arms get theirs: handed over, a
    host tensor is exported to the device (one H2D copy) and adopted there, so the runner's device holds none."""
    proc, runner = _adopter(monkeypatch)
    n = 1 << 30
    x = torch.randint(0, 255, (n,), dtype=torch.uint8)
    ready = _line(proc)["ready"]
    with runner.handing_over():
        assert runner.route(x) == "vmm"
        frames.write(proc.stdin, {"x": x}, runner)
    proc.stdin.flush()
    rep = _line(proc)
    proc.wait(timeout=60)
    assert rep["first"] == int(x[:4096].sum().item())
    assert 0.9 * n < ready - rep["held"] < 1.5 * n, "one device copy, the child's"
    assert runner.route(x) == "memfd", "not handed over: a host tensor goes by memfd as before"
    runner.close()


@pytest.mark.gpu
def test_gpu_verify_with_gigabyte_tensors_moves_them_device_to_device(caplog):
    moved = _verify_same_and_wrong_and_routes(caplog, GPU_REF, GPU_REF.replace("+ 1.0", "+ 1.01"), 300)
    assert "vmm" in moved, moved


@pytest.mark.gpu
def test_gpu_arena_is_mapped_once_reused_grown_and_never_read_past():
    """CUDA tensors up to ARENA_BYTES per message go through one arena per direction: its fd crosses once,
    later messages reuse it (no driver calls), a message that needs more gets a new one, and a reference to an
    arena never sent, or past its end, is a frame error."""
    from evokernel_mcp.runtime import cuda_vmm

    if not cuda_vmm.available() or courier.ARENA_BYTES < (8 << 20):
        pytest.skip("no CUDA VMM on this device, or the arena is off")
    tx, rx = _pair()
    for i in range(3):  # the same arena each time, new bytes each time
        x = torch.randn(BIG, device="cuda") + i
        y = torch.arange(BIG, device="cuda", dtype=torch.int32) * (i + 1)
        got, wire = _roundtrip({"x": x, "y": (y, torch.ones(3, device="cuda"))}, tx, rx)
        assert torch.equal(got["x"], x) and torch.equal(got["y"][0], y) and got["y"][1].sum().item() == 3
        assert (b'"new"' in wire) == (i == 0) and b'"arena"' in wire
        assert rx._peer[0] == 1
    assert tx.stats["arena_bytes"] == 3 * (x.numel() * 4 + y.numel() * 4)
    big = torch.randn(3 * BIG, device="cuda")  # more than the arena holds now: a new, bigger one
    got, wire = _roundtrip({"a": big, "b": x}, tx, rx)
    assert torch.equal(got["a"], big) and torch.equal(got["b"], x) and rx._peer[0] == 2 and b'"new"' in wire
    huge = torch.empty(courier.ARENA_BYTES + 4096, dtype=torch.uint8, device="cuda").fill_(7)
    got, _ = _roundtrip({"h": huge}, tx, rx)  # bigger than any arena: its own allocation, as before
    assert torch.equal(got["h"], huge) and tx.stats["vmm_bytes"] == huge.numel()
    for bad in ({"arena": 9, "offset": 0, "alloc": rx._peer[1].size},  # never sent
                {"arena": 2, "offset": rx._peer[1].size - 512, "alloc": rx._peer[1].size},  # runs past its end
                {"arena": 2, "offset": -512, "alloc": rx._peer[1].size},
                {"arena": 2, "offset": "0", "alloc": rx._peer[1].size}):
        with pytest.raises(frames.FrameError):
            frames.read(_header(4096, via="arena", **bad), max_bytes=1 << 30, courier=rx)
    tx.close(), rx.close()
    assert tx._arena is None and rx._peer is None


def test_hostile_arena_references_are_frame_errors_before_any_driver_call():
    """An arena size a peer claims is checked before ctypes sees it: a Python int over 64 bits would be cut to
    its low bits, the driver would map that little, and our bounds checks would trust the claimed size."""
    from evokernel_mcp.runtime import cuda_vmm

    a, b = courier.pair()
    rx = courier.Courier(a)
    for bad in ({"arena": 1, "offset": 0, "alloc": 2**64 + (2 << 20), "new": True},
                {"arena": 1, "offset": -512, "alloc": 2 << 20},
                {"arena": 1, "offset": 0, "alloc": 2 << 20},  # never sent here
                {"arena": True, "offset": 0, "alloc": 2 << 20},
                {"arena": 1, "offset": 0, "alloc": 0}):
        with pytest.raises(frames.FrameError):
            frames.read(_header(4096, via="arena", **bad), max_bytes=1 << 30, courier=rx)
    for size in (2**64 + (2 << 20), cuda_vmm.MAX_ALLOC + (2 << 20), 0, -(2 << 20), (2 << 20) + 1, True, 2.0):
        with pytest.raises(cuda_vmm.VmmError):
            cuda_vmm.check_peer_size(size, 2 << 20)
    assert cuda_vmm.check_peer_size(4 << 20, 2 << 20) == 4 << 20


def test_a_host_tensor_goes_by_vmm_only_when_handed_over_and_vmm_is_there():
    """Handed over (a benchmark arm's inputs), a big host tensor takes the VMM route: the export copies it to the
    device and the arm adopts it. Otherwise, or without VMM (the CPU path), it goes by memfd as always."""
    tx, _ = _pair()
    big = torch.randn(BIG)
    tx.vmm = True
    assert tx.route(big) == "memfd"
    with tx.handing_over():
        assert tx.route(big) == "vmm"
        assert tx.route(torch.randn(3)) is None
    assert tx.route(big) == "memfd"
    tx.vmm = False
    with tx.handing_over():
        assert tx.route(big) == "memfd"


def test_sent_fds_says_whether_the_message_being_written_sent_any():
    """child.serve stops serving when a reply failed after some of its fds went out (the runner's count of fds
    would lag ours from then on); sent_fds is how it knows."""
    tx, rx = _pair()
    tx.plan([])
    assert not tx.sent_fds()
    big = torch.randn(BIG)
    tx.plan([big])
    tx.send(big, tx.route(big, 0), 0)  # host tensor: a memfd
    assert tx.sent_fds()
    tx.plan([torch.randn(3)])  # the next message starts clean
    assert not tx.sent_fds()


def test_no_room_for_the_second_device_copy_of_an_export_sends_through_host_memory(monkeypatch):
    """A VMM export makes a second device copy; where cuMemCreate finds no room for it, the tensor goes by memfd
    (the receiver gets it all the same) instead of failing the job; any other driver error stays an error."""
    from evokernel_mcp.runtime import cuda_vmm

    def full(t):
        raise cuda_vmm.VmmError("cuMemCreate failed: CUDA error 2 (out of memory)")
    monkeypatch.setattr(cuda_vmm, "export", full)
    tx, rx = _pair()
    t = torch.randn(BIG)
    extra = tx.send(t, "vmm")
    assert extra == {"via": "memfd"} and tx.stats["vmm_fallback_bytes"] == t.numel() * 4
    got = rx.recv({"nbytes": t.numel() * 4, **extra}, None).view(torch.float32)
    assert torch.equal(got, t)

    def broken(t):
        raise cuda_vmm.VmmError("cuMemMap failed: CUDA error 1 (invalid argument)")
    monkeypatch.setattr(cuda_vmm, "export", broken)
    with pytest.raises(cuda_vmm.VmmError):
        tx.send(t, "vmm")


def test_no_room_for_an_export_in_a_sender_that_may_not_write_a_file_that_big_sends_through_the_pipe(monkeypatch):
    """A sandboxed reference under a file-size limit below the tensor's size, on a device with no room for the
    export's second copy: its allocator cache is emptied and the export tried again, then the pipe carries the
    tensor (never an out-of-memory for a transfer between our processes)."""
    from evokernel_mcp.runtime import cuda_vmm

    tries = []

    def full(t):
        tries.append(1)
        raise cuda_vmm.VmmError("cuMemCreate failed: CUDA error 2 (out of memory)")
    monkeypatch.setattr(cuda_vmm, "export", full)
    monkeypatch.setattr(courier.Courier, "_may_write", staticmethod(lambda t: False))
    monkeypatch.setattr(courier.Courier, "route", lambda self, t, index=None: "vmm" if t.numel() >= BIG else None)
    tx, rx = _pair()
    t, small = torch.randn(BIG), torch.randn(5)
    got, wire = _roundtrip({"x": t, "y": small}, tx, rx)
    assert torch.equal(got["x"], t) and torch.equal(got["y"], small)
    assert len(tries) == 2, "one more export after the allocator cache was emptied"
    assert tx.stats["vmm_to_pipe_bytes"] == t.numel() * 4 and len(wire) > t.numel() * 4, "the bytes came by pipe"


def test_a_tensor_received_by_fd_is_no_view_so_giving_it_other_storage_frees_the_bytes():
    """A parked benchmark arm swaps its inputs' storage for host buffers (blocks.BlockTimer.park): a received
    tensor that were a view of its uint8 bytes would keep them alive through its base."""
    import gc
    import weakref

    tx, rx = _pair()
    x = torch.randn(BIG).reshape(2, -1)
    got, _ = _roundtrip({"x": x}, tx, rx)
    t = got["x"]
    assert t._base is None and torch.equal(t, x) and t.is_contiguous()
    storage = weakref.ref(t.untyped_storage())
    del got
    t.data = torch.zeros_like(x)
    gc.collect()
    assert storage() is None, "the received bytes are gone once the tensor has other storage"


def test_received_bytes_that_do_not_make_the_announced_shape_are_refused_as_before():
    from evokernel_mcp.runtime.frames import _typed

    raw = torch.zeros(64, dtype=torch.uint8)
    assert _typed(raw, torch.float32, [4, 4]).shape == (4, 4)
    for shape in ([4, 3], [4, 5]):  # fewer elements than the bytes hold, or more
        with pytest.raises(RuntimeError):
            _typed(raw, torch.float32, shape)
