"""What the launcher runs on each rank: a small watcher process, and under it the user's script as __main__.

``python .../_rank.py script.py args`` (or ``-m module args``), run as a file so that it
imports nothing heavy. The watcher sets torchrun's environment from MPI's and starts
the rank itself (this file again, with ``--rank-process``), which inherits MPI's
connection to ``mpiexec``. So when the rank dies without a word (killed, crashed), the
watcher sees how, writes that where the launcher collects reports, and keeps the
connection open for a grace period: ``mpiexec`` does not tear the job down at once, and
the other ranks raise ``DistributedError`` naming the dead rank (they watch their peers'
pids). An uncaught exception in the script is reported by the rank process itself
(printed with its rank, sent to the other ranks).
"""
from __future__ import annotations

import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import time

ENV_ERROR_DIR = "CORENN_DISTRIBUTED_ERROR_DIR"            # as corenn_distributed.mpi.ENV_ERROR_DIR
ENV_DEAD_RANK_GRACE = "CORENN_DISTRIBUTED_DEAD_RANK_GRACE"  # seconds the watcher keeps a dead rank's place

# (rank, size, local rank, local size) as MPICH's hydra and Open MPI name them
_MPI_ENVIRONMENTS = (("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                      "OMPI_COMM_WORLD_LOCAL_SIZE"))


def set_torchrun_environment(environ=os.environ) -> None:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` from the MPI launcher's variables."""
    for rank, size, local_rank, local_size in _MPI_ENVIRONMENTS:
        if rank in environ:
            # MPI's values win over any inherited from the launching shell.
            environ["RANK"] = environ[rank]
            environ["WORLD_SIZE"] = environ.get(size, "1")
            environ["LOCAL_RANK"] = environ.get(local_rank, environ[rank])
            environ["LOCAL_WORLD_SIZE"] = environ.get(local_size, environ.get(size, "1"))
            return


def _die_with_parent() -> None:
    """Linux: the rank gets SIGKILL if its watcher goes (mpiexec's cleanup kills the watcher)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_rank(args: list[str]) -> None:
    _die_with_parent()
    import corenn  # noqa: F401  (loads the plugins, this one included, before the script runs)
    from corenn_distributed.mpi import install_excepthook
    install_excepthook()
    if args[0] == "-m":
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def watch(args: list[str]) -> int:
    set_torchrun_environment()
    # close_fds=False: the rank inherits MPI's connection to mpiexec (PMI_FD), which it needs to join the job.
    child = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--rank-process", *args], close_fds=False)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    returncode = child.wait()
    if returncode >= 0:
        return returncode
    signal_name = signal.Signals(-returncode).name
    error_dir = os.environ.get(ENV_ERROR_DIR)
    rank = int(os.environ.get("RANK", "-1"))
    sys.stderr.write(f"[rank {rank}]: the rank process (pid {child.pid}) was killed by {signal_name}\n")
    sys.stderr.flush()
    if error_dir and rank >= 0:
        report = {"rank": rank, "pid": child.pid, "host": socket.gethostname(), "time": time.time(),
                  "type": signal_name, "message": f"killed by {signal_name}",
                  "traceback": f"rank {rank} (pid {child.pid}) was killed by {signal_name}: no Python traceback "
                               "(killed from outside, out of memory, or a crash in native code)",
                  "caused_by": None}
        with open(os.path.join(error_dir, f"rank{rank}.json"), "w") as file:
            json.dump(report, file)
    # Hold the rank's place so the others can notice and report it before mpiexec ends the job.
    time.sleep(float(os.environ.get(ENV_DEAD_RANK_GRACE, "10")))
    return 128 - returncode


def main() -> None:
    args = sys.argv[1:]
    if not args or args == ["--rank-process"]:
        sys.exit("usage: _rank.py script.py [args] | -m module [args]")
    if args[0] == "--rank-process":
        run_rank(args[1:])
    else:
        sys.exit(watch(args))


if __name__ == "__main__":
    main()
