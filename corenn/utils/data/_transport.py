"""How a batch crosses from a worker to the main process.

A worker pickles the batch with every numpy array (and every tensor's array)
replaced by a placeholder, writes the arrays' bytes into one anonymous
shared-memory file (``memfd``), and sends the small pickle together with the
file descriptor over a Unix socket (``SCM_RIGHTS``). The main process maps
the file and rebuilds the arrays as views of that mapping: one copy in the
worker, none in the main process.

The file has no name: it is not in ``/dev/shm`` and cannot outlive the
processes holding it. Its memory is freed when the last array viewing it is
garbage-collected, whatever happens to the workers or the loader.
"""
from __future__ import annotations

import array
import ctypes
import errno
import functools
import io
import mmap
import os
import pickle
import socket
import struct
import tempfile

import numpy as np

from . import _core

INLINE_BYTES = 16384  # batches with less array data than this are simply pickled
_ALIGN = 64
_HEADER = struct.Struct("<Q")
_PROTO = pickle.HIGHEST_PROTOCOL


# --- shared memory ---------------------------------------------------------------

def _new_shm_fd() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("corenn-batch", os.MFD_CLOEXEC)
    # Elsewhere: a file unlinked at once, so it still has no name to leak.
    d = "/dev/shm" if os.path.isdir("/dev/shm") else None
    f = tempfile.TemporaryFile(dir=d)
    fd = os.dup(f.fileno())
    f.close()
    return fd


def _pwrite_all(fd: int, buf, offset: int) -> None:
    mv = memoryview(buf).cast("B")
    while mv:
        n = os.pwrite(fd, mv, offset)
        mv, offset = mv[n:], offset + n


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # populate: one syscall, no page faults
_MAP_PROT = mmap.PROT_READ | mmap.PROT_WRITE


class _Mapping:
    """A shared mapping that holds no file descriptor, as a numpy-readable buffer;
    unmapped when the last array viewing it is collected.

    Python's ``mmap.mmap`` keeps a duplicate of the descriptor for the mapping's
    whole life, so every live batch would hold one and about a thousand of them
    would exhaust ``ulimit -n``. The kernel keeps the mapping without the fd.
    """

    def __init__(self, fd: int, size: int, libc):
        addr = libc.mmap(None, size, _MAP_PROT, _MAP_FLAGS, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot map a {size}-byte shared-memory batch: {os.strerror(err)}")
        self._addr, self._size, self._munmap = addr, size, libc.munmap  # bound: usable at interpreter exit
        self.__array_interface__ = {"data": (addr, False), "shape": (size,), "typestr": "|u1", "version": 3}

    def __del__(self):
        if getattr(self, "_addr", None) is not None:
            self._munmap(self._addr, self._size)
            self._addr = None


@functools.lru_cache(maxsize=None)
def _libc():
    """The C library's mmap/munmap, or None where ctypes cannot reach them; loaded at the first batch."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return libc
    except (OSError, AttributeError, TypeError):
        return None


_MAP_FAILED = ctypes.c_void_p(-1).value


def _map(fd: int, size: int) -> np.ndarray:
    """The ``size`` bytes of shared memory ``fd`` as a uint8 array; ``fd`` may be closed afterwards."""
    libc = _libc()
    if libc is None:  # no C library to call: Python's mmap, which keeps a descriptor per batch
        return np.frombuffer(mmap.mmap(fd, size, flags=_MAP_FLAGS, prot=_MAP_PROT), np.uint8)
    return np.asarray(_Mapping(fd, size, libc))


# --- pickling with arrays set aside ---------------------------------------------------

class _Pickler(pickle.Pickler):
    def __init__(self, file, tensor_cls):
        super().__init__(file, protocol=_PROTO)
        self.tensor_cls = tensor_cls
        self.arrays = []  # (array, kind); kind 0 = ndarray, 1 = tensor, 2 = tensor requiring grad
        self.seen = {}  # id -> placeholder, so an object repeated in the batch stays one object

    def persistent_id(self, obj):
        if type(obj) is np.ndarray:
            arr, kind = obj, 0
        elif self.tensor_cls is not None and type(obj) is self.tensor_cls:
            arr = getattr(obj, "_data", None)
            if type(arr) is not np.ndarray:  # not a cpu tensor: let it pickle itself
                return None
            kind = 2 if getattr(obj, "requires_grad", False) else 1
        else:
            return None
        if arr.dtype.hasobject:
            return None
        key = id(obj)
        pid = self.seen.get(key)
        if pid is None:
            pid = self.seen[key] = len(self.arrays)
            self.arrays.append((obj, arr, kind))  # holding obj keeps id(obj) unique
        return pid


def pack(obj):
    """``(message, fd)`` for ``obj``; ``fd`` is None when the data went inline.

    The caller sends both and then closes ``fd``.
    """
    buf = io.BytesIO()
    p = _Pickler(buf, _core.tensor_type())
    p.dump(obj)
    specs, offset = [], 0
    for _, arr, kind in p.arrays:
        specs.append((offset, arr.dtype.str if arr.dtype.names is None else arr.dtype, arr.shape, kind))
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN
    if offset < INLINE_BYTES:
        return (buf.getvalue(), specs, [a for _, a, _ in p.arrays], 0), None
    fd = _new_shm_fd()
    try:
        os.ftruncate(fd, offset)
        for (off, *_), (_, arr, _) in zip(specs, p.arrays):
            if arr.nbytes:
                _pwrite_all(fd, arr if arr.flags.c_contiguous else np.ascontiguousarray(arr), off)
    except BaseException:
        os.close(fd)
        raise
    return (buf.getvalue(), specs, None, offset), fd


def _missing_fd_message() -> str:
    # The kernel drops a passed descriptor (MSG_CTRUNC) when the receiver is at its limit.
    try:
        import resource
        limit = f" (RLIMIT_NOFILE is {resource.getrlimit(resource.RLIMIT_NOFILE)[0]})"
    except (ImportError, OSError, ValueError):
        limit = ""
    return (f"the batch's shared-memory file descriptor did not arrive: this process has too many open "
            f"files{limit}. Close files you no longer need, or raise the limit (`ulimit -n` in the shell, "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ...) in Python)")


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, objects):
        super().__init__(file)
        self.objects = objects

    def persistent_load(self, pid):
        return self.objects[pid]


def unpack(message, fd):
    """Rebuild what ``pack`` packed; takes ownership of ``fd``."""
    body, specs, inline, size = message
    if inline is not None:
        arrays = inline
    elif fd is None:
        raise OSError(errno.EMFILE, _missing_fd_message())
    else:
        try:
            mm = _map(fd, size)
        finally:
            os.close(fd)
        arrays = []
        for off, dtype, shape, _ in specs:
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            arrays.append(mm[off:off + count * dt.itemsize].view(dt).reshape(shape)
                          if count and dt.itemsize else np.empty(shape, dt))
        del mm  # the arrays keep the mapping alive, and free it with the last of them
    objects = []
    for arr, (_, _, _, kind) in zip(arrays, specs):
        if kind:
            t = _core.from_numpy(arr)
            if kind == 2:
                t.requires_grad_(True)
            arr = t
        objects.append(arr)
    return _Unpickler(io.BytesIO(body), objects).load()


# --- framing over a Unix stream socket ------------------------------------------------

_FD_SPACE = socket.CMSG_SPACE(array.array("i", [0]).itemsize)


def send(sock: socket.socket, obj, fd: int | None = None) -> None:
    """Send one pickled message, with ``fd`` attached if given."""
    payload = pickle.dumps(obj, protocol=_PROTO)
    data = _HEADER.pack(len(payload)) + payload
    if fd is None:
        sock.sendall(data)
        return
    n = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    if n < len(data):
        sock.sendall(data[n:])


def _recv_exact(sock: socket.socket, n: int, into: bytearray | None = None) -> bytearray:
    buf = into if into is not None else bytearray(n)
    view = memoryview(buf)[len(buf) - n:]
    while view:
        k = sock.recv_into(view)
        if k == 0:
            raise EOFError("the other end closed the connection")
        view = view[k:]
    return buf


def recv(sock: socket.socket):
    """``(obj, fd_or_None)``; raises EOFError when the peer has gone."""
    data, ancdata, _flags, _addr = sock.recvmsg(_HEADER.size, _FD_SPACE, getattr(socket, "MSG_CMSG_CLOEXEC", 0))
    fd = None
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
            fd = fds[0] if fds else None
    try:
        if not data:
            raise EOFError("the other end closed the connection")
        header = bytearray(data)
        if len(header) < _HEADER.size:
            header += bytes(_HEADER.size - len(header))
            _recv_exact(sock, _HEADER.size - len(data), header)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(_recv_exact(sock, size)), fd
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
