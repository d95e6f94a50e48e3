"""corenn-distributed: ``torch.distributed`` for corenn, on MPI (mpi4py) and NCCL (cupy).

Installed, it makes ``corenn.distributed`` (this package) and ``corenn.nn.parallel``
(:mod:`corenn_distributed.parallel`, with ``DistributedDataParallel``) import, and
registers the process-group backends ``mpi`` (where mpi4py is installed) and ``nccl``
(where cupy is) through ``corenn_register_process_group_backends`` -- the hook through
which a third party adds a backend of its own. Without mpi4py and cupy the plugin is
listed as *unavailable* with that reason. mpi4py is imported by ``init_process_group``,
not by ``import corenn``.

Example (``python -m corenn.distributed.run --nproc-per-node 2 train.py``)::

    import corenn.distributed as dist
    from corenn.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("mpi")
    model = DDP(build_model())          # rank 0's weights on every rank
    ...                                 # loss.backward() averages gradients over the ranks
    dist.destroy_process_group()

See docs/distributed.md.
"""
from __future__ import annotations

import importlib.util

import corenn
from corenn import hookimpl
from corenn_distributed.backend import (DistBackendError, DistributedError, ProcessGroup, ReduceOp, Work)
from corenn_distributed.distributed_c10d import *  # noqa: F401,F403  (torch.distributed's names)
from corenn_distributed.distributed_c10d import __all__ as _c10d_names

__version__ = "0.1.0"
__all__ = ["DistributedError", "DistBackendError", "ProcessGroup", "ReduceOp", "Work", "unavailable_backends",
           *_c10d_names]

_MPI_MISSING = ("mpi4py is not installed: pip install 'corenn-distributed[mpi]' (mpich and mpi4py from pip), or "
                "mpi4py built against your cluster's MPI (docs/distributed.md)")


def unavailable_backends() -> dict[str, str]:
    """``{backend name: why it cannot run here}`` for this plugin's backends that can't.

    Example::

        >>> corenn.distributed.unavailable_backends()   # doctest: +SKIP
        {'nccl': 'cupy is not installed (NCCL for cuda tensors comes with cupy and corenn-cuda)'}
    """
    from corenn_distributed import nccl
    reasons = {}
    if importlib.util.find_spec("mpi4py") is None:
        reasons["mpi"] = _MPI_MISSING
    nccl_reason = nccl.unavailable_reason()
    if nccl_reason is not None:
        reasons["nccl"] = nccl_reason
    return reasons


def _create_mpi(**options):
    from corenn_distributed import mpi
    return mpi.create(**options)


def _create_nccl(**options):
    from corenn_distributed import nccl
    return nccl.create(**options)


@hookimpl
def corenn_register_process_group_backends():
    # Only find_spec here: importing mpi4py.MPI costs a tenth of a second and starts MPI, so it waits
    # for init_process_group. nccl is registered where cupy is; whether a GPU is there is asked when
    # a group is made (another plugin, corenn-cuda, may load after this one).
    backends = {}
    if importlib.util.find_spec("mpi4py") is not None:
        backends["mpi"] = _create_mpi
    if importlib.util.find_spec("cupy") is not None:
        backends["nccl"] = _create_nccl
    if not backends:
        raise corenn.plugins.PluginUnavailable(_MPI_MISSING + "; and cupy (for nccl) is not installed either")
    return backends


@hookimpl
def corenn_register_import_paths():
    return {"corenn.distributed": "corenn_distributed", "corenn.nn.parallel": "corenn_distributed.parallel"}


@hookimpl
def corenn_info_lines():
    lines = []
    reasons = unavailable_backends()
    for name in ("mpi", "nccl"):
        lines.append(f"{name}: " + (f"unavailable ({reasons[name]})" if name in reasons else "available"))
    return lines
