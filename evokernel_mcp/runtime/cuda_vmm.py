"""Device memory shared between processes by file descriptor: the CUDA driver's virtual memory API
(cuMemCreate with a POSIX file-descriptor handle), called through ctypes.

Why not cudaIpcGetMemHandle (what torch.multiprocessing uses): legacy CUDA IPC handles cannot be opened
across PID namespaces, and every sandboxed child lives in its own (bwrap --unshare-pid). A VMM
allocation exported as a file descriptor is a plain fd: it crosses a unix socket (SCM_RIGHTS) whatever
the namespaces and uids, and the importer maps the memory in its own address space.

Only used on CUDA devices; anything missing (no libcuda, an old driver, ROCm) makes `available()` False
and the caller falls back to host transfer. The runner copies out of an imported allocation at once (and
releases it, or keeps it mapped as the peer's arena: courier.py). A sandboxed child adopts an allocation the
runner exported (import_adopt: no second copy on the device): the runner dropped its own mapping and fd when it
sent it, so no process computes on memory an untrusted process can still write.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FD = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


MAX_ALLOC = 1 << 46  # bytes (64 TiB): more than any device holds; a size a peer claims beyond it is a lie, and
# ctypes would cut a bigger Python int to 64 bits, so the driver would map less than our bounds checks assume


def check_peer_size(size: Any, gran: int) -> int:
    """An allocation size an untrusted peer claims, checked before any driver call uses it."""
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_ALLOC or size % gran:
        raise VmmError(f"allocation size {size!r} is not a whole number of {gran}-byte pages up to {MAX_ALLOC}")
    return size


class VmmError(Exception):
    """A driver call failed (the message names the call and the driver's error)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _Cuda:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuMemCreate", "cuMemRelease", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap",
                     "cuMemUnmap", "cuMemSetAccess", "cuMemExportToShareableHandle",
                     "cuMemImportFromShareableHandle", "cuMemGetAllocationGranularity", "cuCtxGetCurrent",
                     "cuCtxGetDevice", "cuGetErrorString"):
            getattr(self.lib, name)  # AttributeError: this driver has no VMM API
        self.lib.cuMemAddressReserve.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                                 ctypes.c_size_t, ctypes.c_uint64, ctypes.c_ulonglong]
        self.lib.cuMemAddressFree.argtypes = [ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemMap.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64,
                                      ctypes.c_ulonglong]
        self.lib.cuMemUnmap.argtypes = [ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemSetAccess.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER(_Access),
                                            ctypes.c_size_t]
        self.lib.cuMemCreate.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.POINTER(_Prop),
                                         ctypes.c_ulonglong]
        self.lib.cuMemRelease.argtypes = [ctypes.c_uint64]
        self.lib.cuMemExportToShareableHandle.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                                          ctypes.c_ulonglong]
        self.lib.cuMemImportFromShareableHandle.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p,
                                                            ctypes.c_int]
        self.lib.cuMemGetAllocationGranularity.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Prop),
                                                           ctypes.c_int]

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(s))
            raise VmmError(f"{what} failed: CUDA error {rc} ({(s.value or b'?').decode()})")

    def device(self) -> int:
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:  # torch binds its (primary) context to a thread on the first runtime call there
            import torch

            torch.cuda.synchronize()
            self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            raise VmmError("no current CUDA context on this thread")
        dev = ctypes.c_int()
        self.check(self.lib.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
        return dev.value

    def prop(self, dev: int) -> _Prop:
        p = _Prop()
        p.type, p.requestedHandleTypes = _CU_MEM_ALLOCATION_TYPE_PINNED, _CU_MEM_HANDLE_TYPE_POSIX_FD
        p.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, dev)
        return p

    def granularity(self, dev: int) -> int:
        g = ctypes.c_size_t()
        self.check(self.lib.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(self.prop(dev)),
                                                          _CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity")
        return int(g.value)


_LIB: _Cuda | None = None
_LIB_ERR: str | None = None
_LOCK = threading.Lock()


def _lib() -> _Cuda:
    global _LIB, _LIB_ERR
    with _LOCK:
        if _LIB is None and _LIB_ERR is None:
            try:
                _LIB = _Cuda()
            except (OSError, AttributeError) as e:
                _LIB_ERR = f"{type(e).__name__}: {e}"
    if _LIB is None:
        raise VmmError(f"the CUDA driver's VMM API is not available: {_LIB_ERR}")
    return _LIB


def available() -> bool:
    import torch

    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        return False
    try:
        _lib()
    except VmmError:
        return False
    return True


class Mapping:
    """An allocation mapped into this process: `ptr`, `size`; release() unmaps and drops the handle."""

    def __init__(self, lib: _Cuda, handle: int, size: int, dev: int):
        self.lib, self.handle, self.size, self.ptr, self.mapped = lib, handle, size, 0, False
        addr = ctypes.c_uint64()
        try:
            lib.check(lib.lib.cuMemAddressReserve(ctypes.byref(addr), size, 0, 0, 0), "cuMemAddressReserve")
            self.ptr = addr.value
            lib.check(lib.lib.cuMemMap(self.ptr, size, 0, handle, 0), "cuMemMap")
            self.mapped = True
            acc = _Access(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, dev), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            lib.check(lib.lib.cuMemSetAccess(self.ptr, size, ctypes.byref(acc), 1), "cuMemSetAccess")
        except VmmError:
            self.release()
            raise

    def tensor(self, nbytes: int, offset: int = 0):
        """nbytes from offset as a uint8 tensor on the device (a view: valid until release())."""
        import torch

        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise VmmError(f"{nbytes} bytes at offset {offset} do not lie in a {self.size}-byte allocation")

        class _Cai:
            __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr + offset, False),
                                        "version": 3, "strides": None}

        return torch.as_tensor(_Cai(), device="cuda")

    def release(self) -> None:
        lib = self.lib.lib
        if self.mapped:
            lib.cuMemUnmap(self.ptr, self.size)
            self.mapped = False
        if self.ptr:
            lib.cuMemAddressFree(self.ptr, self.size)
            self.ptr = 0
        if self.handle:
            lib.cuMemRelease(self.handle)
            self.handle = 0


def export(src) -> tuple[int, int, Mapping]:
    """Copy a CUDA tensor's bytes into a new shareable allocation: (fd, allocation size, mapping). The
    caller sends the fd, closes it, and keeps the mapping until the peer has copied the bytes out."""
    import torch

    flat = src.detach().contiguous().reshape(-1).view(torch.uint8)
    nbytes = flat.numel()
    m = create(nbytes)
    try:
        m.tensor(nbytes).copy_(flat)
        torch.cuda.synchronize()  # the peer reads it from another process: the copy must be complete
        fd = export_fd(m)
    except BaseException:
        m.release()
        raise
    return fd, m.size, m


def _import_checked(fd: int, size: int, nbytes: int) -> Mapping:
    if isinstance(size, int) and size < nbytes:
        raise VmmError(f"allocation size {size} does not fit {nbytes} bytes")
    return import_map(fd, size)


def import_copy(fd: int, size: int, nbytes: int, device: str = "cuda") -> Any:
    """Map the allocation behind fd (an untrusted peer's), copy its first nbytes into memory this process
    owns, release the mapping; the uint8 tensor on `device` ("cpu": host memory, with no second copy on the
    device). VmmError when anything does not fit."""
    import torch

    m = _import_checked(fd, size, nbytes)
    try:
        out = torch.empty(nbytes, dtype=torch.uint8, device=device)
        if nbytes:
            out.copy_(m.tensor(nbytes))
        torch.cuda.synchronize()
    finally:
        m.release()
    return out


class _Owned:
    """A mapped allocation seen as a CUDA array: torch.as_tensor keeps this object alive for as long as the
    tensor's storage lives, and its end unmaps and releases the allocation (after the device is idle: a
    kernel still reading it would fault)."""

    def __init__(self, m: Mapping, nbytes: int):
        self.m = m
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (m.ptr, False),
                                         "version": 3, "strides": None}

    def __del__(self) -> None:
        try:
            import torch

            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a broken context, or the interpreter's end: the release still goes
            pass
        self.m.release()


def import_adopt(fd: int, size: int, nbytes: int) -> Any:
    """Map the allocation behind fd and return its first nbytes as a uint8 tensor on the device that owns the
    mapping (released when the tensor's storage goes): one copy on the device where import_copy makes two.
    Only for what the runner sends a child: the runner has let go of its own mapping and fd once sent."""
    import torch

    m = _import_checked(fd, size, nbytes)
    try:
        return torch.as_tensor(_Owned(m, nbytes), device="cuda")
    except BaseException:
        m.release()
        raise


def create(nbytes: int) -> Mapping:
    """A new shareable allocation of at least nbytes, mapped here (a courier's arena)."""
    lib = _lib()
    dev = lib.device()
    gran = lib.granularity(dev)
    size = max(gran, -(-nbytes // gran) * gran)
    h = ctypes.c_uint64()
    lib.check(lib.lib.cuMemCreate(ctypes.byref(h), size, ctypes.byref(lib.prop(dev)), 0), "cuMemCreate")
    return Mapping(lib, h.value, size, dev)


def export_fd(m: Mapping) -> int:
    """A file descriptor for the allocation behind m (the caller sends it, then closes it)."""
    lib = _lib()
    fd = ctypes.c_int(-1)
    lib.check(lib.lib.cuMemExportToShareableHandle(ctypes.byref(fd), m.handle, _CU_MEM_HANDLE_TYPE_POSIX_FD, 0),
              "cuMemExportToShareableHandle")
    return fd.value


def import_map(fd: int, size: int) -> Mapping:
    """Map the allocation behind fd (an untrusted peer's) here, for as long as the caller keeps it; VmmError
    when its size is not what the peer said."""
    lib = _lib()
    dev = lib.device()
    check_peer_size(size, lib.granularity(dev))
    h = ctypes.c_uint64()
    lib.check(lib.lib.cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd), _CU_MEM_HANDLE_TYPE_POSIX_FD),
              "cuMemImportFromShareableHandle")
    return Mapping(lib, h.value, size, dev)
