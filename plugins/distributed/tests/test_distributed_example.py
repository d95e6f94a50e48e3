"""examples/ddp_digits.py runs as documented: 2 ranks through the launcher, a progress bar on rank 0, identical replicas."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from distributed_jobs import needs_mpi

pytestmark = needs_mpi
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_digits.py"


def test_ddp_digits_trains_on_two_ranks(launch):
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    job = launch(EXAMPLE.read_text().replace("os.path.abspath(__file__)", repr(str(EXAMPLE))),
                 nproc=2, args=["--epochs", "3"], timeout=180)
    assert job.returncode == 0, job
    accuracies = [float(a) for a in re.findall(r"epoch +\d+/3 .*test accuracy ([0-9.]+)%", job.stdout)]
    assert len(accuracies) == 3 and accuracies[-1] >= 85.0, job   # printed once: by rank 0
    assert "batch/s" in job.stdout or "s/batch" in job.stdout      # rank 0's tqdm bar
    assert "replicas identical: True" in job.stdout
