"""What runs inside a worker process, and ``get_worker_info()``.

Protocol on the worker's socket (one per worker, see ``_transport``):

main -> worker   ("epoch", epoch, base_seed)   reseed, restart the dataset iterator
                 ("task", epoch, send_idx, index)
                 EOF (main closed its end)     exit
worker -> main   ("batch", epoch, send_idx, packed) + shared-memory fd
                 ("error", epoch, send_idx, info)
                 ("stop", epoch, send_idx)     an IterableDataset ran out
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import random
import signal
import sys
import traceback

import numpy as np

from . import _core, _transport
from ._fetch import IterableFetcher, MapFetcher

__all__ = ["WorkerInfo", "get_worker_info"]


class WorkerInfo:
    """Read-only facts about the current worker: ``id``, ``num_workers``,
    ``seed`` (this epoch's seed for this worker) and ``dataset`` (its copy).

    Example::

        info = get_worker_info()
        if info is not None:
            shard = paths[info.id::info.num_workers]
    """

    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs)
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        super().__setattr__(key, val)

    @property
    def worker_id(self) -> int:
        return self.id

    def __repr__(self):
        body = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__keys if k != "dataset")
        return f"{type(self).__name__}({body}, dataset={type(self.dataset).__name__})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """The current worker's ``WorkerInfo`` inside a DataLoader worker
    process, None in the main process.

    Example::

        def __iter__(self):
            info = get_worker_info()
            start = 0 if info is None else info.id
            step = 1 if info is None else info.num_workers
            yield from self.items[start::step]
    """
    return _worker_info


def _seed_everything(base_seed: int, worker_id: int) -> int:
    """Seed Python's, numpy's global and corenn's RNGs for this worker and
    epoch. numpy gets a SeedSequence of (base_seed, worker_id), so workers'
    streams differ even though their seeds are consecutive."""
    seed = base_seed + worker_id
    random.seed(seed)
    np.random.seed(np.random.SeedSequence([base_seed, worker_id]).generate_state(4))
    _core.manual_seed(seed)
    return seed


def _error_info(exc: BaseException, worker_id: int, where: str) -> dict:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        # The class travels by reference, as bytes the main process loads by itself: a
        # class it cannot import then costs only the type, never the message's slot.
        # A class defined in a function cannot travel at all.
        exc_type = pickle.dumps(type(exc))
        pickle.loads(exc_type)
    except Exception:
        exc_type = None
    return {"type": exc_type, "type_name": type(exc).__qualname__, "worker_id": worker_id,
            "pid": os.getpid(), "where": where, "traceback": tb}


def worker_loop(sock, dataset_kind_iterable, dataset, auto_collation, collate_fn, drop_last,
                base_seed, init_fn, worker_id, num_workers, parent_pid, die_with_parent):
    """Serve tasks from the main process until it closes the socket."""
    global _worker_info
    # Ctrl-C goes to the whole process group: let the main process handle it
    # and shut us down, rather than printing one traceback per worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()  # a segfault in a C extension prints where it happened
    if die_with_parent:
        _set_pdeathsig()
        if os.getppid() != parent_pid:
            return
    seed = _seed_everything(base_seed, worker_id)
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    fetcher_cls = IterableFetcher if dataset_kind_iterable else MapFetcher
    fetcher, init_error = None, None

    def start_epoch():
        nonlocal fetcher, init_error
        fetcher, init_error = None, None
        try:
            fetcher = fetcher_cls(dataset, auto_collation, collate_fn, drop_last)
        except Exception as e:  # reported with the first task, as PyTorch does
            init_error = _error_info(e, worker_id, "calling iter(dataset)")

    init_ok = True
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as e:
        init_ok = False
        init_error = _error_info(e, worker_id, f"running worker_init_fn({worker_id})")
    if init_ok:
        start_epoch()
    while True:
        try:
            msg, _ = _transport.recv(sock)
        except (EOFError, OSError):
            break  # the loader is gone or shutting down
        if msg[0] == "epoch":
            _, epoch, base_seed = msg
            object.__setattr__(_worker_info, "seed", _seed_everything(base_seed, worker_id))
            if init_ok:
                start_epoch()
            continue
        _, task_epoch, send_idx, index = msg
        fd = None
        if fetcher is None:
            if init_error is not None:  # reported once, with the first task
                reply, init_error = ("error", task_epoch, send_idx, init_error), None
            elif dataset_kind_iterable:
                reply = ("stop", task_epoch, send_idx)
            else:
                reply = ("error", task_epoch, send_idx, _error_info(
                    RuntimeError("this worker failed to initialise (see the first error)"), worker_id, "starting up"))
        else:
            try:
                packed, fd = _transport.pack(fetcher.fetch(index))
                reply = ("batch", task_epoch, send_idx, packed)
            except StopIteration as e:
                if dataset_kind_iterable:
                    reply = ("stop", task_epoch, send_idx)
                else:
                    reply = ("error", task_epoch, send_idx, _error_info(e, worker_id, fetcher.describe()))
            except Exception as e:
                reply = ("error", task_epoch, send_idx, _error_info(e, worker_id, fetcher.describe()))
        try:
            _transport.send(sock, reply, fd)
        except OSError:
            break  # main process gone
        except Exception as e:  # the reply could not be pickled: nothing was sent, so answer the task with that
            try:
                _transport.send(sock, ("error", task_epoch, send_idx, _error_info(e, worker_id, "sending the batch")))
            except OSError:
                break
        finally:
            if fd is not None:
                os.close(fd)
        del reply
    sock.close()
    sys.stdout.flush()


def _set_pdeathsig():
    """Ask Linux to SIGKILL this worker if the process that started it dies
    (even by SIGKILL), so a killed trainer leaves no workers behind."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:
        pass  # not Linux: workers still exit when their socket closes
