"""Failures in workers: an exception, a SIGKILL, a segfault, an exit, a hang.
Each raises a documented error within seconds, and afterwards no worker
process and no shared-memory segment remains. Also: interpreter exit and a
killed main process leave no workers behind."""
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from corenn.utils.data import DataLoader, DataLoaderTimeoutError, Dataset, WorkerDiedError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


from _process_leaks import batch_memfds, child_pids, no_leaks, running  # noqa: F401 (no_leaks: autouse)


class Faulty(Dataset):
    """Loads 3x32x32 arrays (big enough for shared memory); misbehaves at ``bad``."""

    def __init__(self, bad, how, n=64):
        self.bad, self.how, self.n = bad, how, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            if self.how == "raise":
                raise ValueError(f"corrupt sample {i}")
            if self.how == "keyerror":
                raise KeyError(f"missing {i}")
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "segfault":
                import ctypes
                ctypes.string_at(0)
            if self.how == "exit":
                os._exit(3)
            if self.how == "hang":
                time.sleep(60)
        time.sleep(0.001)
        return np.full((3, 32, 32), i, np.float32)


def loader(bad, how, **kw):
    kw.setdefault("batch_size", 4)
    return DataLoader(Faulty(bad, how), num_workers=2, **kw)


def test_worker_exception_reraised_with_worker_index_and_traceback():
    it = iter(loader(bad=17, how="raise"))
    got = []
    t0 = time.monotonic()
    with pytest.raises(ValueError) as excinfo:
        for b in it:
            got.append(b)
    assert time.monotonic() - t0 < 5
    msg = str(excinfo.value)
    assert "Caught ValueError in DataLoader worker 0" in msg  # batch 4 went to worker 0
    assert "while loading index 17" in msg
    assert "corrupt sample 17" in msg and 'raise ValueError(f"corrupt sample {i}")' in msg  # original traceback
    assert excinfo.value.worker_id == 0
    assert len(got) == 4  # batches before the failing one were delivered, in order
    # as in PyTorch, the loader can go on after a dataset error
    rest = list(it)
    assert len(rest) == 16 - 5
    assert child_pids() == []  # the epoch ended: workers are gone


def test_key_error_message_stays_readable():
    with pytest.raises(KeyError) as excinfo:
        list(loader(bad=2, how="keyerror"))
    assert "\n" in str(excinfo.value) and "missing 2" in str(excinfo.value)


@pytest.mark.parametrize("how,signame", [("sigkill", "SIGKILL"), ("segfault", "SIGSEGV")])
def test_dying_worker_reported_with_pid_and_signal(how, signame):
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError) as excinfo:
        list(loader(bad=9, how=how))
    assert time.monotonic() - t0 < 5
    err = excinfo.value
    assert isinstance(err, RuntimeError)
    assert f"DataLoader worker 0 (pid {err.pid}) was killed by signal {signame}" in str(err)
    assert "indices [8, 9, 10, 11]" in str(err)
    assert err.exitcode == -getattr(signal, signame)
    assert child_pids() == []  # shut down at once, even while the traceback keeps the iterator alive


def test_worker_exit_code_reported():
    with pytest.raises(WorkerDiedError, match=r"exited unexpectedly with exit code 3"):
        list(loader(bad=30, how="exit"))
    assert child_pids() == []


def test_worker_killed_from_outside_mid_epoch():
    ds = Faulty(bad=-1, how=None, n=400)
    it = iter(DataLoader(ds, batch_size=4, num_workers=2))
    next(it)
    victim = sorted(child_pids())[1]
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError) as excinfo:
        for _ in it:
            pass
    assert time.monotonic() - t0 < 3
    assert excinfo.value.pid == victim and "SIGKILL" in str(excinfo.value)
    assert "out-of-memory" in str(excinfo.value)  # the hint for SIGKILL
    assert child_pids() == []


def test_timeout():
    t0 = time.monotonic()
    with pytest.raises(DataLoaderTimeoutError, match=r"timed out after 0.5 seconds.*batch 1") as excinfo:
        list(loader(bad=5, how="hang", timeout=0.5))
    assert isinstance(excinfo.value, RuntimeError)  # PyTorch raises RuntimeError here
    assert time.monotonic() - t0 < 5
    assert child_pids() == []  # the hung worker was terminated


def test_worker_init_fn_error():
    def init(worker_id):
        raise OSError(f"cannot open database in worker {worker_id}")

    with pytest.raises(OSError, match="(?s)running worker_init_fn.*cannot open database in worker 0"):
        list(DataLoader(Faulty(-1, None), num_workers=2, worker_init_fn=init))


def test_deleting_a_persistent_loader_stops_its_workers():
    dl = loader(bad=-1, how=None, persistent_workers=True)
    next(iter(dl))
    pids = child_pids()
    assert len(pids) == 2
    del dl
    gc.collect()
    assert not any(running(p) for p in pids)


def run_script(body: str, kill_after_pids: bool = False):
    """Run ``body`` in a fresh interpreter that prints its worker pids."""
    script = textwrap.dedent("""
        import os, sys, time, numpy as np
        sys.path.insert(0, {repo!r})
        from corenn.utils.data import DataLoader, Dataset
        class Slow(Dataset):
            def __len__(self): return 1000
            def __getitem__(self, i):
                time.sleep(0.01)
                return np.zeros((3, 32, 32), np.float32)
        def worker_pids():
            me = str(os.getpid())
            return [d for d in os.listdir('/proc') if d.isdigit() and
                    open(f'/proc/{{d}}/stat').read().rsplit(')', 1)[1].split()[1] == me]
    """).format(repo=REPO) + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    if kill_after_pids:
        proc.kill()
    proc.wait(timeout=20)
    return pids


def wait_gone(pids, seconds=5):
    deadline = time.monotonic() + seconds
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if running(p)]


def test_interpreter_exit_mid_epoch_leaves_no_workers():
    pids = run_script("""
        persistent = DataLoader(Slow(), batch_size=4, num_workers=2, persistent_workers=True)
        next(iter(persistent))
        it = iter(DataLoader(Slow(), batch_size=4, num_workers=2))
        next(it)
        print(*worker_pids(), flush=True)
        # exit without any cleanup, iterators still alive
    """)
    assert len(pids) == 4
    assert wait_gone(pids) == []


def test_killed_main_process_leaves_no_workers():
    pids = run_script("""
        it = iter(DataLoader(Slow(), batch_size=4, num_workers=2))
        next(it)
        print(*worker_pids(), flush=True)
        time.sleep(30)
    """, kill_after_pids=True)
    assert len(pids) == 2, pids
    left = wait_gone(pids, seconds=15)  # prompt when idle; a loaded 2-core machine can take seconds to schedule exits
    assert left == [], [open(f"/proc/{p}/status").read()[:300] for p in left]
