"""The plugin itself: registration, a third party's backend through the hook, unavailability, the launcher's env.

These run in the test process (no MPI job), except the launcher and import-time checks.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pytest

import corenn
import corenn.distributed as dist
import corenn_distributed
from corenn_distributed.backend import CompletedWork, ProcessGroup
from distributed_jobs import needs_mpi


def test_the_plugin_is_active_and_provides_pytorchs_import_paths():
    record = corenn.plugins.records["distributed"]
    assert record.status == "active", record.reason
    assert record.distribution == "corenn-distributed"
    assert "mpi" in record.process_group_backends or importlib.util.find_spec("mpi4py") is None
    import corenn.nn.parallel as parallel
    assert corenn.distributed is corenn_distributed
    assert parallel.DistributedDataParallel.__name__ == "DistributedDataParallel"
    from corenn.distributed.algorithms.ddp_comm_hooks import default_hooks
    assert callable(default_hooks.fp16_compress_hook)
    assert dist.is_available() and not dist.is_initialized()


def test_import_corenn_does_not_import_mpi4py():
    code = "import sys, corenn; import corenn.distributed; assert 'mpi4py.MPI' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_without_mpi4py_and_cupy_the_plugin_is_unavailable_with_the_reason(monkeypatch, corenn_plugin):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] in ("mpi4py", "cupy") else real(name, *a))

    class Copy:  # the plugin's hook, registered a second time under another name
        corenn_register_process_group_backends = staticmethod(
            corenn_distributed.corenn_register_process_group_backends)

    record = corenn_plugin(Copy(), name="distributed-without-mpi", allow_failure=True)
    assert record.status == "unavailable"
    assert "mpi4py is not installed: pip install 'corenn-distributed[mpi]'" in record.reason
    assert "cupy" in record.reason


class SoloGroup(ProcessGroup):
    """A third party's backend for a world of one process: every collective is the identity."""

    name = "solo"
    calls: list = []

    def allreduce(self, array, op):
        SoloGroup.calls.append(("allreduce", op.name, array.shape))
        return CompletedWork()

    def broadcast(self, array, src):
        SoloGroup.calls.append(("broadcast", src))
        return CompletedWork()

    def allgather(self, out, array):
        out[...] = array.reshape(out.shape)
        return CompletedWork()

    def barrier(self):
        return CompletedWork()

    def new_group(self, ranks, timeout):
        return SoloGroup(0, 1, timeout)


class SoloPlugin:
    @corenn.hookimpl
    def corenn_register_process_group_backends(self):
        return {"solo": lambda init_method, rank, world_size, timeout: SoloGroup(0, 1, timeout)}


def test_a_third_party_backend_registered_through_the_hook_runs_collectives_and_ddp(corenn_plugin):
    record = corenn_plugin(SoloPlugin(), name="solo-backend")
    assert record.hooks == ["corenn_register_process_group_backends"]
    assert record.process_group_backends == ["solo"]
    assert dist.is_backend_available("solo")
    SoloGroup.calls.clear()
    dist.init_process_group("solo", timeout=timedelta(seconds=5))
    try:
        assert dist.get_backend() == "solo" and dist.get_world_size() == 1 and dist.get_rank() == 0
        t = corenn.tensor([1.0, 2.0])
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert t.tolist() == [1.0, 2.0] and SoloGroup.calls[-1] == ("allreduce", "SUM", (2,))
        objects = [None]
        dist.all_gather_object(objects, {"a": 1})
        assert objects == [{"a": 1}]
        # DDP on one process: gradients equal plain training
        from corenn.nn.parallel import DistributedDataParallel as DDP
        corenn.manual_seed(0)
        model = corenn.nn.Linear(3, 2)
        plain = corenn.nn.Linear(3, 2)
        plain.load_state_dict(model.state_dict())
        ddp = DDP(model)
        x = corenn.randn(4, 3)
        ddp(x).sum().backward()
        plain(x).sum().backward()
        np.testing.assert_allclose(model.weight.grad.numpy(), plain.weight.grad.numpy())
    finally:
        dist.destroy_process_group()


def test_init_process_group_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="backend 'gloo' is not available .*available here: "):
        dist.init_process_group("gloo")
    with pytest.raises(TypeError, match="timeout must be a datetime.timedelta"):
        dist.init_process_group("mpi", timeout=30)
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    assert not dist.is_initialized()


def test_nccl_reports_why_it_is_unavailable_or_runs_a_one_gpu_smoke_test():
    reason = corenn_distributed.unavailable_backends().get("nccl")
    if reason is not None:
        assert not dist.is_nccl_available()
        with pytest.raises(RuntimeError, match="backend 'nccl' is not available|NCCL cannot run here"):
            dist.init_process_group("nccl")
        pytest.skip(f"nccl unavailable here: {reason}")
    dist.init_process_group("nccl", timeout=timedelta(seconds=30))   # world size 1 on one GPU
    try:
        t = corenn.ones(4, device="cuda")
        dist.all_reduce(t)
        assert t.cpu().tolist() == [1.0] * 4
    finally:
        dist.destroy_process_group()


@needs_mpi
def test_the_launcher_gives_each_rank_torchruns_environment(launch):
    job = launch("""
        import os, sys
        sys.stdout.write(" ".join(os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"))
                         + "\\n")
    """, nproc=3)
    assert job.returncode == 0, job
    assert sorted(job.stdout.splitlines()) == ["0 0 3 3", "1 1 3 3", "2 2 3 3"]


@needs_mpi
def test_a_failure_before_init_process_group_is_printed_with_its_rank(launch):
    job = launch("""
        import os
        if os.environ["RANK"] == "1":
            raise KeyError("missing config")
    """)
    assert job.returncode == 1, job
    assert "[rank 1]: KeyError: 'missing config'" in job.stderr
    assert "rank 1 (pid" in job.stderr and "failed first with KeyError" in job.stderr


def test_the_launcher_rejects_a_bad_process_count():
    result = subprocess.run([sys.executable, "-m", "corenn.distributed.run", "--nproc-per-node", "0", "x.py"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--nproc-per-node and --nnodes must be at least 1, got 0" in result.stderr
