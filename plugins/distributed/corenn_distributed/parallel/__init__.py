"""``torch.nn.parallel`` for corenn (``corenn.nn.parallel``): :class:`DistributedDataParallel`.

Example::

    from corenn.nn.parallel import DistributedDataParallel as DDP
"""
from corenn_distributed.parallel.distributed import DistributedDataParallel, GradBucket

__all__ = ["DistributedDataParallel", "GradBucket"]
