"""DistributedSampler: disjoint shares that cover the dataset, PyTorch's sizes and padding, and the two additions.

Run with explicit ``num_replicas``/``rank`` (no process group needed); the plugin's tests
use it inside real MPI jobs.
"""
from __future__ import annotations

import warnings

import pytest

from corenn.utils.data import DistributedSampler
from corenn.utils.data.distributed import DistributedSampler as FromItsModule


def shares(n, replicas, **options):
    return [list(DistributedSampler(range(n), num_replicas=replicas, rank=r, **options)) for r in range(replicas)]


@pytest.mark.parametrize("n, replicas", [(10, 2), (10, 3), (7, 4), (3, 5)])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sizes_and_indices_match_pytorch_without_shuffle_and_partition_with_it(n, replicas, shuffle, drop_last):
    torch = pytest.importorskip("torch")
    ours = shares(n, replicas, shuffle=shuffle, drop_last=drop_last)
    theirs = [list(torch.utils.data.DistributedSampler(range(n), num_replicas=replicas, rank=r, shuffle=shuffle,
                                                       drop_last=drop_last)) for r in range(replicas)]
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    if not shuffle:
        assert ours == theirs
    # Every rank the same length; the shares cover the dataset (repeats only as padding).
    flat = [i for share in ours for i in share]
    if drop_last:
        assert len(set(flat)) == len(flat)
    else:
        assert set(flat) == set(range(n))


def test_shuffle_depends_on_seed_and_epoch_and_agrees_across_ranks():
    a = DistributedSampler(range(20), num_replicas=2, rank=0, seed=1)
    b = DistributedSampler(range(20), num_replicas=2, rank=1, seed=1)
    first = list(a) + list(b)
    assert sorted(first) == list(range(20))
    a.set_epoch(1)
    assert list(a) != first[:10]
    assert list(DistributedSampler(range(20), num_replicas=2, rank=0, seed=2)) != first[:10]


def test_a_second_epoch_without_set_epoch_warns_once():
    sampler = DistributedSampler(range(8), num_replicas=2, rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(sampler)
    with pytest.warns(UserWarning, match="set_epoch"):
        list(sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(sampler)   # once only
        with_epochs = DistributedSampler(range(8), num_replicas=2, rank=0)
        for epoch in range(3):
            with_epochs.set_epoch(epoch)
            list(with_epochs)


def test_pad_false_keeps_every_sample_exactly_once_for_evaluation():
    parts = shares(10, 3, shuffle=False, pad=False)
    assert [len(p) for p in parts] == [4, 3, 3]
    assert sorted(i for p in parts for i in p) == list(range(10))
    assert [len(DistributedSampler(range(10), num_replicas=3, rank=r, pad=False)) for r in range(3)] == [4, 3, 3]


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(range(4), num_replicas=0, rank=0)
    with pytest.raises(ValueError, match="contradict"):
        DistributedSampler(range(4), num_replicas=2, rank=0, drop_last=True, pad=False)
    assert FromItsModule is DistributedSampler


def test_without_num_replicas_it_needs_an_initialized_process_group():
    # ImportError naming corenn-distributed where the plugin is missing; ValueError where no group exists yet.
    with pytest.raises((ValueError, ImportError), match="corenn-distributed|init_process_group"):
        DistributedSampler(range(4))
