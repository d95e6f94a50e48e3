"""Data loading, mirroring ``torch.utils.data``: datasets, samplers, collation
and a ``DataLoader`` whose workers are real processes.

Example::

    from corenn.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=2)
    for xb, yb in loader:
        ...

See docs/data.md for what corenn does beyond PyTorch (per-epoch worker
seeding, shared-memory batches, worker failures reported with pid/signal).
"""
from .collate import default_collate, default_convert
from .dataloader import DataLoader, DataLoaderTimeoutError, WorkerDiedError, WorkerError
from .dataset import (ChainDataset, ConcatDataset, Dataset, IterableDataset, StackDataset, Subset,
                      TensorDataset, random_split)
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)
from .distributed import DistributedSampler
from ._worker import WorkerInfo, get_worker_info

__all__ = ["DataLoader", "Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "ChainDataset", "StackDataset", "random_split", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "default_collate",
           "default_convert", "get_worker_info", "WorkerInfo", "WorkerError", "WorkerDiedError",
           "DataLoaderTimeoutError", "DistributedSampler"]
