"""Failures in workers: an exception, a SIGKILL, a segfault, an exit, a hang.
Each raises a documented error within seconds, and afterwards no worker
process and no shared-memory segment remains. Also: interpreter exit and a
killed main process leave no workers behind."""
import errno
import gc
import json
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

# How soon a failure must be reported. Generous, because a loaded 2-core machine can stall a
# process for seconds; still well below a hang: the hanging sample sleeps HANG_S and the
# loaders time out after HANG_S, so a failure the loader misses cannot pass.
PROMPT_S = 20
HANG_S = 60


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
                time.sleep(HANG_S)
        time.sleep(0.001)
        return np.full((3, 32, 32), i, np.float32)


def loader(bad, how, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("timeout", HANG_S)  # a failure the loader missed ends as a timeout, not a hung test
    return DataLoader(Faulty(bad, how), num_workers=2, **kw)


def test_worker_exception_reraised_with_worker_index_and_traceback():
    it = iter(loader(bad=17, how="raise"))
    got = []
    t0 = time.monotonic()
    with pytest.raises(ValueError) as excinfo:
        for b in it:
            got.append(b)
    assert time.monotonic() - t0 < PROMPT_S
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
    assert time.monotonic() - t0 < PROMPT_S
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
    it = iter(DataLoader(ds, batch_size=4, num_workers=2, timeout=HANG_S))
    next(it)
    victim = sorted(child_pids())[1]
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(WorkerDiedError) as excinfo:
        for _ in it:
            pass
    assert time.monotonic() - t0 < PROMPT_S
    assert excinfo.value.pid == victim and "SIGKILL" in str(excinfo.value)
    assert "out-of-memory" in str(excinfo.value)  # the hint for SIGKILL
    assert child_pids() == []


def test_timeout():
    t0 = time.monotonic()
    with pytest.raises(DataLoaderTimeoutError, match=r"timed out after 0.5 seconds.*batch 1") as excinfo:
        list(loader(bad=5, how="hang", timeout=0.5))
    assert isinstance(excinfo.value, RuntimeError)  # PyTorch raises RuntimeError here
    assert time.monotonic() - t0 < PROMPT_S
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


def wait_gone(pids, seconds=PROMPT_S):
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
    left = wait_gone(pids)
    assert left == [], [open(f"/proc/{p}/status").read()[:300] for p in left]


# --- a batch that arrives but cannot be rebuilt in the main process keeps its slot ---------------
# Every loader here has a timeout: if a slot were lost, the test fails with DataLoaderTimeoutError
# instead of hanging.

def _explode(i):
    raise ValueError(f"cannot rebuild sample {i}")


class RebuildsBadly:
    """Pickles fine in the worker; unpickling it in the main process raises."""

    def __init__(self, i):
        self.i = i

    def __reduce__(self):
        return (_explode, (self.i,))


def _interrupt():
    raise KeyboardInterrupt


class Interrupts:
    def __reduce__(self):
        return (_interrupt, ())


class Tagged(Dataset):
    """Item ``i`` is ``(array, tag)``: the array is big enough for shared memory, the tag is
    ``make_bad(i)`` at ``bad``."""

    def __init__(self, bad, make_bad, n=6):
        self.bad, self.make_bad, self.n = bad, make_bad, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full((4, 32, 32), i, np.float32), (self.make_bad(i) if i == self.bad else i)


def drain(it):
    """Every outcome of ``it``: ``("ok", tag)`` or ``("error", exception)``, until StopIteration."""
    out = []
    while True:
        try:
            out.append(("ok", next(it)[1]))
        except StopIteration:
            return out
        except Exception as e:
            assert not isinstance(e, DataLoaderTimeoutError), "a batch's slot was lost"
            out.append(("error", e))


def test_batch_that_fails_to_unpickle_in_main_process_keeps_its_slot():
    it = iter(DataLoader(Tagged(2, RebuildsBadly), batch_size=None, num_workers=2, timeout=30))
    out = drain(it)
    assert [o[1] for o in out if o[0] == "ok"] == [0, 1, 3, 4, 5]  # in order, none lost, none waited for
    assert [o[0] for o in out] == ["ok", "ok", "error", "ok", "ok", "ok"]  # raised in its turn
    err = out[2][1]
    assert isinstance(err, ValueError) and str(err) == "cannot rebuild sample 2"  # the exception itself
    assert err.where == f"rebuilding batch 2 received from DataLoader worker 0 (pid {err.worker_pid}) in the main process"
    assert err.worker_id == 0
    if sys.version_info >= (3, 11):
        assert "while rebuilding batch 2" in "".join(err.__notes__)


def test_unpickling_failure_with_in_order_false_loses_nothing():
    it = iter(DataLoader(Tagged(2, RebuildsBadly, n=12), batch_size=None, num_workers=2, timeout=30,
                         in_order=False))
    out = drain(it)
    assert sorted(o[1] for o in out if o[0] == "ok") == [i for i in range(12) if i != 2]
    errors = [o[1] for o in out if o[0] == "error"]
    assert len(errors) == 1 and "batch 2" in errors[0].where


def test_interrupt_while_rebuilding_a_batch_does_not_lose_its_slot():
    it = iter(DataLoader(Tagged(1, lambda i: Interrupts()), batch_size=None, num_workers=1, timeout=30))
    assert next(it)[1] == 0
    with pytest.raises(KeyboardInterrupt):
        next(it)
    # The interrupted batch answers for itself (a RuntimeError, not a second KeyboardInterrupt);
    # the next call must not wait for it.
    with pytest.raises(RuntimeError, match="rebuilding batch 1") as excinfo:
        next(it)
    assert not isinstance(excinfo.value, DataLoaderTimeoutError)
    assert [o[1] for o in drain(it)] == [2, 3, 4, 5]


def test_shared_memory_that_cannot_be_mapped_loses_only_its_batch(monkeypatch):
    from corenn.utils.data import _transport
    real_map, calls = _transport._map, []

    def flaky_map(fd, size):
        calls.append(size)
        if len(calls) == 2:
            raise OSError(12, "Cannot allocate memory")
        return real_map(fd, size)

    monkeypatch.setattr(_transport, "_map", flaky_map)
    out = drain(iter(DataLoader(Tagged(-1, None), batch_size=None, num_workers=1, timeout=30)))
    assert [o[0] for o in out] == ["ok", "error", "ok", "ok", "ok", "ok"]
    assert isinstance(out[1][1], OSError) and out[1][1].errno == 12 and "rebuilding batch 1" in out[1][1].where


class GhostError(Exception):
    pass


def _raise_ghost(i):
    # A class the worker can pickle by reference but the main process cannot import.
    import types
    ghost = types.ModuleType("corenn_test_ghost_module")
    GhostError.__module__ = ghost.__name__
    ghost.GhostError = GhostError
    sys.modules[ghost.__name__] = ghost
    raise GhostError(f"ghost at {i}")


def test_worker_exception_of_a_class_the_main_process_cannot_import():
    it = iter(DataLoader(Tagged(1, _raise_ghost), batch_size=None, num_workers=1, timeout=30))
    out = drain(it)
    assert [o[0] for o in out] == ["ok", "error", "ok", "ok", "ok", "ok"]
    err = out[1][1]
    assert "Caught GhostError in DataLoader worker 0" in str(err) and "ghost at 1" in str(err)
    assert "corenn_test_ghost_module" not in sys.modules  # only the worker had it


def test_many_live_shared_memory_batches_hold_no_file_descriptors():
    # Each live batch used to hold a descriptor (Python's mmap keeps a duplicate), so keeping
    # a few hundred under a low `ulimit -n` failed with a bare "Too many open files".
    script = textwrap.dedent("""
        import json, os, resource, sys
        import numpy as np
        sys.path.insert(0, {repo!r})
        from corenn.utils.data import DataLoader, Dataset
        class Big(Dataset):
            def __len__(self): return 400
            def __getitem__(self, i): return np.full((4, 32, 32), i, np.float32)
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        kept = list(DataLoader(Big(), batch_size=None, num_workers=2, timeout=60))
        ok = all(float(b[0, 0, 0]) == i for i, b in enumerate(kept))
        print(json.dumps({{"batches": len(kept), "values_ok": ok, "open_fds": len(os.listdir("/proc/self/fd"))}}))
    """).format(repo=REPO)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"batches": 400, "values_ok": True, "open_fds": report["open_fds"]}
    assert report["open_fds"] < 32


def test_batch_whose_descriptor_cannot_be_received_says_what_to_do():
    # At the open-file limit the kernel drops a passed descriptor; that batch is lost with an
    # error saying so (and what to do), and the next one arrives once descriptors are free.
    script = textwrap.dedent("""
        import json, os, resource, sys
        import numpy as np
        sys.path.insert(0, {repo!r})
        from corenn.utils.data import DataLoader, Dataset
        class Big(Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): return np.full((4, 32, 32), i, np.float32)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        it = iter(DataLoader(Big(), batch_size=None, num_workers=1, timeout=60))
        out = [float(next(it)[0, 0, 0])]
        filler = []
        try:
            while True:
                filler.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        try:
            next(it)
        except Exception as e:
            out.append([type(e).__name__, getattr(e, "errno", None), e.where, str(e)])
        for fd in filler:
            os.close(fd)
        out += [float(b[0, 0, 0]) for b in it]
        print(json.dumps(out))
    """).format(repo=REPO)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    first, (name, err_no, where, message), *rest = json.loads(result.stdout.strip().splitlines()[-1])
    assert first == 0.0 and rest == [2.0, 3.0]
    assert name == "OSError" and err_no == errno.EMFILE, message
    assert where.startswith("rebuilding batch 1 ")
    assert "too many open files (RLIMIT_NOFILE is 64)" in message and "ulimit -n" in message


class FailingSampler:
    """Yields batches of indices; raises on the ``bad``-th draw."""

    def __init__(self, bad, n=8):
        self.bad, self.n = bad, n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            if i == self.bad:
                raise LookupError(f"sampler broke at draw {i}")
            yield [i]


def test_a_sampler_error_loses_no_batch_already_drawn():
    # The sampler is asked for the next indices while a batch is being handed out; its error
    # used to replace that batch, which was lost.
    loader = DataLoader(Tagged(-1, None, n=8), batch_sampler=FailingSampler(5), num_workers=2, timeout=30)
    out = drain(iter(loader))
    tags = [o[1].tolist() for o in out if o[0] == "ok"]
    errors = [o[1] for o in out if o[0] == "error"]
    assert tags == [[0], [1], [2], [3], [4]]  # every batch whose indices were drawn
    assert len(errors) == 1 and isinstance(errors[0], LookupError) and "draw 5" in str(errors[0])


def test_interrupt_while_receiving_a_message_stops_the_loader_and_says_so(monkeypatch):
    from corenn.utils.data import WorkerError, _transport
    real_recv, calls, main = _transport.recv, [], os.getpid()

    def interrupted_recv(sock):
        if os.getpid() == main:  # forked workers inherit the patch
            calls.append(1)
        if len(calls) == 2 and os.getpid() == main:
            raise KeyboardInterrupt
        return real_recv(sock)

    monkeypatch.setattr(_transport, "recv", interrupted_recv)
    it = iter(DataLoader(Tagged(-1, None), batch_size=None, num_workers=1, timeout=30))
    assert next(it)[1] == 0
    with pytest.raises(KeyboardInterrupt):
        next(it)
    with pytest.raises(WorkerError, match="interrupted .KeyboardInterrupt. while receiving a message from worker 0"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert child_pids() == []


def test_an_unreadable_message_stops_the_loader_with_an_error(monkeypatch):
    # Messages hold only builtins and arrays, so this takes a bug; which batch such a message
    # carried is unknown, so the loader stops rather than wait for it.
    import pickle

    from corenn.utils.data import WorkerError, _transport
    real_recv, main = _transport.recv, os.getpid()

    def garbled_recv(sock):
        message, fd = real_recv(sock)
        if os.getpid() == main:
            if fd is not None:
                os.close(fd)  # as recv does when its message cannot be read
            raise pickle.UnpicklingError("garbled")
        return message, fd

    monkeypatch.setattr(_transport, "recv", garbled_recv)
    it = iter(DataLoader(Tagged(-1, None), batch_size=None, num_workers=1, timeout=30))
    with pytest.raises(WorkerError, match="a message from worker 0 .* could not be read .UnpicklingError: garbled.") as info:
        next(it)
    assert isinstance(info.value.__cause__, pickle.UnpicklingError)
    with pytest.raises(StopIteration):
        next(it)
    assert child_pids() == []
