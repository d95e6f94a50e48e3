"""Failures end in an error naming the rank, within the timeout, never in a hang; the launcher names the first.

Each job does one all-reduce, then rank 1 misbehaves in one way while rank 0 goes on to
the next collective. Every job runs under the ``launch`` fixture's wall-clock bound, which
also checks that no process of the job is left behind.
"""
from __future__ import annotations

import pytest

from distributed_jobs import needs_mpi

pytestmark = needs_mpi

JOB = r'''
import os, signal, sys, time
import corenn
import corenn.distributed as dist
from datetime import timedelta
dist.init_process_group("mpi", timeout=timedelta(seconds=float(sys.argv[2])))
mode, rank = sys.argv[1], dist.get_rank()
t = corenn.ones(4)
dist.all_reduce(t)
if rank == 1:
    if mode == "raise":
        raise ZeroDivisionError("rank 1's own bug")
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "mismatch":
        dist.broadcast(t, 0)
    if mode == "stall":
        time.sleep(4)
    if mode == "exit":
        sys.exit(0)
dist.all_reduce(t)
sys.stdout.write(f"rank {rank} finished\n"); sys.stdout.flush()
dist.destroy_process_group()
'''


def rank0_error(job) -> str:
    lines = [line[len("[rank 0]: "):] for line in job.stderr.splitlines() if line.startswith("[rank 0]: ")]
    errors = [line for line in lines if line.startswith("corenn_distributed.backend.DistributedError")]
    assert errors, job
    return errors[0]


def test_a_rank_that_raises_makes_the_others_raise_at_once_with_its_traceback(launch):
    job = launch(JOB, args=["raise", 30])
    # Under the 30 s timeout with room to spare: two interpreters starting on a loaded 2-core machine take seconds.
    assert job.returncode == 1 and job.seconds < 28, job
    assert "rank 1 failed while this rank waited in all_reduce #2" in rank0_error(job)
    assert "[rank 1]: ZeroDivisionError: rank 1's own bug" in job.stderr
    summary = job.stderr[job.stderr.index("corenn.distributed.run: "):]
    assert summary.startswith("corenn.distributed.run: rank 1 (pid") and "failed first with ZeroDivisionError" in summary
    assert "raise ZeroDivisionError(\"rank 1's own bug\")" in summary   # the real traceback, with the line


def test_a_rank_that_is_killed_is_named_by_the_others_and_the_launcher(launch):
    job = launch(JOB, args=["kill", 30])
    assert job.returncode == 128 + 9 and job.seconds < 28, job
    assert "rank 1 (pid" in rank0_error(job) and "died while this rank waited in all_reduce #2" in rank0_error(job)
    assert "failed first with SIGKILL" in job.stderr and "was killed by SIGKILL" in job.stderr


def test_mismatched_collectives_time_out_saying_what_each_rank_calls(launch):
    job = launch(JOB, args=["mismatch", 2])
    assert job.returncode == 1 and job.seconds < 20, job
    message = job.stderr
    assert "all_reduce #2 (float32[4]) timed out after 2 s" in message or \
        "broadcast #2 (float32[4] from rank 0) timed out after 2 s" in message, job
    assert "rank 0: all_reduce #2 (float32[4])" in message or "rank 0 (this rank): all_reduce #2" in message
    assert "rank 1: broadcast #2" in message or "rank 1 (this rank): broadcast #2" in message


def test_mismatched_collectives_are_caught_before_they_run_in_detail_mode(launch):
    job = launch(JOB, args=["mismatch", 30], env={"CORENN_DISTRIBUTED_DEBUG": "DETAIL"})
    assert job.returncode == 1 and job.seconds < 20, job
    assert "ranks called different collectives (CORENN_DISTRIBUTED_DEBUG=DETAIL check)" in job.stderr
    assert "rank 0: all_reduce #2 ('float32[4]', 'SUM')" in job.stderr
    assert "rank 1: broadcast #2 ('float32[4]', 0)" in job.stderr


def test_a_rank_slower_than_the_timeout_ends_the_job_with_a_timeout_error(launch):
    job = launch(JOB, args=["stall", 1])
    assert job.returncode == 1 and job.seconds < 20, job
    error = rank0_error(job)
    assert "all_reduce #2 (float32[4]) timed out after 1 s" in error
    assert "rank 1: no answer (busy outside corenn.distributed, hung, or dead)" in job.stderr


def test_a_rank_whose_program_ends_early_is_named(launch):
    job = launch(JOB, args=["exit", 30])
    assert job.returncode == 1 and job.seconds < 20, job
    assert "rank 1's program ended (a normal exit, after 1 collectives on the world group) while this rank waits " \
           "in all_reduce #2" in rank0_error(job)


def test_a_healthy_job_ends_cleanly(launch):
    job = launch(JOB, args=["none", 30], nproc=3)
    assert job.returncode == 0, job
    assert sorted(job.stdout.splitlines()) == ["rank 0 finished", "rank 1 finished", "rank 2 finished"], job
