"""DDP communication hooks, as ``torch.distributed.algorithms.ddp_comm_hooks``: see :mod:`.default_hooks`."""
from corenn_distributed.algorithms.ddp_comm_hooks import default_hooks

__all__ = ["default_hooks"]
