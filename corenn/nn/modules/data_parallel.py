"""``nn.DataParallel``: one module's batches split over the accelerators of one process (``torch.nn.DataParallel``).

Without an accelerator PyTorch's DataParallel holds the module and calls it unchanged, its state dict
under ``module.``; so does this one. Splitting batches over accelerators is not implemented: corenn's
data parallelism is ``corenn.nn.parallel.DistributedDataParallel`` (the corenn-distributed plugin).
"""
from __future__ import annotations

from corenn.module.module import Module


class DataParallel(Module):
    """Holds ``module`` and runs it on the batch (no accelerator: unchanged, as PyTorch's on a CPU-only machine).

        >>> dp = nn.DataParallel(nn.Linear(2, 3))
        >>> dp(corenn.randn(4, 2)).shape, dp.device_ids
        (corenn.Size([4, 3]), [])
    """

    def __init__(self, module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        import corenn
        if corenn.accelerator.is_available():
            raise NotImplementedError("DataParallel: splitting batches over accelerators is not implemented; use "
                                      "corenn.nn.parallel.DistributedDataParallel (corenn-distributed)")
        self.module = module
        self.device_ids = []

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
