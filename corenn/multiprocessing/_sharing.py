"""Tensors in shared memory, and how they pickle between processes (PyTorch's ``file_descriptor`` strategy).

``share_memory_tensor(t)`` copies ``t``'s data once into an anonymous shared file (``memfd``) mapped
``MAP_SHARED``, and points the tensor at that mapping; the tensor keeps the file descriptor so that it
can hand a duplicate to another process. ``multiprocessing``'s pickler (``ForkingPickler``) then sends
the descriptor (``reduction.DupFd``) and the receiver maps the same memory.
"""
from __future__ import annotations

import os
from multiprocessing import reduction

import numpy as np

from corenn.utils.data import _transport


class _SharedFile:
    """An open shared file; closed with the last tensor (in this process) that holds it."""

    __slots__ = ("fd", "size")

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size

    def __del__(self):
        try:
            os.close(self.fd)
        except (OSError, TypeError):
            pass


def _mapped(shared: _SharedFile, dtype, shape) -> np.ndarray:
    memory = _transport._map(shared.fd, max(shared.size, 1))
    count = int(np.prod(shape, dtype=np.int64))
    return memory[:count * dtype.itemsize].view(dtype).reshape(shape)


def share_memory_tensor(tensor):
    """Move ``tensor``'s data into shared memory (in place, once); returns ``tensor``."""
    if is_shared(tensor):
        return tensor
    if tensor._device.type != "cpu":
        return tensor  # PyTorch: a no-op for CUDA tensors (their memory is shared through IPC handles)
    array = np.ascontiguousarray(tensor._data)
    fd = _transport._new_shm_fd()
    os.set_inheritable(fd, False)
    shared = _SharedFile(fd, array.nbytes)
    os.ftruncate(fd, max(array.nbytes, 1))
    mapped = _mapped(shared, array.dtype, array.shape)
    mapped[...] = array
    tensor._data = mapped
    tensor.__dict__["_shared_file"] = shared
    return tensor


def is_shared(tensor) -> bool:
    """Whether ``tensor``'s data is in shared memory (always True for non-cpu tensors, as in PyTorch)."""
    if tensor._device.type != "cpu":
        return True
    return tensor.__dict__.get("_shared_file") is not None


def _rebuild_shared(cls, dup_fd, size, dtype_str, shape, requires_grad, state):
    import corenn
    fd = dup_fd.detach()
    shared = _SharedFile(fd, size)
    array = _mapped(shared, np.dtype(dtype_str), shape)
    tensor = corenn.from_numpy(array)
    if cls is not type(tensor):
        new = object.__new__(cls)
        for slot in ("_data", "_device", "_grad_fn", "_requires_grad", "_output_nr"):
            setattr(new, slot, getattr(tensor, slot))
        tensor = new
    tensor.__dict__.update(state)
    tensor.__dict__["_shared_file"] = shared
    tensor._requires_grad = requires_grad
    return tensor


def _reduce_tensor(tensor):
    if tensor._device.type != "cpu" or tensor._grad_fn is not None:
        return tensor.__reduce_ex__(reduction.ForkingPickler.HIGHEST_PROTOCOL if hasattr(
            reduction.ForkingPickler, "HIGHEST_PROTOCOL") else 4)
    share_memory_tensor(tensor)
    shared = tensor.__dict__["_shared_file"]
    state = {k: v for k, v in tensor.__dict__.items() if k not in ("_shared_file", "_hooks", "_retains_grad")}
    return (_rebuild_shared, (type(tensor), reduction.DupFd(shared.fd), shared.size, tensor._data.dtype.str,
                              tuple(tensor._data.shape), tensor._requires_grad, state))


def init_reductions() -> None:
    """Teach ``multiprocessing``'s pickler to send cpu tensors (and Parameters) through shared memory."""
    import corenn
    from corenn.nn import Parameter
    for cls in (corenn.Tensor, Parameter):
        reduction.ForkingPickler.register(cls, _reduce_tensor)
