"""DataLoader behaviour: same batches as PyTorch's DataLoader for the same
indices, identical batches with and without workers, worker seeding per
worker and per epoch, persistent workers, shared-memory transport."""
import collections
import gc
import os
import random
import warnings

import numpy as np
import pytest

import corenn
from corenn.utils.data import (BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler,
                               TensorDataset, get_worker_info)

try:
    import torch
    import torch.utils.data as tdata
except ImportError:
    torch = tdata = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (oracle test)")


from _process_leaks import batch_memfds, child_pids, no_leaks, running  # noqa: F401 (no_leaks: autouse)


# --- datasets ---------------------------------------------------------------------------------

Pair = collections.namedtuple("Pair", ["image", "label"])


class Rich(Dataset):
    """Every collatable type in one sample."""

    def __init__(self, n=23):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": np.full((3, 4, 4), i, np.float32), "label": i % 3, "weight": i / 2,
                "name": f"s{i}", "raw": bytes([i]), "pair": Pair(np.arange(i, i + 2), i * 10),
                "flag": bool(i % 2), "np_scalar": np.float32(i), "tuple": (i, "t")}


class Sharded(IterableDataset):
    """range(n), split between workers round-robin by get_worker_info()."""

    def __init__(self, n, lib_get_worker_info=None):
        self.n = n
        self.get_info = lib_get_worker_info or get_worker_info

    def __iter__(self):
        info = self.get_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(wid, self.n, nw):
            yield np.array([i, wid])


def to_np(x):
    if isinstance(x, corenn.Tensor) or (torch is not None and isinstance(x, torch.Tensor)):
        return np.asarray(x.numpy())
    if isinstance(x, dict):
        return {k: to_np(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(to_np(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(to_np(v) for v in x)
    return x


def assert_same(a, b):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def batches(loader):
    return [to_np(b) for b in loader]


def torch_dataset(ds):
    """The same dataset object, seen by PyTorch as one of its own."""
    if isinstance(ds, IterableDataset):
        return type("T", (type(ds), tdata.IterableDataset), {})(ds.n, tdata.get_worker_info)
    return type("T", (type(ds), tdata.Dataset), {})(ds.n)


# --- same batches as PyTorch ----------------------------------------------------------------

ORACLE_CASES = {
    "sequential": dict(batch_size=4),
    "batch 1": dict(),
    "drop_last": dict(batch_size=5, drop_last=True),
    "no drop_last": dict(batch_size=5),
    "explicit sampler": dict(batch_size=3, sampler=[22, 0, 5, 5, 7, 1, 3]),
    "batch_sampler": dict(batch_sampler=[[3, 1], [0], [9, 8, 7, 6]]),
    "BatchSampler": dict(batch_sampler=BatchSampler(SequentialSampler(range(23)), 6, True)),
    "no auto-collation": dict(batch_size=None, sampler=[4, 2]),
}


@needs_torch
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("case", list(ORACLE_CASES))
def test_batches_equal_pytorch(case, workers):
    kw = ORACLE_CASES[case]
    ours = batches(DataLoader(Rich(), num_workers=workers, **kw))
    theirs = batches(tdata.DataLoader(torch_dataset(Rich()), **kw))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same(a, b)


@needs_torch
@pytest.mark.parametrize("n,bs,drop", [(20, 3, False), (20, 3, True), (7, 4, False), (3, 5, False), (1, 1, False)])
def test_iterable_sharding_by_worker_equals_pytorch(n, bs, drop):
    # Order, interleaving and partial last batches of each worker: as in PyTorch.
    ours = batches(DataLoader(Sharded(n), batch_size=bs, drop_last=drop, num_workers=2))
    theirs = batches(tdata.DataLoader(torch_dataset(Sharded(n)), batch_size=bs, drop_last=drop, num_workers=2))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same(a, b)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_iterable_each_item_once_with_workers():
    out = np.concatenate([b[:, 0] for b in batches(DataLoader(Sharded(50), batch_size=4, num_workers=3))])
    assert sorted(out.tolist()) == list(range(50))


@pytest.mark.parametrize("shuffle", [False, True])
def test_workers_0_and_2_give_identical_batches(shuffle):
    def run(workers):
        g = corenn.Generator().manual_seed(123)
        return batches(DataLoader(Rich(40), batch_size=6, shuffle=shuffle, num_workers=workers, generator=g))
    a, b = run(0), run(2)
    assert len(a) == len(b) == 7
    for x, y in zip(a, b):
        assert_same(x, y)


def test_in_order_false_yields_every_batch():
    out = batches(DataLoader(Rich(30), batch_size=4, num_workers=2, in_order=False))
    labels = sorted(int(v) for b in out for v in b["image"][:, 0, 0, 0])
    assert labels == list(range(30))


def test_tensor_dataset_through_workers_and_spawn():
    x = corenn.tensor(np.arange(40, dtype=np.float32).reshape(20, 2))
    y = corenn.tensor(np.arange(20))
    for ctx in ("fork", "spawn"):
        out = list(DataLoader(TensorDataset(x, y), batch_size=8, num_workers=2, multiprocessing_context=ctx))
        assert [tuple(b[0].shape) for b in out] == [(8, 2), (8, 2), (4, 2)]
        np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in out]), np.arange(20))


# --- shared memory transport ---------------------------------------------------------------------

class Big(Dataset):
    def __init__(self, structured=True):
        self.structured = structured

    def __len__(self):
        return 8

    def __getitem__(self, i):
        a = np.arange(64 * 64, dtype=np.float64).reshape(64, 64) + i
        rec = np.zeros(3, dtype=[("a", "i4"), ("b", "f8")])
        rec["a"] = i
        if not self.structured:  # a structured dtype cannot become a tensor (nor in PyTorch)
            return {"t": a.T, "same": a}
        return {"t": a.T, "rec": rec, "same": a}  # a non-contiguous view, a structured dtype


def test_batches_arrive_through_shared_memory_and_are_writable():
    loader = DataLoader(Big(), batch_size=4, num_workers=2, collate_fn=lambda b: b)
    first = next(iter(loader))
    assert batch_memfds() > 0  # the batch lives in a shared-memory file mapped here
    np.testing.assert_array_equal(first[1]["t"], (np.arange(64 * 64.).reshape(64, 64) + 1).T)
    assert first[2]["rec"]["a"].tolist() == [2, 2, 2]
    first[0]["same"][0, 0] = -1.0  # writable, like a freshly allocated array
    del first, loader
    gc.collect()
    assert batch_memfds() == 0  # freed with the last array that used it


def test_collated_tensors_from_workers():
    out = list(DataLoader(Big(structured=False), batch_size=4, num_workers=2))
    assert isinstance(out[0]["t"], corenn.Tensor) and tuple(out[0]["t"].shape) == (4, 64, 64)
    np.testing.assert_array_equal(out[1]["t"].numpy()[0], (np.arange(64 * 64.).reshape(64, 64) + 4).T)


# --- worker info and seeding -------------------------------------------------------------------------

class RandomDraws(Dataset):
    """Each sample records the worker and three RNGs' next values."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return np.array([-1 if info is None else info.id, np.random.randint(1 << 30),
                         random.randrange(1 << 30), int(corenn.randint(0, 1 << 30, (1,)).item())
                         if hasattr(corenn, "randint") else 0])


def draws(loader):
    return [np.concatenate([b.numpy() for b in loader]) for _ in range(2)]  # two epochs


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_rngs_differ_per_worker_and_per_epoch(persistent):
    g = corenn.Generator().manual_seed(7)
    loader = DataLoader(RandomDraws(), batch_size=2, num_workers=2, generator=g, persistent_workers=persistent)
    epoch1, epoch2 = draws(loader)
    for e in (epoch1, epoch2):
        w0, w1 = e[e[:, 0] == 0], e[e[:, 0] == 1]
        assert len(w0) == len(w1) == 4
        for col in (1, 2):  # numpy, random: no duplicated augmentation across workers
            assert not np.array_equal(w0[:, col], w1[:, col])
    for col in (1, 2):
        assert not np.array_equal(epoch1[:, col], epoch2[:, col])
    # ...and reproducible from the loader's generator
    again = DataLoader(RandomDraws(), batch_size=2, num_workers=2, generator=corenn.Generator().manual_seed(7),
                       persistent_workers=persistent)
    a1, a2 = draws(again)
    np.testing.assert_array_equal(a1, epoch1)
    np.testing.assert_array_equal(a2, epoch2)


class InfoDataset(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = get_worker_info()
        assert info.dataset is not None and info.num_workers == 2
        with pytest.raises(RuntimeError, match="Cannot assign"):
            info.id = 5
        return np.array([info.id, info.seed, os.getpid(), os.environ.get("INIT_MARK", "0") == str(info.id)])


def test_get_worker_info_and_worker_init_fn():
    assert get_worker_info() is None

    def init(worker_id):
        os.environ["INIT_MARK"] = str(worker_id)

    rows = np.concatenate([b.numpy() for b in DataLoader(InfoDataset(), batch_size=1, num_workers=2,
                                                          worker_init_fn=init)])
    assert rows[:, 0].tolist() == [0, 1, 0, 1]
    assert rows[1, 1] == rows[0, 1] + 1  # seed = base_seed + worker_id, as in PyTorch
    assert len(set(rows[:, 2].tolist())) == 2 and os.getpid() not in rows[:, 2]
    assert rows[:, 3].all()


# --- persistent workers and early exit ---------------------------------------------------------------

class Pids(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return np.array([i, os.getpid()])


def test_persistent_workers_survive_epochs_and_discard_stale_batches():
    loader = DataLoader(Pids(), batch_size=2, num_workers=2, persistent_workers=True)
    for b in loader:
        break  # abandon the epoch with batches still in flight
    pids = set()
    for _ in range(3):
        rows = np.concatenate([b.numpy() for b in loader])
        assert rows[:, 0].tolist() == list(range(12))  # nothing stale from the abandoned epoch
        pids |= set(rows[:, 1].tolist())
    assert len(pids) == 2  # the same two processes all along
    assert set(child_pids()) >= pids
    del loader, b
    gc.collect()
    assert not pids & set(child_pids())


def test_break_leaves_no_workers():
    before = set(child_pids())
    for b in DataLoader(Pids(), batch_size=2, num_workers=2):
        assert len(set(child_pids()) - before) == 2
        break
    assert set(child_pids()) - before == set()


# --- arguments ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    (dict(num_workers=-1), "num_workers"),
    (dict(timeout=-1), "timeout"),
    (dict(prefetch_factor=2), "prefetch_factor"),
    (dict(persistent_workers=True), "persistent_workers"),
    (dict(shuffle=True, sampler=[0]), "mutually exclusive with shuffle"),
    (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler option is mutually exclusive"),
    (dict(batch_size=None, drop_last=True), "batch_size=None"),
    (dict(multiprocessing_context="fork"), "multi-process"),
    (dict(num_workers=1, multiprocessing_context="nope"), "valid start method"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataLoader(Pids(), **kwargs)


def test_iterable_rejects_samplers_and_shuffle():
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Sharded(3), shuffle=True)
    with pytest.raises(ValueError, match="sampler"):
        DataLoader(Sharded(3), sampler=[0])


def test_attributes_frozen_after_init():
    loader = DataLoader(Pids())
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3
    loader.num_workers = 0  # others may change, as in PyTorch


def test_len():
    assert len(DataLoader(Pids(), batch_size=5)) == 3
    assert len(DataLoader(Pids(), batch_size=5, drop_last=True)) == 2

    class Lying(Sharded):
        def __len__(self):
            return 2

    loader = DataLoader(Lying(5), batch_size=1)
    assert len(loader) == 2
    with pytest.warns(UserWarning, match="Length of IterableDataset"):
        list(loader)
