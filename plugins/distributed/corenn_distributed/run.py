"""The launcher: ``python -m corenn.distributed.run --nproc-per-node N script.py [args]`` (torchrun's role, on MPI).

It runs ``mpiexec -n N python -m corenn_distributed._rank script.py args``: each rank gets
torchrun's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``)
from MPI's and reports an uncaught exception with its rank. When the job ends, a rank that
failed is named with its real traceback (the first one to fail, not the ranks that
failed because of it), and the launcher exits with the job's exit code.

Each rank runs under a small watcher (``corenn_distributed/_rank.py``): a rank that dies
without a word (killed, crashed) is reported by its watcher, which holds its place for a
few seconds so that ``mpiexec`` does not end the job before the other ranks have raised
``DistributedError`` naming it. Scripts run with ``mpiexec`` directly work too; there a
dead rank makes ``mpiexec`` end the job at once, and the summary is missing.

Flags: ``--nproc-per-node N`` (``--nproc_per_node``), ``--nnodes 1`` (more nodes: pass a
host file with ``--mpi-arg=-f --mpi-arg=hosts``), ``--mpiexec PATH`` (default: the one
next to this Python, else on PATH, else ``$CORENN_MPIEXEC``), ``--mpi-arg ARG`` (repeatable,
passed to mpiexec), ``-m`` (run a module), ``--no-python`` (run an executable).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from corenn_distributed.mpi import ENV_ERROR_DIR

__all__ = ["main", "find_mpiexec", "build_command"]


def find_mpiexec(explicit: str | None = None) -> str:
    """The mpiexec to use: ``explicit``, ``$CORENN_MPIEXEC``, the one beside this Python (pip's mpich), or PATH's."""
    for candidate in (explicit, os.environ.get("CORENN_MPIEXEC"),
                      os.path.join(os.path.dirname(sys.executable), "mpiexec"), shutil.which("mpiexec")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("corenn.distributed.run: no mpiexec found; pip install 'corenn-distributed[mpi]' "
                            "(mpich), or pass --mpiexec /path/to/mpiexec")


def build_command(args) -> list[str]:
    """The mpiexec command line for the parsed ``args``."""
    mpiexec = find_mpiexec(args.mpiexec)
    command = [mpiexec, "-n", str(args.nproc_per_node * args.nnodes)]
    command += list(args.mpi_arg or [])
    if args.no_python:
        return command + [args.script, *args.script_args]
    # Run as a file: the watcher imports neither corenn nor this package.
    # (__file__ is not set when this runs as ``python -m corenn.distributed.run``: ask the package.)
    import corenn_distributed
    runner = [sys.executable, "-u", os.path.join(os.path.dirname(corenn_distributed.__file__), "_rank.py")]
    if args.module:
        runner.append("-m")
    return command + runner + [args.script, *args.script_args]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m corenn.distributed.run",
                                     description="Run a script on N processes over MPI (torchrun for corenn).")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, dest="nproc_per_node",
                        help="processes on this node (default 1)")
    parser.add_argument("--nnodes", type=int, default=1, help="nodes (a host file goes in --mpi-arg)")
    parser.add_argument("--mpiexec", default=None, help="the mpiexec to run")
    parser.add_argument("--mpi-arg", action="append", default=[], help="an argument for mpiexec (repeatable)")
    parser.add_argument("-m", "--module", action="store_true", help="script is a module name, as python -m")
    parser.add_argument("--no-python", "--no_python", action="store_true", dest="no_python",
                        help="script is an executable, not a Python file")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    return parser


def _summarise(error_dir: str, returncode: int) -> int:
    """Print which rank failed first, with its traceback; returns the job's exit code."""
    reports = []
    for path in glob.glob(os.path.join(error_dir, "rank*.json")):
        try:
            with open(path) as file:
                reports.append(json.load(file))
        except (OSError, ValueError):
            continue
    if not reports:
        if returncode != 0:
            how = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
            sys.stderr.write(f"corenn.distributed.run: the job ended with {how} and no rank reported an "
                             "exception (a rank was killed, crashed, or called sys.exit)\n")
        return returncode
    # The root cause: a rank that failed on its own (not because of another), the earliest of them.
    primary = sorted((r for r in reports if r.get("caused_by") is None), key=lambda r: r["time"]) or \
        sorted(reports, key=lambda r: r["time"])
    first = primary[0]
    others = sorted(r["rank"] for r in reports if r is not first)
    lines = [f"corenn.distributed.run: rank {first['rank']} (pid {first['pid']} on {first['host']}) failed first "
             f"with {first['type']}:", first["traceback"].rstrip()]
    if others:
        lines.append(f"(ranks {', '.join(map(str, others))} failed too; their tracebacks are above, prefixed "
                     "with their rank)")
    sys.stderr.write("\n".join(lines) + "\n")
    # The first failure's exit code, not whatever mpiexec made of the ranks it ended afterwards.
    killed_by = getattr(signal.Signals, first["type"], None) if first["type"].startswith("SIG") else None
    return 128 + int(killed_by) if killed_by is not None else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.nproc_per_node < 1 or args.nnodes < 1:
        _parser().error(f"--nproc-per-node and --nnodes must be at least 1, got {args.nproc_per_node} and "
                        f"{args.nnodes}")
    try:
        command = build_command(args)
    except FileNotFoundError as error:
        sys.stderr.write(f"{error}\n")
        return 127
    with tempfile.TemporaryDirectory(prefix="corenn-run-") as error_dir:
        env = dict(os.environ, **{ENV_ERROR_DIR: error_dir})
        process = subprocess.Popen(command, env=env)

        def forward(signum, frame):  # Ctrl-C / kill reach the job, and the launcher still summarises
            process.send_signal(signum)
        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            returncode = process.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        returncode = _summarise(error_dir, returncode)
    if returncode < 0:
        return 128 - returncode
    return returncode


if __name__ == "__main__":
    sys.exit(main())
