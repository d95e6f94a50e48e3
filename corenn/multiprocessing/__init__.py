"""``corenn.multiprocessing``: a drop-in for :mod:`multiprocessing` whose tensors cross processes in shared memory.

Everything of :mod:`multiprocessing` is here (``Process``, ``Queue``, ``Pool``, ``get_context``, ...). A cpu
tensor that another process receives -- as an argument of a spawned ``Process``, through a ``Queue`` --
is moved into shared memory first (``Tensor.share_memory_()``), and the receiver maps the same memory:
in-place updates made by one process are seen by all (the Hogwild pattern). With the ``fork`` start
method the mapping is simply inherited. The memory is an anonymous shared file (``memfd``), the
transport the DataLoader's workers use (:mod:`corenn.utils.data._transport`); it is freed when the
last tensor viewing it is collected in the last process.

    >>> import corenn.multiprocessing as mp
    >>> model = corenn.nn.Linear(4, 2)
    >>> model.share_memory()            # then mp.Process(target=train, args=(model,)) for each worker

``spawn(fn, args, nprocs)`` runs ``fn(i, *args)`` in ``nprocs`` processes, joins them, and raises
``ProcessRaisedException`` naming the process that failed (and its traceback) if one did.
"""
from __future__ import annotations

import multiprocessing
from multiprocessing import *  # noqa: F401,F403 - the drop-in

from corenn.multiprocessing._sharing import is_shared, share_memory_tensor, init_reductions
from corenn.multiprocessing.spawn import (ProcessContext, ProcessExitedException, ProcessRaisedException,
                                          spawn, start_processes)

__all__ = list(multiprocessing.__all__) + ["spawn", "start_processes", "ProcessContext", "ProcessRaisedException",
                                           "ProcessExitedException", "get_sharing_strategy", "set_sharing_strategy",
                                           "get_all_sharing_strategies"]


def get_all_sharing_strategies() -> set:
    """corenn shares through descriptors of anonymous shared files only (PyTorch's ``file_descriptor``)."""
    return {"file_descriptor"}


def get_sharing_strategy() -> str:
    return "file_descriptor"


def set_sharing_strategy(new_strategy: str) -> None:
    if new_strategy not in get_all_sharing_strategies():
        raise ValueError(f"set_sharing_strategy(): unknown strategy {new_strategy!r}; corenn supports "
                         f"'file_descriptor' only")


init_reductions()
