"""Big tensors by file descriptor beside the frames pipe (frames.py): a unix socket between the runner and
one sandboxed child carries one fd per big tensor (SCM_RIGHTS).

- A CUDA tensor travels as a VMM allocation (cuda_vmm.py): device to device, no host copy, whatever the
  PID namespaces. The receiver copies it into memory it owns and releases the mapping; the sender keeps
  its allocation until the peer's next message (by then the peer has copied it), then frees it.
- A host tensor (or a CUDA tensor where VMM is not available) travels as a memfd: one copy in, one out.
  A sandboxed sender whose file-size limit is below the tensor's size uses the pipe instead.
- Small tensors stay in the pipe: an fd costs more than it saves below THRESHOLD.

The receiver trusts nothing: a missing fd, a file that is not a regular one or is shorter than the
header says, an allocation that does not hold the bytes, a sequence number out of order: FrameError
for that message, the sender's job ends, and nothing is ever read beyond what was checked (pread, not
mmap: a file shrunk under us gives a short read, never SIGBUS).
"""

from __future__ import annotations

import array
import os
import resource
import socket
import stat
import time
from typing import Any

THRESHOLD = int(os.environ.get("EVOKERNEL_FD_THRESHOLD", str(1 << 20)))
_CHUNK = 1 << 30
_TAG = 8  # bytes of sequence number sent with each fd
HOLD = os.environ.get("EVOKERNEL_VMM_HOLD", "0") == "1"


class CourierError(Exception):
    """What the peer sent by fd does not check out (frames turns this into a FrameError)."""


class Courier:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._out = 0  # sequence numbers: every fd carries its own, checked against the order of the specs
        self._in = 0
        self._held: list[Any] = []  # exported VMM allocations the peer may still be copying
        self._vmm: bool | None = None
        self.stats: dict[str, float] = {}

    # ---------------------------------------------------------------- sending
    def _use_vmm(self) -> bool:
        if self._vmm is None:
            from evokernel_mcp.runtime import cuda_vmm

            self._vmm = cuda_vmm.available()
        return self._vmm

    def route(self, t) -> str | None:
        """'vmm', 'memfd' or None (the pipe) for a tensor about to be sent."""
        nbytes = t.numel() * t.element_size()
        if nbytes < THRESHOLD:
            return None
        if t.device.type == "cuda" and self._use_vmm():
            return "vmm"
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and nbytes > soft:
            return None  # a sandboxed sender may not write a file that big: the pipe takes it
        return "memfd"

    def _send_fd(self, fd: int) -> None:
        self.sock.sendmsg([self._out.to_bytes(_TAG, "little")],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        self._out += 1

    def send(self, t, via: str) -> dict[str, Any]:
        """Send the tensor's bytes by fd; the extra fields its spec carries."""
        import torch

        t0 = time.perf_counter()
        if via == "vmm":
            from evokernel_mcp.runtime import cuda_vmm

            fd, size, mapping = cuda_vmm.export(t)
            try:
                self._send_fd(fd)
            finally:
                os.close(fd)
                # The fd in flight (then the peer's import) holds the allocation: the driver frees it once
                # every handle, its shareable fd included, is gone. Holding our mapping until the peer
                # answers (EVOKERNEL_VMM_HOLD=1) would pin a second copy of every big tensor meanwhile.
                if HOLD:
                    self._held.append(mapping)
                else:
                    mapping.release()
            extra: dict[str, Any] = {"via": "vmm", "alloc": size}
        else:
            flat = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            view = memoryview(flat.numpy()).cast("B")
            fd = os.memfd_create("evokernel-tensor", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, len(view))
                off = 0
                while off < len(view):
                    off += os.pwrite(fd, view[off:off + _CHUNK], off)
                self._send_fd(fd)
            finally:
                os.close(fd)
            extra = {"via": "memfd"}
        self.count(via, t.numel() * t.element_size(), time.perf_counter() - t0)
        return extra

    def settle(self) -> None:
        """The peer has answered: it copied whatever we exported before. Free the exports."""
        while self._held:
            self._held.pop().release()

    # ---------------------------------------------------------------- receiving
    def _recv_fd(self) -> int:
        msg, anc, flags, _ = self.sock.recvmsg(_TAG, socket.CMSG_SPACE(array.array("i").itemsize))
        fds = array.array("i")
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        if not msg and not fds:
            raise EOFError("the fd socket closed")
        try:
            if len(fds) != 1 or flags & socket.MSG_CTRUNC:
                raise CourierError(f"expected one fd with tensor {self._in}, got {len(fds)}")
            if len(msg) != _TAG or int.from_bytes(msg, "little") != self._in:
                raise CourierError(f"fd out of order: expected tensor {self._in}, got tag {msg!r}")
        except CourierError:
            for fd in fds:
                os.close(fd)
            raise
        self._in += 1
        return fds[0]

    def recv(self, spec: dict[str, Any], device: str | None):
        """The uint8 bytes of one tensor sent by fd: on the CUDA device for 'vmm' (unless device says
        the host), on the host for 'memfd' (the caller moves it)."""
        import torch

        t0 = time.perf_counter()
        nbytes, via = spec["nbytes"], spec.get("via")
        fd = self._recv_fd()
        try:
            if via == "vmm":
                from evokernel_mcp.runtime import cuda_vmm

                alloc = spec.get("alloc")
                if not isinstance(alloc, int) or isinstance(alloc, bool):
                    raise CourierError(f"bad allocation size {alloc!r}")
                try:
                    out = cuda_vmm.import_copy(fd, alloc, nbytes)
                except cuda_vmm.VmmError as e:
                    raise CourierError(str(e)) from e
                if device == "cpu":
                    out = out.cpu()
            elif via == "memfd":
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_size < nbytes:
                    raise CourierError(f"fd for a {nbytes}-byte tensor is not a regular file of that size")
                out = torch.empty(nbytes, dtype=torch.uint8)
                view = memoryview(out.numpy()).cast("B")
                off = 0
                while off < nbytes:
                    k = os.preadv(fd, [view[off:off + _CHUNK]], off)
                    if k <= 0:
                        raise CourierError(f"the file ended after {off} of {nbytes} bytes")
                    off += k
            else:
                raise CourierError(f"unknown transport {via!r}")
        finally:
            os.close(fd)
        self.count(via, nbytes, time.perf_counter() - t0)
        return out

    def count(self, via: str, nbytes: int, dt: float) -> None:
        self.stats[f"{via}_bytes"] = self.stats.get(f"{via}_bytes", 0) + nbytes
        self.stats[f"{via}_s"] = self.stats.get(f"{via}_s", 0.0) + dt

    def drain_stats(self) -> dict[str, float]:
        out, self.stats = self.stats, {}
        return out

    def close(self) -> None:
        self.settle()
        try:
            self.sock.close()
        except OSError:
            pass


def pair() -> tuple[socket.socket, socket.socket]:
    """(ours, theirs): theirs is inheritable, to be passed to the child (pass_fds) and closed here after."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.set_inheritable(True)
    return a, b
