"""nn.init: gains, fans, the distributions each initialiser draws from, deterministic fills, errors."""
import contextlib
import math

import numpy as np
import pytest

import corenn
from corenn import nn

init = nn.init


def ks_distance(samples, cdf):
    """Kolmogorov-Smirnov distance between the samples and a CDF."""
    x = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    n = x.size
    theory = cdf(x)
    return max(np.max(np.arange(1, n + 1) / n - theory), np.max(theory - np.arange(0, n) / n))


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def standard_normal_cdf(z):
    # erfc keeps the far tails accurate (1 + erf(z) would round them to 0).
    return 0.5 * _erfc(-np.asarray(z, dtype=np.float64) / math.sqrt(2))


def normal_cdf(mean, std):
    return lambda x: standard_normal_cdf((x - mean) / std)


def truncated_normal_cdf(mean, std, a, b):
    low, high = standard_normal_cdf((a - mean) / std), standard_normal_cdf((b - mean) / std)
    return lambda x: (standard_normal_cdf((x - mean) / std) - low) / (high - low)


def uniform_cdf(a, b):
    return lambda x: np.clip((x - a) / (b - a), 0, 1)


@pytest.mark.torch
@pytest.mark.parametrize("name,param", [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None),
                                        ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2),
                                        ("leaky_relu", 3), ("selu", None), ("conv_transpose3d", None)])
def test_calculate_gain_matches_torch(torch, name, param):
    assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity softmax"):
        init.calculate_gain("softmax")
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        init.calculate_gain("leaky_relu", True)


@pytest.mark.torch
@pytest.mark.parametrize("shape", [(3, 5), (8, 4, 3), (6, 2, 3, 3)])
def test_fans_match_torch(torch, shape):
    from torch.nn.init import _calculate_fan_in_and_fan_out as torch_fans
    assert init._calculate_fan_in_and_fan_out(corenn.empty(*shape)) == torch_fans(torch.empty(*shape))


def test_fans_need_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(corenn.empty(5))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(corenn.empty(3, 3), mode="fan_avg")


def test_uniform_and_normal_distributions():
    corenn.manual_seed(0)
    u = init.uniform_(corenn.empty(200, 100), -0.5, 1.5)
    assert ks_distance(u.numpy(), uniform_cdf(-0.5, 1.5)) < 0.015
    n = init.normal_(corenn.empty(200, 100), mean=1.0, std=0.5)
    assert ks_distance(n.numpy(), normal_cdf(1.0, 0.5)) < 0.015


def test_xavier_and_kaiming_use_the_documented_scales():
    corenn.manual_seed(0)
    fan_in, fan_out = 300, 200
    w = init.xavier_uniform_(corenn.empty(fan_out, fan_in), gain=2.0)
    bound = 2.0 * math.sqrt(6.0 / (fan_in + fan_out))
    assert ks_distance(w.numpy(), uniform_cdf(-bound, bound)) < 0.015
    w = init.xavier_normal_(corenn.empty(fan_out, fan_in))
    assert ks_distance(w.numpy(), normal_cdf(0, math.sqrt(2.0 / (fan_in + fan_out)))) < 0.015
    w = init.kaiming_uniform_(corenn.empty(fan_out, fan_in), a=math.sqrt(5))
    bound = math.sqrt(2.0 / (1 + 5)) * math.sqrt(3.0 / fan_in)  # nn.Linear's default init
    assert ks_distance(w.numpy(), uniform_cdf(-bound, bound)) < 0.015
    w = init.kaiming_normal_(corenn.empty(fan_out, fan_in, 1, 1), mode="fan_out", nonlinearity="relu")
    assert ks_distance(w.numpy(), normal_cdf(0, math.sqrt(2.0 / fan_out))) < 0.015


def test_kaiming_on_zero_element_tensor_warns():
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        init.kaiming_uniform_(corenn.empty(0, 3))


@pytest.mark.parametrize("a,b", [(-2.0, 2.0), (-0.5, 0.25), (3.0, 4.0), (-8.0, -5.0)])
def test_trunc_normal_matches_the_truncated_distribution(a, b):
    corenn.manual_seed(0)
    mean, std = 0.5, 1.0
    far = mean < a - 2 * std or mean > b + 2 * std  # PyTorch warns there; the inverse-CDF draw still holds up
    with pytest.warns(UserWarning, match="more than 2 std") if far else contextlib.nullcontext():
        w = init.trunc_normal_(corenn.empty(20000, dtype=corenn.float64), mean=mean, std=std, a=a, b=b)
    values = w.numpy()
    assert values.min() >= a and values.max() <= b
    assert ks_distance(values, truncated_normal_cdf(mean, std, a, b)) < 0.015


def test_trunc_normal_float32_and_bad_bounds():
    w = init.trunc_normal_(corenn.empty(1000), std=0.02)
    assert w.dtype is corenn.float32 and float(w.abs().max()) <= 2.0
    assert 0.015 < float(w.std()) < 0.025
    with pytest.raises(ValueError, match="lower bound"):
        init.trunc_normal_(corenn.empty(3), a=1.0, b=0.0)


def test_constant_ones_zeros_eye():
    assert init.constant_(corenn.empty(2), 0.3).tolist() == pytest.approx([0.3, 0.3])
    assert init.ones_(corenn.empty(2)).tolist() == [1.0, 1.0]
    assert init.zeros_(corenn.empty(2)).tolist() == [0.0, 0.0]
    assert init.eye_(corenn.empty(2, 3)).tolist() == [[1, 0, 0], [0, 1, 0]]
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        init.eye_(corenn.empty(2, 2, 2))


@pytest.mark.torch
@pytest.mark.parametrize("shape,groups", [((4, 4, 3), 1), ((6, 3, 3, 3), 1), ((4, 2, 3, 5), 2), ((8, 2, 3, 3, 3), 4),
                                          ((2, 5, 1), 1)])
def test_dirac_matches_torch(torch, shape, groups):
    expected = torch.nn.init.dirac_(torch.empty(*shape), groups=groups).numpy()
    np.testing.assert_array_equal(init.dirac_(corenn.empty(*shape), groups=groups).numpy(), expected)


def test_dirac_errors():
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions are supported"):
        init.dirac_(corenn.empty(3, 3))
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(corenn.empty(3, 3, 3), groups=2)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 2, 3), (6, 6)])
def test_orthogonal(shape):
    corenn.manual_seed(0)
    w = init.orthogonal_(corenn.empty(*shape, dtype=corenn.float64), gain=2.0).numpy().reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-10)
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions are supported"):
        init.orthogonal_(corenn.empty(3))


def test_sparse_zeroes_a_fraction_of_each_column():
    corenn.manual_seed(0)
    w = init.sparse_(corenn.empty(10, 4), sparsity=0.3).numpy()
    assert ((w == 0).sum(axis=0) == 3).all()


def test_inits_work_on_parameters_without_recording():
    p = nn.Parameter(corenn.empty(4, 3))
    for fn in (init.uniform_, init.normal_, init.xavier_uniform_, init.kaiming_normal_, init.orthogonal_,
               init.trunc_normal_, init.zeros_, init.eye_):
        assert fn(p) is p
        assert p.is_leaf and p.grad_fn is None and p.requires_grad


def test_generator_makes_fills_reproducible():
    g1, g2 = corenn.Generator(), corenn.Generator()
    g1.manual_seed(7)
    g2.manual_seed(7)
    a = init.kaiming_uniform_(corenn.empty(3, 4), generator=g1)
    b = init.kaiming_uniform_(corenn.empty(3, 4), generator=g2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_non_tensor_is_a_clear_error():
    with pytest.raises(TypeError, match="uniform_\\(\\): argument 'tensor' must be Tensor, not list"):
        init.uniform_([1.0])
