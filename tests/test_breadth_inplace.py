"""In-place variants (``t.name_(...)`` and ``torch.name_(t, ...)``) against PyTorch 2.13: the values written, the
tensor returned (self), the dtype kept, gradients through an in-place op on a non-leaf, a leaf that requires
grad refused, and in-place views (t_, transpose_, squeeze_, ...)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn

pytestmark = pytest.mark.torch
RNG = np.random.default_rng(7)

_OTHER = RNG.uniform(-2, 2, size=(4,))
# method -> (low, high) of self's values, extra arguments (an ndarray becomes a tensor of each library)
FLOAT_METHODS = {
    "abs_": ((-2, 2), ()), "absolute_": ((-2, 2), ()), "neg_": ((-2, 2), ()), "negative_": ((-2, 2), ()),
    "exp_": ((-2, 2), ()), "exp2_": ((-2, 2), ()), "expm1_": ((-2, 2), ()), "log_": ((0.1, 3), ()),
    "log2_": ((0.1, 3), ()), "log10_": ((0.1, 3), ()), "log1p_": ((-0.5, 3), ()), "sqrt_": ((0.1, 3), ()),
    "rsqrt_": ((0.1, 3), ()), "square_": ((-2, 2), ()), "reciprocal_": ((0.2, 3), ()), "sin_": ((-2, 2), ()),
    "cos_": ((-2, 2), ()), "tan_": ((-1.2, 1.2), ()), "tanh_": ((-2, 2), ()), "sigmoid_": ((-2, 2), ()),
    "relu_": ((-2, 2), ()), "erf_": ((-2, 2), ()), "floor_": ((-3, 3), ()), "ceil_": ((-3, 3), ()),
    "round_": ((-3, 3), ()), "trunc_": ((-3, 3), ()), "fix_": ((-3, 3), ()), "frac_": ((-3, 3), ()),
    "clamp_": ((-2, 2), (-0.5, 0.7)), "clip_": ((-2, 2), (-0.5, 0.7)), "clamp_min_": ((-2, 2), (0.1,)),
    "clamp_max_": ((-2, 2), (0.1,)), "asin_": ((-0.9, 0.9), ()), "acos_": ((-0.9, 0.9), ()),
    "atan_": ((-3, 3), ()), "asinh_": ((-3, 3), ()), "acosh_": ((1.1, 4), ()), "atanh_": ((-0.9, 0.9), ()),
    "arcsin_": ((-0.9, 0.9), ()), "arccos_": ((-0.9, 0.9), ()), "arctan_": ((-3, 3), ()),
    "arcsinh_": ((-3, 3), ()), "arccosh_": ((1.1, 4), ()), "arctanh_": ((-0.9, 0.9), ()), "sinh_": ((-2, 2), ()),
    "cosh_": ((-2, 2), ()), "sinc_": ((-2, 2), ()), "deg2rad_": ((-200, 200), ()), "rad2deg_": ((-3, 3), ()),
    "logit_": ((0.05, 0.95), ()), "sgn_": ((-2, 2), ()), "sign_": ((-2, 2), ()),
    "atan2_": ((-2, 2), (_OTHER,)), "arctan2_": ((-2, 2), (_OTHER,)), "hypot_": ((-2, 2), (_OTHER,)),
    "copysign_": ((-2, 2), (_OTHER,)), "ldexp_": ((-2, 2), (np.round(_OTHER),)),
    "xlogy_": ((-2, 2), (np.abs(_OTHER),)), "nextafter_": ((-2, 2), (_OTHER,)),
    "eq_": ((-2, 2), (_OTHER,)), "ne_": ((-2, 2), (_OTHER,)), "lt_": ((-2, 2), (_OTHER,)),
    "le_": ((-2, 2), (0.5,)), "gt_": ((-2, 2), (_OTHER,)), "ge_": ((-2, 2), (_OTHER,)),
    "greater_": ((-2, 2), (_OTHER,)), "greater_equal_": ((-2, 2), (_OTHER,)), "less_": ((-2, 2), (_OTHER,)),
    "less_equal_": ((-2, 2), (_OTHER,)), "not_equal_": ((-2, 2), (_OTHER,)),
    "logical_and_": ((-2, 2), (_OTHER,)), "logical_or_": ((-2, 2), (_OTHER,)),
    "logical_xor_": ((-2, 2), (_OTHER,)), "subtract_": ((-2, 2), (_OTHER,)), "multiply_": ((-2, 2), (_OTHER,)),
    "divide_": ((-2, 2), (_OTHER,)), "true_divide_": ((-2, 2), (_OTHER,)), "floor_divide_": ((-2, 2), (_OTHER,)),
    "nan_to_num_": ((-2, 2), ()), "cumsum_": ((-2, 2), (1,)), "cumprod_": ((-2, 2), (0,)),
    "fmod_": ((-2, 2), (0.7,)), "remainder_": ((-2, 2), (0.7,)), "float_power_": ((0.1, 2), (2.5,)),
    "heaviside_": ((-2, 2), (_OTHER,)), "fill_diagonal_": ((-2, 2), (3.5,)),
}


def _args(args, lib):
    return [lib.tensor(a) if isinstance(a, np.ndarray) else a for a in args]


@pytest.mark.parametrize("method", sorted(FLOAT_METHODS))
def test_float_method_matches_torch(method, torch):
    (low, high), args = FLOAT_METHODS[method]
    x = RNG.uniform(low, high, size=(3, 4))
    ours, theirs = corenn.tensor(x), torch.tensor(x)
    assert getattr(ours, method)(*_args(args, corenn)) is ours
    getattr(theirs, method)(*_args(args, torch))
    assert ours.dtype == corenn.float64 and tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
    if hasattr(torch, method):  # the function form, torch.name_(t, ...)
        ours, theirs = corenn.tensor(x), torch.tensor(x)
        assert getattr(corenn, method)(ours, *_args(args, corenn)) is ours
        getattr(torch, method)(theirs, *_args(args, torch))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


DIFFERENTIABLE = sorted(m for m in FLOAT_METHODS
                        if m not in {"eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater_", "greater_equal_", "less_",
                                     "less_equal_", "not_equal_", "logical_and_", "logical_or_", "logical_xor_",
                                     "floor_divide_", "nextafter_", "heaviside_", "nan_to_num_", "sgn_"})


# PyTorch 2.13 has no derivative for these in-place forms ("the derivative for 'inplace version of acosh' is not
# implemented"); corenn differentiates them as their out-of-place forms.
NO_TORCH_DERIVATIVE = {"acosh_", "arccosh_", "asinh_", "arcsinh_", "atanh_", "arctanh_"}


@pytest.mark.parametrize("method", DIFFERENTIABLE)
def test_gradient_through_inplace_on_a_non_leaf(method, torch):
    (low, high), args = FLOAT_METHODS[method]
    x = RNG.uniform(low, high, size=(3, 4))
    weights = RNG.standard_normal((3, 4))
    grads = []
    for lib in (corenn, torch):
        leaf = lib.tensor(x, requires_grad=True)
        y = leaf * 1.0
        if lib is torch and method in NO_TORCH_DERIVATIVE:  # the out-of-place form as the reference
            y = getattr(y, method[:-1])(*_args(args, lib))
        else:
            assert getattr(y, method)(*_args(args, lib)) is y
        (y * lib.tensor(weights)).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-10, atol=1e-12)


def test_torch_refuses_some_inplace_derivatives_corenn_has(torch):
    leaf = torch.tensor([2.0], requires_grad=True)
    with pytest.raises(NotImplementedError, match="inplace version of acosh"):
        (leaf * 1.0).acosh_().sum().backward()


@pytest.mark.parametrize("method", ["logical_and_", "logical_or_", "logical_xor_"])
def test_logical_inplace_writes_into_a_leaf_as_torch(method, torch):
    results = []
    for lib in (corenn, torch):
        leaf = lib.tensor([0.0, 1.0, 2.0], requires_grad=True)
        assert getattr(leaf, method)(lib.tensor([1.0, 0.0, 3.0])) is leaf
        results.append(leaf.detach().numpy().tolist())
    assert results[0] == results[1]


@pytest.mark.parametrize("method", sorted(set(FLOAT_METHODS) - {"logical_and_", "logical_or_", "logical_xor_"})
                         + ["t_", "squeeze_", "conj_physical_"])
def test_leaf_that_requires_grad_refuses(method, torch):
    (_, args) = FLOAT_METHODS.get(method, ((0, 1), ()))
    for lib in (corenn, torch):
        leaf = lib.ones(3, 4, dtype=lib.float64, requires_grad=True)
        with pytest.raises(RuntimeError, match="a (view of a )?leaf Variable that requires grad is being used in an "
                                               "in-place operation"):
            getattr(leaf, method)(*_args(args, lib))
    leaf = corenn.ones(3, 4, dtype=corenn.float64, requires_grad=True)
    with corenn.no_grad():
        assert getattr(leaf, method)(*_args(args, corenn)) is leaf


INT_METHODS = {
    "bitwise_and_": (np.array([3, 5, 6, 1]),), "bitwise_or_": (np.array([3, 5, 6, 1]),),
    "bitwise_xor_": (np.array([3, 5, 6, 1]),), "bitwise_not_": (), "bitwise_left_shift_": (np.array([1, 2, 0, 3]),),
    "bitwise_right_shift_": (np.array([1, 2, 0, 3]),), "gcd_": (np.array([4, 6, 9, 12]),),
    "lcm_": (np.array([4, 6, 9, 12]),), "floor_divide_": (np.array([4, -3, 2, 5]),), "abs_": (), "neg_": (),
    "eq_": (np.array([3, 5, 6, 1]),), "lt_": (4,), "square_": (), "heaviside_": (np.array([7]),),
    "cumsum_": (0,), "cumprod_": (1,), "fill_diagonal_": (-9,),
}


@pytest.mark.parametrize("method", sorted(INT_METHODS))
def test_integer_method_matches_torch(method, torch):
    x = RNG.integers(-20, 20, size=(3, 4))
    ours, theirs = corenn.tensor(x), torch.tensor(x)
    assert getattr(ours, method)(*_args(INT_METHODS[method], corenn)) is ours
    getattr(theirs, method)(*_args(INT_METHODS[method], torch))
    assert ours.dtype == corenn.int64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    if hasattr(torch, method):
        ours = corenn.tensor(x)
        assert getattr(corenn, method)(ours, *_args(INT_METHODS[method], corenn)) is ours


@pytest.mark.parametrize("method", ["sin_", "exp_", "sqrt_", "asin_", "sinh_", "logit_", "true_divide_", "hypot_"])
def test_integer_self_refuses_a_float_result(method, torch):
    args = (corenn.tensor([2.0, 3.0]),) if method in ("true_divide_", "hypot_") else ()
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        getattr(corenn.tensor([1, 2]), method)(*args)
    targs = (torch.tensor([2.0, 3.0]),) if args else ()
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        getattr(torch.tensor([1, 2]), method)(*targs)


def test_float_power_inplace_needs_float64(torch):
    for lib in (corenn, torch):
        with pytest.raises(RuntimeError, match="the base given to float_power_ has dtype Float but the operation's "
                                               "result requires dtype Double"):
            lib.ones(2).float_power_(2)


@pytest.mark.parametrize("method,args", [("t_", ()), ("transpose_", (0, 2)), ("swapaxes_", (1, 2)),
                                         ("swapdims_", (0, 1)), ("squeeze_", ()), ("squeeze_", (1,)),
                                         ("unsqueeze_", (-1,)), ("unsqueeze_", (0,))])
def test_inplace_views_match_torch(method, args, torch):
    shape = (3, 4) if method == "t_" else (3, 1, 4)
    x = RNG.standard_normal(shape)
    ours, theirs = corenn.tensor(x), torch.tensor(x)
    assert getattr(ours, method)(*args) is ours
    getattr(theirs, method)(*args)
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.stride() == theirs.stride()
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    grads = []
    for lib in (corenn, torch):
        leaf = lib.tensor(x, requires_grad=True)
        y = leaf * 2.0
        getattr(y, method)(*args)
        (y * lib.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)))).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


@pytest.mark.parametrize("shape,wrap", [((3, 3), False), ((7, 3), True), ((7, 3), False), ((3, 7), True),
                                        ((2, 2, 2), False)])
def test_fill_diagonal_matches_torch(shape, wrap, torch):
    ours, theirs = corenn.zeros(shape), torch.zeros(shape)
    ours.fill_diagonal_(1.5, wrap=wrap)
    theirs.fill_diagonal_(1.5, wrap=wrap)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    for bad_shape, message in (((3,), "dimensions must larger than 1"),
                               ((2, 3, 4), "all dimensions of input must be of equal length")):
        for lib in (corenn, torch):
            with pytest.raises(RuntimeError, match=message):
                lib.zeros(bad_shape).fill_diagonal_(1)


def test_views_see_inplace_writes():
    base = corenn.zeros(2, 3)
    row = base[0]
    row.asin_()
    row.add_(0.5).cosh_()
    np.testing.assert_allclose(base.numpy()[0], np.cosh(0.5))
    column = base[:, 1]
    column.eq_(0)
    assert base.numpy()[:, 1].tolist() == [0.0, 1.0]


# ---------------------------------------------------------------------------------------------------------
# Random fills and sampling methods: statistics with a fixed seed (the streams are corenn's own, not PyTorch's)
# ---------------------------------------------------------------------------------------------------------

def test_cauchy_fill_has_cauchy_quartiles():
    generator = corenn.Generator().manual_seed(3)
    x = corenn.empty(40000, dtype=corenn.float64)
    assert x.cauchy_(median=2.0, sigma=0.5, generator=generator) is x
    quartiles = np.quantile(x.numpy(), [0.25, 0.5, 0.75])
    np.testing.assert_allclose(quartiles, [1.5, 2.0, 2.5], atol=0.02)  # median -+ sigma
    again = corenn.empty(40000, dtype=corenn.float64).cauchy_(2.0, 0.5, generator=corenn.Generator().manual_seed(3))
    np.testing.assert_array_equal(again.numpy(), x.numpy())
    assert corenn.empty(3, dtype=corenn.float32).cauchy_().dtype == corenn.float32


def test_geometric_fill_has_geometric_moments():
    corenn.manual_seed(5)
    for dtype in (corenn.float32, corenn.int64):
        x = corenn.zeros(40000, dtype=dtype).geometric_(0.25)
        values = x.numpy()
        assert x.dtype == dtype and values.min() >= 1 and np.all(values == np.round(values))
        assert abs(values.mean() - 4.0) < 0.1  # 1 / p
        assert abs(values.var() - 12.0) < 0.8  # (1 - p) / p^2
        assert abs((values == 1).mean() - 0.25) < 0.01


def test_log_normal_fill_has_log_normal_moments():
    corenn.manual_seed(6)
    x = corenn.empty(40000, dtype=corenn.float64).log_normal_(0.5, 0.3)
    logs = np.log(x.numpy())
    assert abs(logs.mean() - 0.5) < 0.01 and abs(logs.std() - 0.3) < 0.01
    default = np.log(corenn.empty(40000, dtype=corenn.float64).log_normal_().numpy())
    assert abs(default.mean() - 1.0) < 0.05 and abs(default.std() - 2.0) < 0.05  # PyTorch's defaults: 1, 2


@pytest.mark.parametrize("call,message,error", [
    (lambda lib: lib.zeros(3).geometric_(1.5), "geometric_ expects p to be in (0, 1), but got p=1.5", RuntimeError),
    (lambda lib: lib.zeros(3).geometric_(0), "geometric_ expects p to be in (0, 1), but got p=0", RuntimeError),
    (lambda lib: lib.zeros(3).log_normal_(1, -1), "log_normal_ expects std > 0.0, but found std=-1", RuntimeError),
    (lambda lib: lib.zeros(3).cauchy_(0, 0), "cauchy_ expects sigma > 0.0, but found sigma=0", RuntimeError),
    (lambda lib: lib.zeros(3, dtype=lib.int64).cauchy_(), "dtype must be a floating point but you specified long int",
     RuntimeError),
    (lambda lib: lib.zeros(3, dtype=lib.int64).log_normal_(), "\"log_normal_cpu\" not implemented for 'Long'",
     NotImplementedError),
    (lambda lib: lib.tensor([1.5]).bernoulli(), "Expected p_in >= 0 && p_in <= 1 to be true", RuntimeError),
    (lambda lib: lib.tensor([0.5]).bernoulli(1.5), "bernoulli_ expects p to be in [0, 1], but got p=1.5",
     RuntimeError),
    (lambda lib: lib.tensor([1, 0]).bernoulli(), "\"bernoulli_tensor_cpu_p_\" not implemented for 'Long'",
     NotImplementedError),
    (lambda lib: lib.tensor([[0.5, 0.5]]).multinomial(3),
     ("cannot sample n_sample > prob_dist.size(-1) samples without replacement"), RuntimeError),
])
def test_random_errors_match_torch(call, message, error, torch):
    import re
    for lib in (corenn, torch):
        with pytest.raises(error, match=re.escape(message)):
            call(lib)


def test_random_fills_refuse_a_leaf_that_requires_grad(torch):
    for method, args in (("cauchy_", ()), ("geometric_", (0.5,)), ("log_normal_", ())):
        for lib in (corenn, torch):
            with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
                getattr(lib.zeros(2, requires_grad=True), method)(*args)


def test_bernoulli_and_multinomial_methods():
    corenn.manual_seed(8)
    p = corenn.tensor([0.1, 0.5, 0.9], dtype=corenn.float64).expand(20000, 3)
    draws = p.bernoulli()
    assert draws.dtype == corenn.float64 and set(np.unique(draws.numpy())) <= {0.0, 1.0}
    np.testing.assert_allclose(draws.numpy().mean(axis=0), [0.1, 0.5, 0.9], atol=0.015)
    assert abs(corenn.zeros(20000).bernoulli(0.3).numpy().mean() - 0.3) < 0.015
    weights = corenn.tensor([[1.0, 2.0, 7.0], [5.0, 0.0, 5.0]])
    samples = weights.multinomial(20000, replacement=True)
    assert samples.shape == (2, 20000) and samples.dtype == corenn.int64
    np.testing.assert_allclose(np.bincount(samples.numpy()[0], minlength=3) / 20000, [0.1, 0.2, 0.7], atol=0.015)
    assert 1 not in samples.numpy()[1]
    distinct = weights[0].multinomial(3, generator=corenn.Generator().manual_seed(1))
    assert sorted(distinct.tolist()) == [0, 1, 2]
    again = weights[0].multinomial(3, generator=corenn.Generator().manual_seed(1))
    assert again.tolist() == distinct.tolist()


def test_binomial_has_binomial_moments(torch):
    binomial = corenn.binomial
    generator = corenn.Generator().manual_seed(9)
    count = corenn.tensor([[10.0], [2.5], [-3.0]], dtype=corenn.float64).expand(3, 20000)
    prob = corenn.tensor([0.3], dtype=corenn.float64)
    draws = binomial(count, prob, generator=generator)
    assert draws.dtype == corenn.float64 and draws.shape == (3, 20000)
    values = draws.numpy()
    assert abs(values[0].mean() - 3.0) < 0.05 and abs(values[0].var() - 2.1) < 0.1
    assert set(np.unique(values[1])) <= {0.0, 1.0, 2.0}  # 2.5 trials count as 2, as PyTorch's draws do
    assert not values[2].any()
    edges = binomial(corenn.tensor([5.0, 5.0, 5.0, math.nan]), corenn.tensor([-0.5, 0.0, 1.5, 0.5]))
    theirs = torch.binomial(torch.tensor([5.0, 5.0, 5.0]), torch.tensor([-0.5, 0.0, 1.5]))
    assert edges.tolist()[:3] == theirs.tolist() == [0.0, 0.0, 5.0] and math.isnan(edges.tolist()[3])
    again = binomial(count, prob, generator=corenn.Generator().manual_seed(9))
    np.testing.assert_array_equal(again.numpy(), values)


@pytest.mark.parametrize("counts,probs,error,message", [
    ([5], [0.5], ValueError, "binomial only supports floating-point dtypes for count, got: Long"),
    ([5.0], "float64", RuntimeError, "Found dtype Double but expected Float"),
    ([5.0, 3.0], [0.5, 0.2, 0.1], RuntimeError, "The size of tensor a (2) must match the size of tensor b (3)"),
    ([5.0], 0.5, TypeError, "binomial(): argument 'prob' (position 2) must be Tensor, not float"),
])
def test_binomial_errors_match_torch(counts, probs, error, message, torch):
    import re
    for lib, binomial in ((corenn, corenn.binomial), (torch, torch.binomial)):
        prob = (lib.tensor([0.5], dtype=lib.float64) if probs == "float64" else
                probs if isinstance(probs, float) else lib.tensor(probs))
        with pytest.raises(error, match=re.escape(message)):
            binomial(lib.tensor(counts), prob)


def test_apply_map_map2_match_torch(torch):
    x = RNG.uniform(-3, 3, (2, 3))
    row, column = RNG.uniform(-1, 1, (3,)), RNG.uniform(-1, 1, (2, 1))
    calls = [
        ("apply_", lambda lib: (lambda v: v * v - 1.5,)),
        ("map_", lambda lib: (lib.tensor(row), lambda a, b: a * b + 0.5)),
        ("map2_", lambda lib: (lib.tensor(row), lib.tensor(column), lambda a, b, c: a + b * c)),
    ]
    for method, arguments in calls:
        ours, theirs = corenn.tensor(x), torch.tensor(x)
        assert getattr(ours, method)(*arguments(corenn)) is ours
        getattr(theirs, method)(*arguments(torch))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-15)
    for values, function in (([1, 2], lambda v: v * 2.7), ([True, False], lambda v: not v), ([3, 250], lambda v: v)):
        ours, theirs = corenn.tensor(values), torch.tensor(values)
        assert ours.apply_(function).tolist() == theirs.apply_(function).tolist()
    for lib in (corenn, torch):
        with pytest.raises(TypeError, match="must be real number, not str"):
            lib.tensor([1.0]).apply_(lambda v: "a")
        with pytest.raises(RuntimeError, match=r"Can't call apply_\(\) on Variable that requires grad. Use "
                                               r"var.detach\(\).apply_\(\) instead."):
            lib.ones(2, requires_grad=True).apply_(lambda v: v)
        with pytest.raises(RuntimeError, match="The expanded size of the tensor"):
            lib.zeros(2, 3).map_(lib.zeros(3, 2), lambda a, b: a)
    calls = []
    corenn.tensor([[1, 2], [3, 4]]).apply_(lambda v: calls.append(v) or v)
    assert calls == [1, 2, 3, 4]  # row-major, once per element


@pytest.mark.parametrize("method", ["atan2_", "hypot_", "eq_", "logaddexp", "copysign_"])
def test_inplace_refuses_a_result_larger_than_self(method, torch):
    if method == "logaddexp":  # PyTorch has no logaddexp_: the out-of-place form broadcasts
        assert corenn.zeros(4).logaddexp(corenn.ones(3, 4)).shape == (3, 4)
        assert not hasattr(torch.Tensor, "logaddexp_") and not hasattr(corenn.Tensor, "logaddexp_")
        return
    for lib in (corenn, torch):
        for requires_grad in (False, True):
            x = lib.zeros(4, requires_grad=True) * 1 if requires_grad else lib.zeros(4)
            with pytest.raises(RuntimeError, match=r"output with shape \[4\] doesn't match the broadcast shape "
                                                   r"\[3, 4\]"):
                getattr(x, method)(lib.ones(3, 4))
