"""``corenn.multiprocessing.spawn``: run ``fn(i, *args)`` in ``nprocs`` processes, join, report failures by process."""
from __future__ import annotations

import multiprocessing
import signal
import time
import traceback

__all__ = ["spawn", "start_processes", "ProcessContext", "ProcessRaisedException", "ProcessExitedException"]


class ProcessException(Exception):
    def __init__(self, msg: str, error_index: int, error_pid: int):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, error_pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised: the message names it and holds its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero code (or a signal) without raising."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _wrap(fn, i, args, error_queue):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        error_queue.put(traceback.format_exc())
        raise SystemExit(1)


class ProcessContext:
    """The processes of one ``start_processes`` call; ``join()`` until all end or one fails."""

    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None) -> bool:
        """Wait; True when all ended well, False on timeout. A failure terminates the others and raises."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            alive = [p for p in self.processes if p.is_alive()]
            failed = [i for i, p in enumerate(self.processes) if p.exitcode not in (None, 0)]
            if failed:
                self._fail(failed[0])
            if not alive:
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            multiprocessing.connection.wait([p.sentinel for p in alive], timeout=0.1)

    def _fail(self, index: int):
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        for p in self.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        process = self.processes[index]
        if not self.error_queues[index].empty():
            original = self.error_queues[index].get()
            raise ProcessRaisedException(f"\n\n-- Process {index} terminated with the following error:\n{original}",
                                         index, process.pid)
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(f"process {index} terminated with signal {name}", index, process.pid,
                                         code, name)
        raise ProcessExitedException(f"process {index} terminated with exit code {code}", index, process.pid, code)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start ``nprocs`` processes running ``fn(i, *args)`` with ``start_method``; join them if ``join``."""
    context = multiprocessing.get_context(start_method)
    processes, error_queues = [], []
    for i in range(nprocs):
        error_queue = context.SimpleQueue()
        process = context.Process(target=_wrap, args=(fn, i, args, error_queue), daemon=daemon)
        process.start()
        processes.append(process)
        error_queues.append(error_queue)
    process_context = ProcessContext(processes, error_queues)
    if not join:
        return process_context
    while not process_context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``torch.multiprocessing.spawn``: ``fn(i, *args)`` for ``i`` in ``range(nprocs)``, joined; a failure raises
    ``ProcessRaisedException`` ("-- Process 1 terminated with the following error: ...")."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
