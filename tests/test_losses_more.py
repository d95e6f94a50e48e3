"""The losses added for issue 22 against PyTorch 2.13: values and gradients (every input, float64) for
each reduction, the layer forms, float64 gradcheck, and PyTorch's exception types."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import nn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
# poisson_nll_loss(full=True) takes log(0) for zero targets before masking them, as PyTorch
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::RuntimeWarning")]
RNG = np.random.default_rng(7)
REDUCTIONS = ["none", "mean", "sum"]


def _signs(*shape):
    return np.where(RNG.random(shape) < 0.5, -1.0, 1.0)


def _cases():
    n, c = 5, 4
    labels = RNG.integers(0, c, n)
    multilabel = np.full((n, c), -1, dtype=np.int64)
    for row in range(n):
        chosen = RNG.choice(c, RNG.integers(1, c), replace=False)
        multilabel[row, :len(chosen)] = chosen
    multilabel[0, :3] = [1, 1, -1]          # a repeated class counts twice, as PyTorch
    yield "poisson_nll_loss", (RNG.standard_normal((n, c)), RNG.poisson(2.0, (n, c)).astype(float)), {}
    yield "poisson_nll_loss", (RNG.uniform(0.1, 3, (n, c)), RNG.poisson(2.0, (n, c)).astype(float)), \
        {"log_input": False, "full": True}
    yield "gaussian_nll_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)),
                                RNG.uniform(0.1, 2, (n, c))), {}
    yield "gaussian_nll_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)),
                                RNG.uniform(0.1, 2, (n,))), {"full": True}
    yield "gaussian_nll_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)),
                                RNG.uniform(0.1, 2, (n, 1))), {"eps": 0.5}
    yield "margin_ranking_loss", (RNG.standard_normal(n), RNG.standard_normal(n), _signs(n)), {"margin": 0.3}
    yield "hinge_embedding_loss", (RNG.standard_normal((n, c)), _signs(n, c)), {"margin": 0.7}
    yield "soft_margin_loss", (RNG.standard_normal((n, c)), _signs(n, c)), {}
    yield "cosine_embedding_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)), _signs(n)), \
        {"margin": 0.2}
    yield "cosine_embedding_loss", (RNG.standard_normal(c), RNG.standard_normal(c), np.array(-1.0)), {}
    yield "triplet_margin_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)),
                                  RNG.standard_normal((n, c))), {"margin": 2.0}
    yield "triplet_margin_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)),
                                  RNG.standard_normal((n, c))), {"p": 1, "swap": True, "margin": 2.0}
    yield "triplet_margin_loss", (RNG.standard_normal(c), RNG.standard_normal(c), RNG.standard_normal(c)), \
        {"margin": 3.0}
    yield "triplet_margin_with_distance_loss", (RNG.standard_normal((n, c)), RNG.standard_normal((n, c)),
                                                RNG.standard_normal((n, c))), {"margin": 2.0, "swap": True}
    yield "multilabel_soft_margin_loss", (RNG.standard_normal((n, c)), (RNG.random((n, c)) < 0.5) * 1.0), {}
    yield "multilabel_soft_margin_loss", (RNG.standard_normal((n, c)), (RNG.random((n, c)) < 0.5) * 1.0,
                                          RNG.uniform(0.5, 2, c)), {}
    yield "multi_margin_loss", (RNG.standard_normal((n, c)), labels), {}
    yield "multi_margin_loss", (RNG.standard_normal((n, c)), labels, RNG.uniform(0.5, 2, c)), \
        {"p": 2, "margin": 0.5}
    yield "multi_margin_loss", (RNG.standard_normal(c), np.array(2)), {}
    yield "multilabel_margin_loss", (RNG.standard_normal((n, c)), multilabel), {}
    yield "multilabel_margin_loss", (RNG.standard_normal(c), multilabel[1]), {}


CASES = list(_cases())


def _arrays(arrays):
    return [a if a.dtype.kind == "f" else a.astype(np.int64) for a in arrays]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name,arrays,kwargs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_loss_matches_torch(name, arrays, kwargs, reduction):
    arrays = _arrays(arrays)
    if name == "multi_margin_loss" and len(arrays) == 3:     # the class weight goes by keyword
        weight = arrays.pop()
        ours = lambda *a: F.multi_margin_loss(*a, weight=corenn.tensor(weight), **kwargs,  # noqa: E731
                                              reduction=reduction)
        theirs = lambda *a: TF.multi_margin_loss(*a, weight=torch.tensor(weight), **kwargs,  # noqa: E731
                                                 reduction=reduction)
    else:
        ours = lambda *a: getattr(F, name)(*a, **kwargs, reduction=reduction)  # noqa: E731
        theirs = lambda *a: getattr(TF, name)(*a, **kwargs, reduction=reduction)  # noqa: E731
    _compare_loss(ours, theirs, arrays, name)


def _compare_loss(ours, theirs, arrays, name):
    import inspect
    try:
        compare_with_torch(ours, theirs, arrays, torch)
    except RuntimeError as error:
        if "not differentiable with respect to argument 'target'" not in str(error):
            raise
        # PyTorch gives no gradient for this loss's target: compare the others
        target = list(inspect.signature(getattr(TF, name)).parameters).index("target")
        compare_with_torch(ours, theirs, arrays, torch, frozen=(target,))


MODULES = [
    ("PoissonNLLLoss", {"full": True}, "poisson_nll_loss"),
    ("GaussianNLLLoss", {"full": True, "eps": 1e-3}, "gaussian_nll_loss"),
    ("MarginRankingLoss", {"margin": 0.5}, "margin_ranking_loss"),
    ("HingeEmbeddingLoss", {"margin": 2.0}, "hinge_embedding_loss"),
    ("SoftMarginLoss", {}, "soft_margin_loss"),
    ("CosineEmbeddingLoss", {"margin": 0.1}, "cosine_embedding_loss"),
    ("TripletMarginLoss", {"margin": 2.0, "p": 3.0, "swap": True}, "triplet_margin_loss"),
    ("TripletMarginWithDistanceLoss", {"margin": 2.0}, "triplet_margin_with_distance_loss"),
    ("MultiLabelSoftMarginLoss", {}, "multilabel_soft_margin_loss"),
    ("MultiMarginLoss", {"p": 2, "margin": 0.7}, "multi_margin_loss"),
    ("MultiLabelMarginLoss", {}, "multilabel_margin_loss"),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("layer,kwargs,function", MODULES, ids=[m[0] for m in MODULES])
def test_loss_layer_matches_torch(layer, kwargs, function, reduction):
    arrays = _arrays(next(c[1] for c in CASES if c[0] == function and len(c[1]) == (2 if function in (
        "multilabel_soft_margin_loss", "multi_margin_loss") else len(c[1]))))
    ours, theirs = getattr(nn, layer)(**kwargs, reduction=reduction), getattr(torch.nn, layer)(**kwargs,
                                                                                              reduction=reduction)
    assert repr(ours) == repr(theirs)
    _compare_loss(ours, theirs, arrays, function)


def test_weighted_loss_layers_hold_their_weight():
    weight = RNG.uniform(0.5, 2, 4)
    x, labels = RNG.standard_normal((3, 4)), np.array([0, 3, 1])
    ours = nn.MultiMarginLoss(weight=corenn.tensor(weight))
    theirs = torch.nn.MultiMarginLoss(weight=torch.tensor(weight))
    compare_with_torch(ours, theirs, [x, labels], torch)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    targets = (RNG.random((3, 4)) < 0.5) * 1.0
    compare_with_torch(nn.MultiLabelSoftMarginLoss(corenn.tensor(weight)),
                       torch.nn.MultiLabelSoftMarginLoss(torch.tensor(weight)), [x, targets], torch)


def test_gaussian_nll_var_as_float_and_gradient_through_clamped_var():
    x, y = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2))
    compare_with_torch(lambda a, b: F.gaussian_nll_loss(a, b, 0.5), lambda a, b: TF.gaussian_nll_loss(a, b, 0.5),
                       [x, y], torch)
    # variances below eps are clamped without a gradient mask, as PyTorch's in-place no_grad clamp
    var = np.array([[1e-9, 0.5], [2.0, 1e-8], [0.3, 0.3]])
    compare_with_torch(lambda a, b, v: F.gaussian_nll_loss(a, b, v, eps=1e-3),
                       lambda a, b, v: TF.gaussian_nll_loss(a, b, v, eps=1e-3), [x, y, var], torch, rtol=1e-9)


def test_triplet_with_a_custom_distance():
    a, p, n = (RNG.standard_normal((4, 3)) for _ in range(3))
    compare_with_torch(
        lambda a, p, n: F.triplet_margin_with_distance_loss(
            a, p, n, distance_function=lambda x, y: 1 - F.cosine_similarity(x, y), margin=0.5),
        lambda a, p, n: TF.triplet_margin_with_distance_loss(
            a, p, n, distance_function=lambda x, y: 1 - TF.cosine_similarity(x, y), margin=0.5),
        [a, p, n], torch)


def test_gradcheck_float64():
    def t(*shape):
        return corenn.tensor(RNG.standard_normal(shape), requires_grad=True)

    signs = corenn.tensor(_signs(4))
    assert gradcheck(lambda x, y: F.poisson_nll_loss(x, y.abs(), full=True), (t(4, 3), t(4, 3)))
    var = corenn.tensor(RNG.uniform(0.5, 2, (4, 3)), requires_grad=True)
    assert gradcheck(lambda x, y, v: F.gaussian_nll_loss(x, y, v, full=True), (t(4, 3), t(4, 3), var))
    assert gradcheck(lambda a, b: F.margin_ranking_loss(a, b, signs, margin=0.1), (t(4), t(4)))
    assert gradcheck(lambda a, b: F.cosine_embedding_loss(a, b, signs, margin=-1.0), (t(4, 3), t(4, 3)))
    assert gradcheck(lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=5.0, swap=True), (t(4, 3), t(4, 3),
                                                                                            t(4, 3)))
    signs2d = corenn.tensor(_signs(4, 3))     # drawn once: the function must be the same at every call
    assert gradcheck(lambda x: F.soft_margin_loss(x, signs2d), (t(4, 3),))
    assert gradcheck(lambda x: F.hinge_embedding_loss(x, signs2d, margin=9.0), (t(4, 3),))
    assert gradcheck(lambda x: F.multilabel_soft_margin_loss(x, corenn.ones(4, 3)), (t(4, 3),))
    assert gradcheck(lambda x: F.multi_margin_loss(x, corenn.tensor([0, 2, 1, 1]), p=2, margin=3.0), (t(4, 3),))
    labels = corenn.tensor([[0, -1, 0], [2, 1, -1], [1, -1, 2], [0, 0, -1]])
    assert gradcheck(lambda x: F.multilabel_margin_loss(x, labels), (t(4, 3),))


def test_errors_have_torch_types_and_name_the_function():
    x = corenn.randn(3, 4)
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        F.multi_margin_loss(x, corenn.tensor([0, 1, 2]), p=3)
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ValueError, match="weight must be one-dimensional"):
        F.multi_margin_loss(x, corenn.tensor([0, 1, 2]), weight=corenn.ones(2, 2))
    with pytest.raises(RuntimeError, match="multi_margin_loss: expected scalar type Long"):
        F.multi_margin_loss(x, corenn.zeros(3))
    with pytest.raises(ValueError, match="gaussian_nll_loss: var is of incorrect size"):
        F.gaussian_nll_loss(x, x, corenn.ones(2))
    with pytest.raises(ValueError, match="gaussian_nll_loss: var has negative"):
        F.gaussian_nll_loss(x, x, -corenn.ones(3, 4))
    with pytest.raises(ValueError, match="gaussian_nll_loss: var has negative"):
        F.gaussian_nll_loss(x, x, -1.0)
    with pytest.raises(RuntimeError, match="margin_ranking_loss : All input tensors should have same dimension"):
        F.margin_ranking_loss(x, x, corenn.ones(3))
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected"):
        F.cosine_embedding_loss(x, x, corenn.ones(3, 4))
    with pytest.raises(RuntimeError, match="1D target tensor expects 2D input"):
        F.cosine_embedding_loss(x[0], x[0], corenn.ones(4))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        F.triplet_margin_loss(x, x, x[0])
    with pytest.raises(ValueError, match="expected margin to be greater than 0"):
        F.triplet_margin_with_distance_loss(x, x, x, margin=0.0)
    with pytest.raises(ValueError, match="expected margin to be greater than 0"):
        nn.TripletMarginWithDistanceLoss(margin=-1.0)
    with pytest.raises(RuntimeError, match="multilabel_margin_loss: inconsistent target size"):
        F.multilabel_margin_loss(x, corenn.zeros(3, dtype=corenn.int64))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.soft_margin_loss(x, x, reduction="avg")
    with pytest.raises(TypeError, match=r"hinge_embedding_loss\(\): argument 'input' must be Tensor"):
        F.hinge_embedding_loss(None, x)
    # PyTorch's types for the same mistakes
    for call, theirs in [(lambda: F.multi_margin_loss(x, corenn.tensor([0, 1, 2]), p=3),
                          lambda: TF.multi_margin_loss(torch.randn(3, 4), torch.tensor([0, 1, 2]), p=3)),
                         (lambda: F.gaussian_nll_loss(x, x, corenn.ones(2)),
                          lambda: TF.gaussian_nll_loss(torch.ones(3, 4), torch.ones(3, 4), torch.ones(2))),
                         (lambda: F.cosine_embedding_loss(x, x, corenn.ones(3, 4)),
                          lambda: TF.cosine_embedding_loss(torch.ones(3, 4), torch.ones(3, 4), torch.ones(3, 4)))]:
        with pytest.raises(Exception) as ours_error:
            call()
        with pytest.raises(Exception) as theirs_error:
            theirs()
        assert isinstance(ours_error.value, type(theirs_error.value)), (ours_error.value, theirs_error.value)
