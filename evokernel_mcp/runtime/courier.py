"""Big tensors by file descriptor beside the frames pipe (frames.py): a unix socket between the runner and
one sandboxed child carries one fd per big tensor (SCM_RIGHTS).

- A CUDA tensor travels as a VMM allocation (cuda_vmm.py): device to device, no host copy, whatever the
  PID namespaces. The sender exports a copy, sends its fd and lets go of its own mapping at once. The runner
  copies what it receives into memory it owns (or into host memory, when it asks for the host) and releases
  the mapping. A sandboxed child (adopt=True) keeps an allocation the runner hands over (sent while
  `handing_over()`: a benchmark arm's timed inputs) as its own tensor: one device copy of a big input, not two
  at once; everything else it copies, as the runner does. A HOST tensor handed over travels the same way (the
  export copies it to the device): the runner keeps a big shape's inputs on the host while the arms get theirs,
  so its own device copy is not a third one beside the arms'.
- A host tensor (or a CUDA tensor where VMM is not available, or where the device has no room for the second
  copy an export makes) travels as a memfd: one copy in, one out.
  A sandboxed sender whose file-size limit is below the tensor's size uses the pipe instead.
- Small tensors stay in the pipe: an fd costs more than it saves below THRESHOLD.
- CUDA tensors up to ARENA_BYTES in all per message go through an arena instead: one allocation per
  direction, exported and mapped by the peer ONCE, reused by every later message; a new, bigger one (sent
  with the message that first needs it) replaces it. A VMM allocation per tensor costs ~3 ms of driver
  calls (create, map, export, import, map, unmap, release) whatever its size, measured on an H200, and
  more when a second GPU's processes make the same calls; an arena costs a copy. Reuse is safe because
  the protocol alternates: a side writes its next message only after the peer's reply, and the peer
  has copied the arena's bytes out (and synchronized) before it replies. The peer may write into our
  arena (it is mapped read-write there): that spoils only what we send it next; we never read from it.

The receiver trusts nothing: a missing fd, a file that is not a regular one or is shorter than the
header says, an allocation that does not hold the bytes, a sequence number out of order: FrameError
for that message, the sender's job ends, and nothing is ever read beyond what was checked (pread, not
mmap: a file shrunk under us gives a short read, never SIGBUS).
"""

from __future__ import annotations

import array
import contextlib
import os
import resource
import socket
import stat
import time
from typing import Any

THRESHOLD = 1 << 20  # bytes: smaller tensors stay in the pipe
ARENA_BYTES = 64 << 20  # 0: a VMM allocation per tensor
_ALIGN = 512  # bytes: each tensor's offset in the arena
_CHUNK = 1 << 30
_TAG = 8  # bytes of sequence number sent with each fd


class CourierError(Exception):
    """What the peer sent by fd does not check out (frames turns this into a FrameError)."""


class Courier:
    def __init__(self, sock: socket.socket, adopt: bool = False):
        self.sock = sock
        self.adopt = adopt  # a child's courier: what the runner hands over by VMM becomes its own (import_adopt)
        self._hand_over = False  # the runner's side: the VMM exports of the messages sent now are handed over
        self._host_export = False  # host tensors of the messages sent now go by VMM export too (from_host())
        self._out = 0  # sequence numbers: every fd carries its own, checked against the order of the specs
        self._out_at_plan = 0
        self._in = 0
        self.vmm: bool | None = None  # CUDA tensors by VMM: None until first asked (a probe may set it)
        self.stats: dict[str, float] = {}
        self._arena: Any = None  # ours (a cuda_vmm.Mapping), its id, and whether the peer has it yet
        self._arena_id = 0
        self._arena_sent = False
        self._plan: dict[int, int] = {}  # this message: tensor index -> offset in our arena
        self._copied = False  # this message put bytes in our arena (synchronize before the header)
        self._peer: tuple[int, Any] | None = None  # the peer's arena as mapped here: (id, Mapping)
        self._peer_read = False
        self._exported: Any = None  # (fd, size, mapping) of the export send() is about to send

    # ---------------------------------------------------------------- sending
    @contextlib.contextmanager
    def handing_over(self):
        """Messages sent inside: their VMM exports are the peer's to keep (a child that adopts maps them as its
        own tensors instead of copying them); we drop ours once sent, as always."""
        self._hand_over = True
        try:
            yield self
        finally:
            self._hand_over = False

    @contextlib.contextmanager
    def from_host(self):
        """Messages sent inside: their big host tensors go by VMM export as well (the export copies host memory to
        the device), not by memfd, which a sandboxed sender may not write beyond its file-size limit, nor the pipe.
        For a reply a child moved to its host memory (child.serve, `through_host`): its device copy is gone
        before the export is made, so the export is the only device copy, not a second one."""
        self._host_export = True
        try:
            yield self
        finally:
            self._host_export = False

    def _use_vmm(self) -> bool:
        if self.vmm is None:
            from evokernel_mcp.runtime import cuda_vmm

            self.vmm = cuda_vmm.available()
        return self.vmm

    def sent_fds(self) -> bool:
        """Whether the message being written (since plan()) sent any fd: a write that failed after that leaves
        the peer's count of fds behind ours."""
        return self._out != self._out_at_plan

    def plan(self, tensors: list) -> None:
        """Before a message's tensors are sent: which CUDA ones go through the arena (in order, while they fit
        in ARENA_BYTES), and an arena big enough for them all (a new one when ours is smaller)."""
        self._plan, self._copied, need = {}, False, 0
        self._out_at_plan = self._out
        if ARENA_BYTES <= 0:
            return
        for i, t in enumerate(tensors):
            n = t.numel() * t.element_size()
            if t.device.type == "cuda" and n >= THRESHOLD and need + n <= ARENA_BYTES and self._use_vmm():
                self._plan[i] = need
                need += -(-n // _ALIGN) * _ALIGN
        if need and (self._arena is None or self._arena.size < need):
            from evokernel_mcp.runtime import cuda_vmm

            old = self._arena.size if self._arena is not None else 0
            fresh = cuda_vmm.create(max(need, min(ARENA_BYTES, 2 * old)))
            if self._arena is not None:  # the peer has copied out of it: its mapping is its own to drop
                self._arena.release()
            self._arena, self._arena_id, self._arena_sent = fresh, self._arena_id + 1, False

    def route(self, t, index: int | None = None) -> str | None:
        """'arena', 'vmm', 'memfd' or None (the pipe) for a tensor about to be sent (index: its place in the
        message, as given to plan())."""
        nbytes = t.numel() * t.element_size()
        if nbytes < THRESHOLD:
            return None
        if index is not None and index in self._plan:
            return "arena"
        if (t.device.type == "cuda" or self._hand_over or self._host_export) and self._use_vmm():
            return "vmm"  # a host tensor handed over goes to the peer's device in one copy (export's H2D)
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and nbytes > soft:
            return None  # a sandboxed sender may not write a file that big: the pipe takes it
        return "memfd"

    def _send_fd(self, fd: int) -> None:
        self.sock.sendmsg([self._out.to_bytes(_TAG, "little")],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        self._out += 1

    def send(self, t, via: str, index: int | None = None) -> dict[str, Any] | None:
        """Send the tensor's bytes by fd (or put them in the arena); the extra fields its spec carries, or None
        when the pipe must take it (no device room for an export, no file that big allowed to this process)."""
        import torch

        t0 = time.perf_counter()
        if via == "vmm" and self._no_room_for_export(t):
            if not self._may_write(t):
                self.count("vmm_to_pipe", t.numel() * t.element_size(), 0.0)
                return None
            via = "memfd_fallback"
        if via == "arena":
            off = self._plan[index]
            flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
            self._arena.tensor(flat.numel(), off).copy_(flat)
            self._copied = True
            extra: dict[str, Any] = {"via": "arena", "arena": self._arena_id, "offset": off, "alloc": self._arena.size}
            if not self._arena_sent:  # its first use: the peer maps it from this fd, once
                from evokernel_mcp.runtime import cuda_vmm

                fd = cuda_vmm.export_fd(self._arena)
                try:
                    self._send_fd(fd)
                finally:
                    os.close(fd)
                self._arena_sent, extra["new"] = True, True
        elif via == "vmm":
            fd, size, mapping = self._exported
            self._exported = None
            try:
                self._send_fd(fd)
            finally:
                os.close(fd)
                # The fd in flight (then the peer's import) holds the allocation: the driver frees it once
                # every handle, its shareable fd included, is gone. Holding our mapping until the peer
                # answers would pin a second copy of every big tensor meanwhile.
                mapping.release()
            extra = {"via": "vmm", "alloc": size, **({"adopt": True} if self._hand_over else {})}
        else:
            if via == "memfd_fallback":
                self.count("vmm_fallback", t.numel() * t.element_size(), 0.0)
            via = "memfd"
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

    @staticmethod
    def _may_write(t) -> bool:
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        return soft == resource.RLIM_INFINITY or t.numel() * t.element_size() <= soft

    def _no_room_for_export(self, t) -> bool:
        """Export the tensor (cuda_vmm.export, kept in self._exported for send); True when the device has no
        room for the second copy an export makes, even after this process's allocator cache is emptied: the
        tensor then goes through host memory (memfd, or the pipe where this process may not write a file that
        big) instead of failing."""
        import torch

        from evokernel_mcp.runtime import cuda_vmm
        from evokernel_mcp.runtime.protocol import classify_text

        for attempt in (0, 1):
            try:
                self._exported = cuda_vmm.export(t)
                return False
            except cuda_vmm.VmmError as e:
                if classify_text(str(e)) != "oom":
                    raise
                if attempt == 0:
                    torch.cuda.empty_cache()  # freed blocks this process's allocator still holds
        return True

    def sent(self) -> None:
        """Every tensor of the message is out: the arena's copies must be complete before the peer reads."""
        if self._copied:
            import torch

            torch.cuda.synchronize()
            self._copied = False

    def settle(self) -> None:
        """A message has been read: its bytes copied out of the peer's arena are complete here (before we
        answer, after which the peer reuses it)."""
        if self._peer_read:
            import torch

            torch.cuda.synchronize()
            self._peer_read = False

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
        if via == "arena":
            out = self._from_arena(spec, nbytes, device)
            self.count(via, nbytes, time.perf_counter() - t0)
            return out
        fd = self._recv_fd()
        try:
            if via == "vmm":
                from evokernel_mcp.runtime import cuda_vmm

                alloc = spec.get("alloc")
                if not isinstance(alloc, int) or isinstance(alloc, bool):
                    raise CourierError(f"bad allocation size {alloc!r}")
                adopt = device != "cpu" and self.adopt and spec.get("adopt") is True
                try:
                    out = (cuda_vmm.import_adopt(fd, alloc, nbytes) if adopt else
                           cuda_vmm.import_copy(fd, alloc, nbytes, "cpu" if device == "cpu" else "cuda"))
                except cuda_vmm.VmmError as e:
                    raise CourierError(str(e)) from e
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

    def _from_arena(self, spec: dict[str, Any], nbytes: int, device: str | None):
        """Copy one tensor out of the peer's arena (mapped here from the fd sent with its first use)."""
        import torch

        from evokernel_mcp.runtime import cuda_vmm

        aid, off, alloc = spec.get("arena"), spec.get("offset"), spec.get("alloc")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (aid, off, alloc)) or \
                not 0 < alloc <= cuda_vmm.MAX_ALLOC or off < 0:
            raise CourierError(f"bad arena reference {aid!r} {off!r} {alloc!r}")
        if spec.get("new"):
            fd = self._recv_fd()
            try:
                fresh = cuda_vmm.import_map(fd, alloc)
            except cuda_vmm.VmmError as e:
                raise CourierError(str(e)) from e
            finally:
                os.close(fd)
            self.drop_peer()
            self._peer = (aid, fresh)
        if self._peer is None or self._peer[0] != aid or self._peer[1].size != alloc:
            raise CourierError(f"arena {aid} was never sent here")
        try:
            view = self._peer[1].tensor(nbytes, off)
        except cuda_vmm.VmmError as e:
            raise CourierError(str(e)) from e
        out = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        out.copy_(view)
        self._peer_read = True
        return out.cpu() if device == "cpu" else out

    def drop_peer(self) -> None:
        if self._peer is not None:
            import torch

            torch.cuda.synchronize()  # no copy out of it may still be running
            self._peer[1].release()
            self._peer = None

    def count(self, via: str, nbytes: int, dt: float) -> None:
        self.stats[f"{via}_bytes"] = self.stats.get(f"{via}_bytes", 0) + nbytes
        self.stats[f"{via}_s"] = self.stats.get(f"{via}_s", 0.0) + dt

    def drain_stats(self) -> dict[str, float]:
        out, self.stats = self.stats, {}
        return out

    def close(self) -> None:
        try:
            self.settle()
            self.drop_peer()
        except Exception:  # noqa: BLE001 - a broken context (a fault in this process): its end frees it all
            self._peer, self._peer_read = None, False
        if self._arena is not None:
            self._arena.release()
            self._arena = None
        try:
            self.sock.close()
        except OSError:
            pass


def pair() -> tuple[socket.socket, socket.socket]:
    """(ours, theirs): theirs is inheritable, to be passed to the child (pass_fds) and closed here after."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.set_inheritable(True)
    return a, b
