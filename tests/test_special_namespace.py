"""corenn.special (torch.special's names) against PyTorch 2.13: values and float64 gradients."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _breadth_oracle import compare_with_torch

RNG = np.random.default_rng(3)

UNARY = {  # name -> inputs drawn where the function is defined and smooth
    "expit": RNG.standard_normal(20) * 4,
    "gammaln": RNG.uniform(0.1, 8, 20),
    "psi": RNG.uniform(0.1, 8, 20),
    "digamma": RNG.uniform(0.1, 8, 20),
    "erf": RNG.standard_normal(20),
    "erfc": RNG.standard_normal(20),
    "erfinv": RNG.uniform(-0.95, 0.95, 20),
    "exp2": RNG.standard_normal(20),
    "expm1": RNG.standard_normal(20),
    "log1p": RNG.uniform(-0.9, 3, 20),
    "i0": RNG.standard_normal(20) * 3,
    "sinc": RNG.standard_normal(20) * 2,
    "ndtr": np.concatenate([RNG.standard_normal(17) * 3, [-30.0, 0.0, 30.0]]),
    "ndtri": RNG.uniform(0.01, 0.99, 20),
    "entr": RNG.uniform(0.05, 3, 20),
    "logit": RNG.uniform(0.05, 0.95, 20),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special_functions_match_torch(torch, name):
    compare_with_torch(getattr(corenn.special, name), getattr(torch.special, name), [UNARY[name]], torch,
                       rtol=1e-9, atol=1e-12)


def test_functions_of_two_arguments_and_edges_match_torch(torch):
    a, x = RNG.uniform(0.5, 4, 10), RNG.uniform(0.1, 6, 10)
    compare_with_torch(corenn.special.gammainc, torch.special.gammainc, [a, x], torch, rtol=1e-8, frozen=(0,))
    compare_with_torch(corenn.special.gammaincc, torch.special.gammaincc, [a, x], torch, rtol=1e-8, frozen=(0,))
    x, y = RNG.standard_normal(10), RNG.uniform(-0.5, 3, 10)
    compare_with_torch(corenn.special.xlog1py, torch.special.xlog1py, [x, y], torch)
    compare_with_torch(corenn.special.xlogy, torch.special.xlogy, [x, np.abs(y) + 0.1], torch)
    compare_with_torch(lambda t: corenn.special.multigammaln(t, 3), lambda t: torch.special.multigammaln(t, 3),
                       [RNG.uniform(1.5, 5, 6)], torch)
    compare_with_torch(lambda t: corenn.special.polygamma(2, t), lambda t: torch.special.polygamma(2, t),
                       [RNG.uniform(0.5, 5, 6)], torch, rtol=1e-8)
    m = RNG.standard_normal((3, 4))
    for name in ("softmax", "log_softmax", "logsumexp"):
        compare_with_torch(lambda t: getattr(corenn.special, name)(t, 1), lambda t: getattr(torch.special, name)(t, 1),
                           [m], torch)
    edges = np.array([-1.0, 0.0, 0.5, 1.0, np.inf])
    np.testing.assert_array_equal(corenn.special.entr(corenn.tensor(edges)).numpy(),
                                  torch.special.entr(torch.tensor(edges)).numpy())
    ends = np.array([0.0, 1.0, 1.5])
    np.testing.assert_array_equal(corenn.special.ndtri(corenn.tensor(ends)).numpy(),
                                  torch.special.ndtri(torch.tensor(ends)).numpy())
    zero_times_nan = corenn.special.xlog1py(corenn.tensor([0.0, 0.0]), corenn.tensor([1.0, np.nan]))
    assert zero_times_nan[0].item() == 0.0 and np.isnan(zero_times_nan[1].item())
