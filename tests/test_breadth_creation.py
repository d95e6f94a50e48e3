"""Creation functions added for issue 22 (window functions, empty_strided/empty_permuted, asarray, frombuffer,
fill/fill_/zero_, resize_/resize_as_) against PyTorch 2.13: values, dtypes, strides, memory sharing, errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn

from _breadth_outputs import match_torch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

WINDOWS = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]


@pytest.mark.parametrize("length", [0, 1, 2, 5, 8])
@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("name", WINDOWS)
def test_windows_match_torch(name, periodic, length):
    for dtype in ("float32", "float64"):
        ours = getattr(corenn, name)(length, periodic, dtype=getattr(corenn, dtype))
        theirs = getattr(torch, name)(length, periodic, dtype=getattr(torch, dtype))
        assert ours.dtype is getattr(corenn, dtype)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7 if dtype == "float32" else 1e-12)


def test_window_options_match_torch():
    np.testing.assert_allclose(corenn.hamming_window(7, True, 0.5, 0.5).numpy(),
                               torch.hamming_window(7, True, 0.5, 0.5).numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(corenn.kaiser_window(6, False, 3.0, dtype=corenn.float64).numpy(),
                               torch.kaiser_window(6, False, 3.0, dtype=torch.float64).numpy(), rtol=1e-12)
    assert corenn.hann_window(3).dtype is corenn.float32
    assert corenn.hann_window(3, requires_grad=True).requires_grad


def test_window_errors_match_torch():
    for name in WINDOWS:
        for lib in (corenn, torch):
            with pytest.raises(RuntimeError, match="floating point"):
                getattr(lib, name)(4, dtype=lib.int64)
            with pytest.raises(RuntimeError, match="non-negative"):
                getattr(lib, name)(-1)


@pytest.mark.parametrize("size,stride", [((2, 3), (1, 2)), ((2, 3), (3, 1)), ((4,), (2,)), ((2, 0), (1, 1)),
                                         ((3, 2), (0, 1))])
def test_empty_strided_has_torch_strides(size, stride):
    ours = corenn.empty_strided(size, stride, dtype=corenn.float64)
    theirs = torch.empty_strided(size, stride, dtype=torch.float64)
    assert ours.shape == tuple(theirs.shape) and ours.stride() == theirs.stride()
    assert ours.dtype is corenn.float64


@pytest.mark.parametrize("size,order", [((2, 3, 4), (2, 0, 1)), ((2, 3), (1, 0)), ((2, 3, 4), (0, 1, 2))])
def test_empty_permuted_has_torch_strides(size, order):
    ours, theirs = corenn.empty_permuted(size, order), torch.empty_permuted(size, order)
    assert ours.shape == tuple(theirs.shape) and ours.stride() == theirs.stride()


def test_asarray_shares_and_copies_as_torch():
    array = np.arange(3.0)
    shared = corenn.asarray(array)
    array[0] = 9.0
    assert shared[0].item() == 9.0 and shared.dtype is corenn.float64
    copied = corenn.asarray(array, copy=True)
    array[1] = 7.0
    assert copied[1].item() == 1.0
    t = corenn.tensor([1.0, 2.0])
    assert corenn.asarray(t) is t
    assert corenn.asarray(t, dtype=corenn.float64).dtype is corenn.float64
    assert corenn.asarray([1, 2]).dtype is corenn.int64 and torch.asarray([1, 2]).dtype is torch.int64
    assert corenn.asarray([1.5], requires_grad=True).requires_grad
    for lib in (corenn, torch):
        with pytest.raises(ValueError):
            lib.asarray(np.arange(3.0), dtype=lib.float32, copy=False)


def test_frombuffer_shares_memory_as_torch():
    buffer = bytearray(np.array([1, 2, 3, 4], dtype=np.int32).tobytes())
    ours = corenn.frombuffer(buffer, dtype=corenn.int32, count=2, offset=4)
    theirs = torch.frombuffer(buffer, dtype=torch.int32, count=2, offset=4)
    assert ours.tolist() == theirs.tolist() == [2, 3]
    ours[0] = 20
    assert theirs[0].item() == 20  # both views of the same bytes
    assert corenn.frombuffer(buffer, dtype=corenn.int16).shape == (8,)
    for lib in (corenn, torch):
        with pytest.raises(ValueError):
            lib.frombuffer(buffer, dtype=lib.int32, count=5)
        with pytest.raises(ValueError):
            lib.frombuffer(buffer, dtype=lib.int32, offset=16)


def test_fill_matches_torch():
    x = np.arange(6.0).reshape(2, 3)
    match_torch(lambda t: corenn.fill(t, 2.5), lambda t: torch.fill(t, 2.5), [x], torch)
    match_torch(lambda t, v: corenn.fill(t, v), lambda t, v: torch.fill(t, v), [x, np.array(1.5)], torch)
    ints = corenn.fill(corenn.tensor([1, 2]), 3)
    assert ints.dtype is corenn.int64 and ints.tolist() == [3, 3]
    for value in (3.5, True, -2):  # a number is cast to input's dtype, as PyTorch casts it
        for base in ([1, 2], [True, False], [0.5, 1.5]):
            ours, theirs = corenn.fill(corenn.tensor(base), value), torch.fill(torch.tensor(base), value)
            assert ours.tolist() == theirs.tolist() and str(ours.dtype)[7:] == str(theirs.dtype)[6:]
    with pytest.raises(RuntimeError, match="0-dimension"):
        corenn.fill(corenn.zeros(2), corenn.zeros(2))


def test_fill_and_zero_in_place():
    x = corenn.ones(2, 2)
    assert corenn.fill_(x, 4.0) is x and x.tolist() == [[4.0, 4.0], [4.0, 4.0]]
    assert corenn.zero_(x) is x and not x.numpy().any()


def test_resize_matches_torch():
    ours, theirs = corenn.arange(6.0), torch.arange(6.0)
    assert ours.resize_(2, 2) is ours
    theirs.resize_(2, 2)
    assert ours.tolist() == theirs.tolist()
    ours.resize_((3, 3))
    theirs.resize_((3, 3))
    assert ours.shape == tuple(theirs.shape) and ours.reshape(-1)[:4].tolist() == theirs.reshape(-1)[:4].tolist()
    corenn.resize_as_(ours, corenn.zeros(1, 2))
    assert ours.tolist() == [[0.0, 1.0]]
    assert ours.resize_as_(corenn.zeros(3)).shape == (3,)
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match="require grad"):
            lib.ones(2, requires_grad=True).resize_(3)


def test_range_matches_torch_and_warns():
    for args in ((0, 2, 0.5), (1, 4), (3, 0, -1)):
        with pytest.warns(UserWarning, match="deprecated"):
            ours = corenn.range(*args)
        with pytest.warns(UserWarning):
            theirs = torch.range(*args)
        assert ours.dtype is corenn.float32 and ours.tolist() == theirs.tolist()


def test_new_empty_strided():
    x = corenn.zeros(2, dtype=corenn.float64)
    y = x.new_empty_strided((2, 3), (1, 2))
    assert y.dtype is corenn.float64 and y.stride() == torch.zeros(2).new_empty_strided((2, 3), (1, 2)).stride()


STFT_CASES = [
    ({"n_fft": 8}, (30,)),
    ({"n_fft": 8, "hop_length": 3, "window": 8}, (2, 25)),
    ({"n_fft": 8, "win_length": 6, "window": 6, "center": False}, (30,)),
    ({"n_fft": 7, "onesided": False, "normalized": True}, (2, 25)),
    ({"n_fft": 8, "pad_mode": "constant"}, (30,)),
    ({"n_fft": 6, "win_length": 4, "hop_length": 2}, (20,)),
]


@pytest.mark.parametrize("kwargs,shape", STFT_CASES, ids=[str(c[0]) for c in STFT_CASES])
def test_stft_matches_torch(kwargs, shape):
    """stft's older real form (return_complex=False): values and gradients against PyTorch, and gradcheck."""
    from _breadth_outputs import check_gradients
    signal = np.random.default_rng(9).standard_normal(shape)

    def run(lib, t):
        options = dict(kwargs)
        if "window" in options:
            options["window"] = lib.hann_window(options["window"], dtype=lib.float64)
        return lib.stft(t, return_complex=False, **options)
    with pytest.warns(UserWarning):
        match_torch(lambda t: run(corenn, t), lambda t: run(torch, t), [signal], torch)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_gradients(lambda t: run(corenn, t), [signal])


def test_stft_errors_match_torch():
    x = corenn.ones(16)
    for lib, signal in ((corenn, x), (torch, torch.ones(16))):
        with pytest.raises(RuntimeError, match="return_complex"):
            lib.stft(signal, 8)
    with pytest.raises(NotImplementedError, match="complex"):
        corenn.stft(x, 8, return_complex=True)
    with pytest.warns(UserWarning):
        assert x.stft(8, return_complex=False).shape == tuple(torch.ones(16).stft(8, return_complex=False).shape)


def test_from_file_matches_torch(tmp_path):
    path = tmp_path / "values.bin"
    np.arange(6, dtype=np.float32).tofile(path)
    for kwargs in ({"shared": False, "size": 4}, {"size": 6, "dtype": "float32"}, {"size": 2, "dtype": "float64"},
                   {}):
        ours_kwargs = {k: getattr(corenn, v) if k == "dtype" else v for k, v in kwargs.items()}
        theirs_kwargs = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
        ours, theirs = corenn.from_file(str(path), **ours_kwargs), torch.from_file(str(path), **theirs_kwargs)
        assert ours.tolist() == theirs.tolist() and str(ours.dtype)[7:] == str(theirs.dtype)[6:]
    shared = corenn.from_file(str(path), shared=True, size=6)
    shared[0] = 42.0
    assert np.fromfile(path, dtype=np.float32)[0] == 42.0  # the tensor maps the file
    private = corenn.from_file(str(path), size=6)
    private[1] = 7.0
    assert np.fromfile(path, dtype=np.float32)[1] == 1.0
    assert isinstance((shared + 1).numpy(), np.ndarray) and type((shared + 1).numpy()) is np.ndarray
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match="smaller than"):
            lib.from_file(str(path), size=10)
        with pytest.raises(RuntimeError, match="unable to open"):
            lib.from_file(str(tmp_path / "missing.bin"), size=1)


def test_legacy_new_matches_torch():
    ours, theirs = corenn.ones(2, dtype=corenn.float64), torch.ones(2, dtype=torch.float64)
    for args in ((2, 3), (), ([1, 2],), ((1, 2),)):
        a, b = ours.new(*args), theirs.new(*args)
        assert a.shape == tuple(b.shape) and a.dtype is corenn.float64
        if args and isinstance(args[0], (list, tuple)):
            assert a.tolist() == b.tolist()
    assert ours.new(corenn.Size([3])).shape == (3,)
    shared = corenn.tensor([1.0, 2.0], dtype=corenn.float64)
    assert np.shares_memory(ours.new(shared).numpy(), shared.numpy())
    for lib, x in ((corenn, ours), (torch, theirs)):
        with pytest.raises(TypeError):
            x.new(2.5)
        with pytest.raises(TypeError):
            x.new(lib.tensor([1, 2]))
