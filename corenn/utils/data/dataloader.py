"""``DataLoader``: batches from a dataset, in the main process or in worker
processes.

How the multi-process iterator works (see ``_worker`` for the protocol):

* one Unix socket pair per worker carries tasks one way and results the
  other; batch arrays travel as anonymous shared memory (``_transport``);
* the main process waits with ``multiprocessing.connection.wait`` on every
  worker's socket *and* process sentinel, so a worker's death wakes it at
  once: no polling interval, no hang;
* tasks go round-robin to workers, ``prefetch_factor`` per worker in flight,
  and results come back in sampler order (``in_order=True``), exactly as in
  PyTorch, so batches are identical to PyTorch's for the same indices;
* every epoch draws a fresh ``base_seed`` from the loader's generator, and
  each worker reseeds ``random``, ``numpy.random`` and corenn from
  ``(base_seed, worker_id)`` - persistent workers included;
* shutdown closes the sockets (workers see EOF and exit), waits a moment,
  then terminates and kills stragglers and reaps them all.
"""
from __future__ import annotations

import itertools
import math
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import socket
import threading
import time
import warnings
import weakref

from . import _core, _transport
from ._fetch import IterableFetcher, MapFetcher
from ._worker import worker_loop
from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler, _InfiniteConstantSampler

__all__ = ["DataLoader", "WorkerError", "WorkerDiedError", "DataLoaderTimeoutError"]

_SHUTDOWN_GRACE_S = 1.0  # how long workers get to exit by themselves before SIGTERM


class WorkerError(RuntimeError):
    """Raised when a worker hit an exception and its type could not be
    re-created in the main process (usually it is re-raised with its own type)."""


class WorkerDiedError(RuntimeError):
    """A worker process died (killed, crashed, exited); ``worker_id``, ``pid``
    and ``exitcode`` (negative: minus the signal number) say which and how."""


class DataLoaderTimeoutError(RuntimeError):
    """No batch arrived within ``timeout`` seconds."""


class _KeyErrorMessage(str):
    """KeyError's str() is the repr of its argument; keep the traceback readable."""

    def __repr__(self):
        return self


def _rebuild_worker_exception(info: dict, batch: int) -> BaseException:
    msg = (f"Caught {info['type_name']} in DataLoader worker {info['worker_id']} (pid {info['pid']}) "
           f"while {info['where']} (batch {batch}).\nOriginal {info['traceback']}")
    try:  # the class travels pickled by reference, apart from the message, so that only it can fail here
        exc_type = pickle.loads(info["type"]) if info["type"] is not None else None
    except Exception:
        exc_type = None
    return _exception_like(exc_type, msg, info["worker_id"], info["pid"], info["where"])


def _exception_like(exc_type, msg: str, worker_id: int, pid: int, where: str) -> BaseException:
    """``exc_type(msg)`` with ``worker_id``, ``worker_pid`` and ``where`` set; a WorkerError if
    the type cannot be built from a message."""
    exc = None
    if isinstance(exc_type, type) and issubclass(exc_type, BaseException):
        try:
            exc = exc_type(_KeyErrorMessage(msg) if issubclass(exc_type, KeyError) else msg)
        except Exception:
            exc = None  # a constructor that wants other arguments
    if exc is None:
        exc = WorkerError(msg)
    exc.worker_id, exc.worker_pid, exc.where = worker_id, pid, where
    return exc


class _LostBatch:
    """A batch that arrived but could not be rebuilt in the main process (it failed to
    unpickle, or its shared memory could not be mapped). It takes its slot in the batch
    order, so the error is raised in turn and the iterator goes on with the next batch."""

    def __init__(self, exc: BaseException, worker_id: int, pid: int):
        self.exc, self.worker_id, self.pid = exc, worker_id, pid

    def exception(self, batch: int) -> BaseException:
        exc = self.exc
        where = f"rebuilding batch {batch} received from DataLoader worker {self.worker_id} (pid {self.pid}) " \
                f"in the main process"
        if not isinstance(exc, Exception):
            # An interrupt was raised when it happened; raising it again for the lost batch
            # would interrupt twice.
            err = WorkerError(f"batch {batch} was lost: {type(exc).__name__} while {where}")
            err.__cause__ = exc
            exc = err
        else:
            # The original exception itself, so nothing about it is lost (type, errno, attributes).
            note = f"(while {where}; the batch is lost, the iterator goes on with the next one)"
            if hasattr(exc, "add_note"):  # Python 3.11+; 3.10 keeps the where attribute only
                exc.add_note(note)
        try:
            exc.worker_id, exc.worker_pid, exc.where = self.worker_id, self.pid, where
        except AttributeError:  # an exception class with __slots__
            pass
        return exc


# --- bookkeeping shared by all loaders --------------------------------------------------

_live_iterators: weakref.WeakSet = weakref.WeakSet()
_parent_sockets: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child():
    # A forked child (a worker, or anything the user forks) must not hold the
    # main process's ends of other workers' sockets: those workers would
    # never see EOF. Nor may it try to shut down its parent's workers.
    for s in list(_parent_sockets):
        try:
            s.close()
        except OSError:
            pass
    _parent_sockets.clear()
    for it in list(_live_iterators):
        it._shutdown = True
    _live_iterators.clear()


def _shutdown_all_at_exit():
    for it in list(_live_iterators):
        it._shutdown_workers()


os.register_at_fork(after_in_child=_after_fork_in_child)
import atexit  # noqa: E402 - registered after multiprocessing's own handler, so it runs before it
atexit.register(_shutdown_all_at_exit)


def _default_context():
    # fork is fast and needs nothing picklable; respect a start method the
    # user chose explicitly with multiprocessing.set_start_method.
    if multiprocessing.get_start_method(allow_none=True) is None and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


# --- the loader -------------------------------------------------------------------------

class DataLoader:
    """Iterate over ``dataset`` in batches, optionally loading in
    ``num_workers`` worker processes. Arguments and defaults are PyTorch's.

    Example::

        loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, num_workers=2)
        for xb, yb in loader:
            ...

    Beyond PyTorch: workers reseed ``random`` and ``numpy.random`` per worker
    *and per epoch* (persistent workers too); batches reach the main process
    through anonymous shared memory; a worker's exception is re-raised with
    its worker id, index and traceback; a dead worker raises
    ``WorkerDiedError`` (pid and signal) at once; no worker outlives its
    iterator, the loader or the interpreter. ``pin_memory`` is accepted and
    ignored (there is no accelerator in the core).
    """

    __initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="", in_order=True):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             f"multiprocessing (got num_workers={num_workers!r})")
        if timeout < 0:
            raise ValueError(f"timeout option should be non-negative (got timeout={timeout!r})")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing. "
                             "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError(f"prefetch_factor option should be non-negative (got {prefetch_factor!r})")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order

        if isinstance(dataset, IterableDataset):
            self._dataset_kind_iterable = True
            if shuffle not in {False, None}:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle option, "
                                 f"but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler option, "
                                 f"but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                                 f"but got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
            self._dataset_kind_iterable = False
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, "
                                 "sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")

        if sampler is None:
            if self._dataset_kind_iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.__initialized = True
        self._IterableDataset_len_called = None
        self._iterator = None
        self.check_worker_number_rationality()

    @property
    def multiprocessing_context(self):
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, ctx):
        if ctx is not None:
            if self.num_workers == 0:
                raise ValueError("multiprocessing_context can only be used with multi-process loading "
                                 f"(num_workers > 0), but got num_workers={self.num_workers}")
            if isinstance(ctx, str):
                methods = multiprocessing.get_all_start_methods()
                if ctx not in methods:
                    raise ValueError(f"multiprocessing_context option should specify a valid start method in "
                                     f"{methods!r}, but got multiprocessing_context={ctx!r}")
                ctx = multiprocessing.get_context(ctx)
            if not isinstance(ctx, multiprocessing.context.BaseContext):
                raise TypeError("multiprocessing_context option should be a valid context object or a string "
                                f"specifying the start method, but got multiprocessing_context={ctx}")
        self.__multiprocessing_context = ctx

    def __setattr__(self, attr, val):
        if self.__initialized and attr in ("batch_size", "batch_sampler", "sampler", "drop_last",
                                           "dataset", "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        self.check_worker_number_rationality()
        return _MultiProcessIter(self)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None or self._iterator._shutdown:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self) -> int:
        if self._dataset_kind_iterable:
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else math.ceil(length / self.batch_size)
            return length
        return len(self._index_sampler)

    def check_worker_number_rationality(self) -> None:
        """Warn when more workers are asked for than there are usable CPUs."""
        if not self.num_workers:
            return
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count()
        if cpus is None or self.num_workers > cpus:
            warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in total. Our suggested "
                          f"max number of worker in current system is {cpus}, which is smaller than what this "
                          "DataLoader is going to create. Please be aware that excessive worker creation might "
                          "get DataLoader running slow or even freeze, lower the worker number to avoid potential "
                          "slowness/freeze if necessary.", stacklevel=3)

    def __del__(self):
        it = self.__dict__.get("_iterator")
        if it is not None:
            it._shutdown_workers()


# --- iterators ----------------------------------------------------------------------------

class _BaseIter:
    def __init__(self, loader: DataLoader):
        self._dataset = loader.dataset
        self._iterable = loader._dataset_kind_iterable
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._persistent = loader.persistent_workers
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = _core.draw_seed(loader.generator)
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called

    def __iter__(self):
        return self

    def _reset(self, loader):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called

    def _next_index(self):
        return next(self._sampler_iter)

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        if self._IterableDataset_len_called is not None and self._num_yielded > self._IterableDataset_len_called:
            msg = (f"Length of IterableDataset {self._dataset} was reported to be {self._IterableDataset_len_called} "
                   f"(when accessing len(dataloader)), but {self._num_yielded} samples have been fetched. ")
            if self._num_workers > 0:
                msg += ("For multiprocessing data-loading, this could be caused by not properly configuring the "
                        "IterableDataset replica at each worker (see get_worker_info()).")
            warnings.warn(msg, stacklevel=2)
        return data

    def __len__(self):
        return len(self._index_sampler)

    def __getstate__(self):
        raise TypeError(f"{type(self).__name__} cannot be pickled")


class _SingleProcessIter(_BaseIter):
    _shutdown = False

    def __init__(self, loader):
        super().__init__(loader)
        cls = IterableFetcher if self._iterable else MapFetcher
        self._fetcher = cls(self._dataset, self._auto_collation, self._collate_fn, self._drop_last)

    def _next_data(self):
        return self._fetcher.fetch(self._next_index())

    def _shutdown_workers(self):
        pass


_STOP = object()  # an IterableDataset worker ran out


class _MultiProcessIter(_BaseIter):
    def __init__(self, loader):
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        self._shutdown = False
        self._deferred_error = None  # raised by the next call (see _process_data and _receive)
        self._owner_pid = os.getpid()
        self._epoch = 0
        self._workers, self._socks = [], []
        ctx = loader.multiprocessing_context or _default_context()
        method = ctx.get_start_method()
        # Die-with-parent is tied to the *thread* that started the worker, so
        # only ask for it from the main thread; under forkserver the parent is
        # the server, not us.
        die_with_parent = method in ("fork", "spawn") and threading.current_thread() is threading.main_thread()
        _live_iterators.add(self)
        try:
            for i in range(self._num_workers):
                parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                _parent_sockets.add(parent_end)
                self._socks.append(parent_end)
                w = ctx.Process(
                    target=worker_loop, name=f"corenn DataLoader worker {i}", daemon=True,
                    args=(child_end, self._iterable, self._dataset, self._auto_collation, self._collate_fn,
                          self._drop_last, self._base_seed, loader.worker_init_fn, i, self._num_workers,
                          os.getpid(), die_with_parent))
                try:
                    w.start()
                finally:
                    child_end.close()  # only the worker holds it now: its death means EOF here
                self._workers.append(w)
        except BaseException:
            self._shutdown_workers()
            raise
        self._start_epoch()

    # -- epochs ------------------------------------------------------------------------

    def _start_epoch(self):
        n = self._num_workers
        self._send_idx = 0  # next task to send
        self._rcvd_idx = 0  # next task to return
        self._task_info = {}  # send_idx -> (worker_id,) while pending, (worker_id, data) once arrived
        self._tasks_outstanding = 0
        self._workers_status = [True] * n  # False once an IterableDataset worker ran out
        self._workers_num_tasks = [0] * n
        self._worker_cycle = itertools.cycle(range(n))
        for _ in range(self._prefetch_factor * n):
            self._try_put_index()

    def _reset(self, loader):
        """A new epoch on persistent workers: reseed them and restart their
        dataset iterators. Results still in flight from an abandoned epoch
        carry the old epoch number and are dropped on arrival."""
        super()._reset(loader)
        self._deferred_error = None  # it belonged to the abandoned epoch
        self._epoch += 1
        self._base_seed = _core.draw_seed(loader.generator)
        for wid in range(self._num_workers):
            self._send(wid, ("epoch", self._epoch, self._base_seed))
        self._start_epoch()

    # -- sending -------------------------------------------------------------------------

    def _send(self, wid, msg):
        try:
            _transport.send(self._socks[wid], msg)
            return
        except OSError:
            pass  # the worker is gone; report it outside this handler, without the BrokenPipe noise
        self._raise_worker_died(wid)

    def _try_put_index(self):
        max_tasks = self._prefetch_factor * self._num_workers
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):  # the next active worker, round-robin
            wid = next(self._worker_cycle)
            if self._workers_status[wid]:
                if self._in_order or self._workers_num_tasks[wid] < max_tasks // sum(self._workers_status):
                    break
        else:
            return
        self._send(wid, ("task", self._epoch, self._send_idx, index))
        self._task_info[self._send_idx] = (wid, index)
        self._workers_num_tasks[wid] += 1
        self._tasks_outstanding += 1
        self._send_idx += 1

    # -- receiving -----------------------------------------------------------------------

    def _next_data(self):
        if self._deferred_error is not None:
            err, self._deferred_error = self._deferred_error, None
            raise err
        if self._shutdown:
            raise StopIteration
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx)
                if info is not None:
                    if len(info) == 3 or self._workers_status[info[0]]:  # arrived, or may still arrive
                        break
                    del self._task_info[self._rcvd_idx]  # its worker ran out: nothing will come
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            info = self._task_info[self._rcvd_idx]
            if len(info) == 3:
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
                return self._process_data(info[2], info[0], self._rcvd_idx - 1)
            idx, wid, data = self._get_data()
            self._tasks_outstanding -= 1
            if data is _STOP:
                self._workers_status[wid] = False
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                if not self._in_order:
                    del self._task_info[idx]
                    return self._process_data(data, wid, idx)
                self._task_info[idx] += (data,)
            else:
                del self._task_info[idx]
                self._rcvd_idx += 1
                return self._process_data(data, wid, idx)

    def _process_data(self, data, wid, idx):
        self._workers_num_tasks[wid] -= 1
        try:
            self._try_put_index()
        except Exception as exc:
            if self._shutdown:  # a worker died: WorkerDiedError, and the loader has stopped
                raise
            # The sampler raised: this batch is still delivered, the error comes with the next call.
            self._deferred_error = exc
        if isinstance(data, _WorkerFailure):
            raise _rebuild_worker_exception(data.info, idx)
        if isinstance(data, _LostBatch):
            raise data.exception(idx)
        return data

    def _get_data(self):
        """The next result of this epoch from any worker: ``(send_idx, worker_id, data)``."""
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        sentinels = {w.sentinel: wid for wid, w in enumerate(self._workers)}
        socks = {s: wid for wid, s in enumerate(self._socks)}
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait([*socks, *sentinels], remaining)
            if not ready:
                self._raise_timeout()
            for obj in ready:  # sockets first: a result sent just before dying still counts
                if obj in socks:
                    try:
                        got = self._receive(socks[obj])
                    except _Gone:
                        got = _GONE
                    if got is _GONE:
                        self._raise_worker_died(socks[obj])
                    if got is not None:
                        return got
            for obj in ready:
                if obj in sentinels:
                    wid = sentinels[obj]
                    got = self._drain(wid)
                    if got is not None:
                        return got
                    self._raise_worker_died(wid)

    def _receive(self, wid):
        """One message from worker ``wid``: ``(send_idx, wid, data)``, or None
        if it belonged to an abandoned epoch. Raises _Gone at EOF."""
        try:
            msg, fd = _transport.recv(self._socks[wid])
        except (EOFError, OSError):
            raise _Gone from None
        except Exception as exc:
            # Messages hold only builtins and arrays, so this is a bug rather than bad data; the
            # stream is still in step, but which batch the message answered is unknown: stop.
            self._raise_broken(wid, exc)
        except BaseException as exc:
            # Ctrl-C part way through a message: the stream is out of step, so nothing more can
            # be read from it. Stop now, and say so at the next call rather than end silently.
            pid = self._workers[wid].pid
            self._shutdown_workers()
            err = WorkerError(f"DataLoader: interrupted ({type(exc).__name__}) while receiving a message from "
                              f"worker {wid} (pid {pid}); the iterator has stopped")
            err.worker_id, err.worker_pid, err.where = wid, pid, "receiving its message in the main process"
            self._deferred_error = err
            raise
        kind, epoch, idx = msg[0], msg[1], msg[2]
        if epoch != self._epoch:
            if fd is not None:
                os.close(fd)
            return None
        if kind != "batch":
            return idx, wid, (_STOP if kind == "stop" else _WorkerFailure(msg[3]))
        try:
            data = _transport.unpack(msg[3], fd)
        except BaseException as exc:
            data = _LostBatch(exc, wid, self._workers[wid].pid)
            if not isinstance(exc, Exception):
                # Ctrl-C while unpickling: the batch's slot still gets its answer, so the
                # next call raises for it instead of waiting for a batch that will not come.
                self._task_info[idx] += (data,)
                self._tasks_outstanding -= 1
                raise
        return idx, wid, data

    def _drain(self, wid):
        """Whatever a dead worker managed to send before dying, one message at a time."""
        while multiprocessing.connection.wait([self._socks[wid]], 0):
            try:
                got = self._receive(wid)
            except _Gone:
                return None
            if got is not None:
                return got
        return None

    # -- failures ------------------------------------------------------------------------

    def _pending_of(self, wid):
        return [(idx, info[1]) for idx, info in sorted(self._task_info.items()) if info[0] == wid and len(info) == 2]

    def _describe_pending(self, wid):
        pending = self._pending_of(wid)
        if not pending:
            return "while idle"
        idx, index = pending[0]
        what = "the next items of its dataset iterator" if self._iterable else f"indices {index!r}"
        more = f" ({len(pending) - 1} more batches were queued on it)" if len(pending) > 1 else ""
        return f"while loading batch {idx}: {what}{more}"

    def _raise_worker_died(self, wid):
        w = self._workers[wid]
        pid = w.pid
        w.join(timeout=1.0)  # the sentinel fired or the socket closed: the exit status is (nearly) there
        code = w.exitcode
        if code is None:
            how = "closed its connection unexpectedly"
        elif code < 0:
            sig = signal.Signals(-code)
            how = f"was killed by signal {sig.name} ({signal.strsignal(sig)})"
        else:
            how = f"exited unexpectedly with exit code {code}"
        hint = ""
        if code == -signal.SIGKILL:
            hint = " SIGKILL is also how the kernel's out-of-memory killer ends a process; check `dmesg`."
        elif code in (-signal.SIGSEGV, -signal.SIGBUS, -signal.SIGABRT):
            hint = " A crash in native code: its traceback (faulthandler) is on the worker's stderr."
        msg = f"DataLoader worker {wid} (pid {pid}) {how} {self._describe_pending(wid)}.{hint}"
        self._shutdown_workers()
        err = WorkerDiedError(msg)
        err.worker_id, err.pid, err.exitcode = wid, pid, code
        raise err

    def _raise_broken(self, wid, exc):
        pid = self._workers[wid].pid
        self._shutdown_workers()
        err = WorkerError(f"DataLoader: a message from worker {wid} (pid {pid}) could not be read "
                          f"({type(exc).__name__}: {exc}); which batch it carried is unknown, so the "
                          f"iterator has stopped")
        err.worker_id, err.worker_pid, err.where = wid, pid, "reading its message in the main process"
        raise err from exc

    def _raise_timeout(self):
        info = self._task_info.get(self._rcvd_idx)
        who = ""
        if info is not None:
            wid = info[0]
            who = f" for batch {self._rcvd_idx} from worker {wid} (pid {self._workers[wid].pid}) {self._describe_pending(wid)}"
        self._shutdown_workers()
        raise DataLoaderTimeoutError(f"DataLoader timed out after {self._timeout} seconds waiting{who}")

    # -- shutdown ------------------------------------------------------------------------

    def _shutdown_workers(self):
        if self._shutdown or getattr(self, "_owner_pid", None) != os.getpid():
            return
        self._shutdown = True
        _live_iterators.discard(self)
        for s in self._socks:
            try:
                s.close()  # workers read EOF (or fail to send) and exit
            except OSError:
                pass
        workers = [w for w in self._workers if w._popen is not None]
        deadline = time.monotonic() + _SHUTDOWN_GRACE_S
        for stage in ("wait", "terminate", "kill"):
            alive = [w for w in workers if w.exitcode is None]
            if not alive:
                break
            if stage == "terminate":
                for w in alive:
                    w.terminate()
                deadline = time.monotonic() + 1.0
            elif stage == "kill":
                for w in alive:
                    w.kill()
                deadline = time.monotonic() + 5.0
            while alive and time.monotonic() < deadline:
                multiprocessing.connection.wait([w.sentinel for w in alive], deadline - time.monotonic())
                alive = [w for w in alive if w.exitcode is None]
        for w in workers:
            w.join(timeout=0)  # reap, so no zombie is left
            try:
                w.close()
            except ValueError:
                pass

    def __del__(self):
        try:
            self._shutdown_workers()
        except Exception:
            pass


class _WorkerFailure:
    def __init__(self, info):
        self.info = info


class _Gone(Exception):
    pass


_GONE = object()
