"""Leak checks shared by the DataLoader tests: worker processes and shared-memory batches, read from /proc."""
import gc
import multiprocessing
import os
import signal
import time

import pytest


def child_pids(parent=None):
    """Live children of ``parent`` (this process by default), not counting multiprocessing's resource tracker."""
    parent, out = parent or os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    # spawn starts the resource tracker once per interpreter; it is not a worker
                    helper = b"resource_tracker" in f.read()
            except OSError:
                continue
            if int(fields[1]) == parent and not helper:
                out.append(int(d))
    return out


def running(pid):
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def batch_memfds():
    """Shared-memory batch files this process still maps or holds open."""
    with open("/proc/self/maps") as f:
        n = sum("memfd:corenn-batch" in line for line in f)
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += "memfd:corenn-batch" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return n


@pytest.fixture(autouse=True)
def no_leaks():
    """After each test: no worker left (killed anyway, so later tests start clean), no /dev/shm file, no batch memfd."""
    shm_before, kids_before = set(os.listdir("/dev/shm")), set(child_pids())
    yield
    gc.collect()
    deadline = time.monotonic() + 5
    while set(child_pids()) - kids_before and time.monotonic() < deadline:
        time.sleep(0.02)
    leaked = set(child_pids()) - kids_before
    for pid in leaked:
        os.kill(pid, signal.SIGKILL)
    multiprocessing.active_children()
    assert not leaked, f"worker processes left behind: {leaked}"
    assert set(os.listdir("/dev/shm")) <= shm_before
    assert batch_memfds() == 0
