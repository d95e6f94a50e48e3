"""Datasets, samplers and collation of corenn.utils.data, checked against
PyTorch where PyTorch defines the result (index logic, collate structure)."""
import collections
import math

import numpy as np
import pytest

import corenn
from corenn.utils.data import (BatchSampler, ChainDataset, ConcatDataset, Dataset, IterableDataset,
                               RandomSampler, SequentialSampler, StackDataset, Subset,
                               SubsetRandomSampler, TensorDataset, WeightedRandomSampler,
                               default_collate, default_convert, random_split)

try:
    import torch
    import torch.utils.data as tdata
except ImportError:  # oracle tests skip
    torch = tdata = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (oracle test)")


def to_np(x):
    """Nested structure of tensors (corenn or torch) -> same structure of numpy arrays."""
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
    """Same structure, types of containers, dtypes and values."""
    assert type(a) is type(b) or (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)), (type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


# --- datasets -------------------------------------------------------------------------------

class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i * i


class Stream(IterableDataset):
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)


def test_tensor_dataset_rows():
    x = corenn.tensor(np.arange(12.).reshape(4, 3))
    y = corenn.tensor([0, 1, 0, 1])
    ds = TensorDataset(x, y)
    assert len(ds) == 4
    xi, yi = ds[2]
    np.testing.assert_array_equal(xi.numpy(), [6., 7., 8.])
    assert yi.item() == 0


def test_tensor_dataset_size_mismatch_names_sizes():
    with pytest.raises(ValueError, match=r"\[4, 3\]"):
        TensorDataset(corenn.tensor(np.zeros(4)), corenn.tensor(np.zeros(3)))


def test_subset_and_concat():
    sub = Subset(Squares(10), [9, 0, 3])
    assert [sub[i] for i in range(len(sub))] == [81, 0, 9]
    assert sub.__getitems__([2, 0]) == [9, 81]
    cat = Squares(3) + Squares(2)
    assert isinstance(cat, ConcatDataset)
    assert [cat[i] for i in range(len(cat))] == [0, 1, 4, 0, 1]
    assert cat[-1] == 1 and cat.cumulative_sizes == [3, 5]
    with pytest.raises(IndexError):
        cat[5]
    with pytest.raises(IndexError):
        cat[-6]
    with pytest.raises(ValueError, match="empty"):
        ConcatDataset([])
    with pytest.raises(TypeError, match="IterableDataset"):
        ConcatDataset([Stream([1])])


def test_chain_and_add_of_iterables():
    chain = Stream([1, 2]) + Stream([3])
    assert isinstance(chain, ChainDataset)
    assert list(chain) == [1, 2, 3] and len(chain) == 3


def test_stack_dataset_tuple_and_dict():
    st = StackDataset(Squares(3), range(10, 13))
    assert st[1] == (1, 11) and len(st) == 3
    assert st.__getitems__([0, 2]) == [(0, 10), (4, 12)]
    sd = StackDataset(a=Squares(3), b=range(3))
    assert sd[2] == {"a": 4, "b": 2}
    assert sd.__getitems__([1]) == [{"a": 1, "b": 1}]
    with pytest.raises(ValueError, match="Size mismatch"):
        StackDataset(Squares(3), range(4))
    with pytest.raises(ValueError):
        StackDataset(Squares(3), b=range(3))


@pytest.mark.parametrize("lengths", [[3, 7], [0.3, 0.7], [0.33, 0.33, 0.34], [1, 0.0] and [10, 0]])
def test_random_split_partitions(lengths):
    parts = random_split(range(10), lengths, generator=corenn.Generator().manual_seed(0))
    sizes = [len(p) for p in parts]
    assert sum(sizes) == 10
    everything = sorted(x for p in parts for x in (p[i] for i in range(len(p))))
    assert everything == list(range(10))


@needs_torch
@pytest.mark.parametrize("n,fracs", [(10, [0.33, 0.33, 0.34]), (7, [0.5, 0.5]), (5, [0.1, 0.1, 0.8])])
def test_random_split_fraction_sizes_match_pytorch(n, fracs):
    ours = [len(p) for p in random_split(range(n), fracs, generator=corenn.Generator().manual_seed(1))]
    theirs = [len(p) for p in tdata.random_split(range(n), fracs, generator=torch.Generator().manual_seed(1))]
    assert ours == theirs


def test_random_split_errors_and_seeding():
    with pytest.raises(ValueError, match="does not equal the length"):
        random_split(range(10), [3, 3])
    a = random_split(range(20), [10, 10], generator=corenn.Generator().manual_seed(5))
    b = random_split(range(20), [10, 10], generator=corenn.Generator().manual_seed(5))
    assert list(a[0].indices) == list(b[0].indices)


# --- samplers -------------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("n,bs,drop", [(10, 3, False), (10, 3, True), (9, 3, True), (1, 4, False), (0, 2, False)])
def test_batch_sampler_matches_pytorch(n, bs, drop):
    ours = BatchSampler(SequentialSampler(range(n)), bs, drop)
    theirs = tdata.BatchSampler(tdata.SequentialSampler(range(n)), bs, drop)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_batch_sampler_rejects_bad_batch_size(bad):
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(3), bad, False)


def test_random_sampler_permutation_and_seed():
    g = corenn.Generator().manual_seed(0)
    first = list(RandomSampler(range(50), generator=g))
    assert sorted(first) == list(range(50)) and first != list(range(50))
    again = list(RandomSampler(range(50), generator=corenn.Generator().manual_seed(0)))
    assert first == again
    corenn.manual_seed(3)
    a = list(RandomSampler(range(50)))
    corenn.manual_seed(3)
    assert list(RandomSampler(range(50))) == a  # default generator drives the unseeded sampler


def test_random_sampler_num_samples_and_replacement():
    s = RandomSampler(range(7), num_samples=17, generator=corenn.Generator().manual_seed(0))
    out = list(s)
    assert len(out) == len(s) == 17
    # without replacement: two full permutations then 3 more distinct ones
    assert sorted(out[:7]) == list(range(7)) and sorted(out[7:14]) == list(range(7)) and len(set(out[14:])) == 3
    r = list(RandomSampler(range(3), replacement=True, num_samples=100, generator=corenn.Generator().manual_seed(0)))
    assert len(r) == 100 and set(r) <= {0, 1, 2} and len(set(r)) == 3
    with pytest.raises(ValueError, match="num_samples"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError, match="replacement"):
        RandomSampler(range(3), replacement=1)


def test_subset_random_sampler():
    s = SubsetRandomSampler([10, 20, 30, 40], generator=corenn.Generator().manual_seed(0))
    assert sorted(s) == [10, 20, 30, 40] and len(s) == 4


def test_weighted_random_sampler():
    g = corenn.Generator().manual_seed(0)
    draws = list(WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=g))
    counts = np.bincount(draws, minlength=3)
    assert counts[0] == 0 and 2.5 < counts[2] / counts[1] < 3.5
    no_rep = list(WeightedRandomSampler([1, 1, 1, 5], 4, replacement=False, generator=g))
    assert sorted(no_rep) == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="without replacement"):
        list(WeightedRandomSampler([1, 0, 1], 3, replacement=False))
    with pytest.raises(ValueError, match="1d"):
        WeightedRandomSampler([[1, 2]], 1)
    with pytest.raises(ValueError, match="num_samples"):
        WeightedRandomSampler([1, 2], 0)


# --- collate ---------------------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])

COLLATE_CASES = {
    "ints": [1, 2, 3],
    "floats": [1.5, 2.0],
    "bools": [True, False],
    "strings": ["a", "b"],
    "bytes": [b"a", b"b"],
    "numpy float32": [np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)],
    "numpy uint8 image": [np.full((4, 4, 3), 7, np.uint8)] * 3,
    "numpy scalars": [np.float32(1.5), np.float32(2)],
    "numpy int scalars": [np.int32(1), np.int32(2)],
    "dict": [{"a": 1, "b": np.arange(3)}, {"a": 2, "b": np.arange(3) * 2}],
    "namedtuple": [Point(1, 2.0), Point(3, 4.0)],
    "tuple": [(1, "x"), (2, "y")],
    "list": [[1, 2.0], [3, 4.0]],
    "nested": [{"p": Point(np.zeros(2), [1, "s"])}, {"p": Point(np.ones(2), [2, "t"])}],
}


@needs_torch
@pytest.mark.parametrize("name", list(COLLATE_CASES))
def test_default_collate_matches_pytorch(name):
    batch = COLLATE_CASES[name]
    assert_same(to_np(default_collate(batch)), to_np(tdata.default_collate(batch)))


@needs_torch
def test_default_collate_of_tensors_matches_pytorch():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3) + i for i in range(4)]
    ours = default_collate([corenn.tensor(a) for a in arrays])
    theirs = tdata.default_collate([torch.tensor(a) for a in arrays])
    assert isinstance(ours, corenn.Tensor)
    assert_same(to_np(ours), to_np(theirs))


@needs_torch
@pytest.mark.parametrize("data", [np.arange(3), np.float64(2.5), {"k": np.ones(2)}, Point(np.array(1), "s"),
                                  (np.arange(2), 3), [np.arange(2)], "text", 7])
def test_default_convert_matches_pytorch(data):
    assert_same(to_np(default_convert(data)), to_np(tdata.default_convert(data)))


def test_collate_errors_name_the_problem():
    with pytest.raises(TypeError, match="found <class 'object'>"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="<U1"):
        default_collate([np.array(["a"]), np.array(["b"])])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(RuntimeError, match=r"\(3,\).*\(2,\)"):
        default_collate([np.zeros(3), np.zeros(2)])
