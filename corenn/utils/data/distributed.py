"""``DistributedSampler``: each rank of a data-parallel job reads its own share of a dataset.

``torch.utils.data.distributed.DistributedSampler`` with two additions users of PyTorch ask for:

- a :class:`UserWarning`, once, when an epoch starts with ``shuffle=True`` and
  ``set_epoch`` was never called: every epoch would repeat the first one's order
  (pytorch/pytorch#31771);
- ``pad=False`` for evaluation: ranks get ``len(dataset) // num_replicas`` or one more
  samples and nothing is repeated, so a metric summed over the ranks counts each sample
  once (pytorch/pytorch#25162). Training wants ``pad=True`` (the default), which makes
  every rank take the same number of steps.

The order with ``shuffle=True`` is ``corenn.randperm`` seeded with ``seed + epoch``: the
same on every rank, so the shares never overlap (not the same permutation PyTorch draws).
"""
from __future__ import annotations

import math
import warnings

from . import _core
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """The indices of rank ``rank``'s share of ``dataset``, one of ``num_replicas`` disjoint shares.

    ``num_replicas`` and ``rank`` default to the world size and this process's rank
    (``corenn.distributed``, from the corenn-distributed plugin). Call ``set_epoch(epoch)``
    before each epoch so the shuffle differs between epochs. With ``drop_last=True`` the
    tail that does not divide evenly is dropped; otherwise (and ``pad=True``) indices from
    the start are repeated to even it out; ``pad=False`` does neither (for evaluation).

    Example::

        sampler = DistributedSampler(train_set, shuffle=True, seed=0)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                ...
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, *, pad: bool = True) -> None:
        if num_replicas is None or rank is None:
            import corenn.distributed as dist  # ModuleNotFoundError naming corenn-distributed where it is missing
            if not dist.is_initialized():
                raise ValueError("DistributedSampler(): num_replicas and rank default to the default process "
                                 "group's, which has not been initialized; call "
                                 "corenn.distributed.init_process_group first or pass num_replicas and rank")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if not isinstance(num_replicas, int) or isinstance(num_replicas, bool) or num_replicas < 1:
            raise ValueError(f"DistributedSampler(): num_replicas should be a positive integer, got {num_replicas!r}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        if drop_last and not pad:
            raise ValueError("DistributedSampler(): drop_last=True and pad=False contradict each other; pad=False "
                             "keeps every sample once, drop_last=True drops the uneven tail")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.pad = pad
        n = len(dataset)
        if not pad:
            self.num_samples = n // num_replicas + (1 if rank < n % num_replicas else 0)
            self.total_size = n
        elif drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
            self.total_size = self.num_samples * num_replicas
        else:
            self.num_samples = math.ceil(n / num_replicas)
            self.total_size = self.num_samples * num_replicas
        self._epoch_set = False
        self._iterated = False
        self._warned = False

    def __iter__(self):
        if self.shuffle and self._iterated and not self._epoch_set and not self._warned:
            self._warned = True
            warnings.warn("DistributedSampler: a new epoch started but set_epoch() was never called, so it repeats "
                          "the previous epoch's order; call sampler.set_epoch(epoch) at the start of each epoch",
                          UserWarning, stacklevel=2)
        self._iterated = True
        n = len(self.dataset)
        if self.shuffle:
            indices = [int(i) for i in _core.randperm(n, _core.new_generator(self.seed + self.epoch))]
        else:
            indices = list(range(n))
        if self.pad and not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[:self.total_size]
        share = indices[self.rank:self.total_size:self.num_replicas]
        assert len(share) == self.num_samples
        return iter(share)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next shuffle (the order is ``randperm`` seeded with ``seed + epoch``)."""
        self.epoch = epoch
        self._epoch_set = True
