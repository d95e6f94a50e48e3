"""Helpers (imported by conftest.py): start real MPI jobs through the launcher, bounded in time, leaving no process behind."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import corenn


def mpi_missing_reason() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install 'corenn-distributed[mpi]')"
    from corenn_distributed.run import find_mpiexec
    try:
        find_mpiexec()
    except FileNotFoundError as error:
        return str(error)
    return None


needs_mpi = pytest.mark.skipif(mpi_missing_reason() is not None, reason=str(mpi_missing_reason()))


def _processes_running(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    if marker.encode() in file.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


class Job:
    def __init__(self, returncode, stdout, stderr, seconds):
        self.returncode, self.stdout, self.stderr, self.seconds = returncode, stdout, stderr, seconds

    def __repr__(self):
        return f"<Job rc={self.returncode} {self.seconds:.1f}s>\n--stdout--\n{self.stdout[-4000:]}\n" \
               f"--stderr--\n{self.stderr[-6000:]}"


@pytest.fixture
def launch(tmp_path):
    """``launch(source, nproc=2, args=(), timeout=60, env={})``: run ``source`` as a script on ``nproc`` ranks."""
    count = [0]

    def run(source: str, nproc: int = 2, args=(), timeout: float = 60, env=None) -> Job:
        count[0] += 1
        script = tmp_path / f"job{count[0]}_{os.getpid()}.py"
        script.write_text(textwrap.dedent(source))
        environment = dict(os.environ, **(env or {}))
        environment.setdefault("CORENN_DISTRIBUTED_DEAD_RANK_GRACE", "5")
        start = time.monotonic()
        process = subprocess.Popen([sys.executable, "-m", "corenn.distributed.run", "--nproc-per-node", str(nproc),
                                    str(script), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=environment, cwd=tmp_path, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"the job did not end within {timeout} s (a hang):\n{stdout[-3000:]}\n{stderr[-3000:]}")
        finally:
            # Whatever happened, nothing of the job may outlive it.
            deadline = time.monotonic() + 10
            while _processes_running(str(script)) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = _processes_running(str(script))
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            assert not left, f"processes left behind by the job: {left}"
        return Job(process.returncode, stdout, stderr, time.monotonic() - start)
    return run


@pytest.fixture(autouse=True)
def _no_default_group_left():
    yield
    import corenn.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
