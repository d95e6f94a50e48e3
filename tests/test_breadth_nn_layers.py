"""MaxUnpool1d/2d/3d, the *_with_indices pooling functions, LPPool3d (and the inf norms of lp_pool) against
PyTorch 2.13 (float64 values and gradients), gradcheck, errors."""
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
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(22)

UNPOOLS = [(1, (2, 3, 8), dict(kernel_size=2)), (1, (3, 7), dict(kernel_size=3, stride=2, padding=1)),
           (2, (2, 2, 6, 4), dict(kernel_size=2)), (2, (1, 3, 7, 5), dict(kernel_size=3, stride=2, padding=1)),
           (2, (2, 5, 4), dict(kernel_size=(2, 1), stride=(2, 1))), (3, (1, 2, 4, 4, 6), dict(kernel_size=2)),
           (3, (2, 5, 4, 4), dict(kernel_size=(3, 2, 2), stride=(2, 2, 1), padding=(1, 0, 1)))]


@pytest.mark.parametrize("n,shape,options", UNPOOLS)
def test_max_unpool_matches_torch(n, shape, options):
    x = torch.tensor(RNG.standard_normal(shape))
    pooled, indices = getattr(TF, f"max_pool{n}d")(x, return_indices=True, **options)
    ours_layer, theirs_layer = getattr(nn, f"MaxUnpool{n}d")(**options), getattr(torch.nn, f"MaxUnpool{n}d")(**options)
    assert repr(ours_layer) == repr(theirs_layer)
    ours_indices = corenn.tensor(indices.numpy())
    compare_with_torch(lambda p: ours_layer(p, ours_indices), lambda p: theirs_layer(p, indices),
                       [pooled.numpy()], torch)
    planes = indices.reshape(-1, indices.shape[-n - 1:].numel()) if indices.ndim == n + 2 else indices.reshape(1, -1)
    if all(len(set(row.tolist())) == len(row) for row in planes):
        # repeated indices (overlapping windows) keep one value: PyTorch's backward (a gather) is then not
        # the derivative, and finite differences see that
        assert gradcheck(lambda p: getattr(F, f"max_unpool{n}d")(p, ours_indices, **options),
                         (corenn.tensor(pooled.numpy(), requires_grad=True),))


def test_max_unpool_output_size_and_duplicates():
    x = torch.tensor(RNG.standard_normal((1, 1, 5, 5)))
    pooled, indices = TF.max_pool2d(x, 2, return_indices=True)
    theirs = TF.max_unpool2d(pooled, indices, 2, output_size=(5, 5))
    ours = F.max_unpool2d(corenn.tensor(pooled.numpy()), corenn.tensor(indices.numpy()), 2, output_size=[1, 1, 5, 5])
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # overlapping windows give repeated indices; the gradient reaches every input that read the position
    pooled, indices = TF.max_pool1d(torch.tensor([[[0., 5., 1., 0.]]]), 2, stride=1, return_indices=True)
    compare_with_torch(lambda p: F.max_unpool1d(p, corenn.tensor(indices.numpy()), 2, stride=1),
                       lambda p: TF.max_unpool1d(p, indices, 2, stride=1), [pooled.numpy()], torch)


def test_max_unpool_errors():
    values = corenn.randn(1, 1, 2, 2)
    with pytest.raises(RuntimeError, match="Found an invalid max index: 99 \\(output volumes are of size 4x4\\)"):
        F.max_unpool2d(values, corenn.full((1, 1, 2, 2), 99), 2)
    with pytest.raises(RuntimeError, match="Found an invalid max index: -1 \\(output volumes are of size 4x1\\)"):
        F.max_unpool1d(corenn.randn(1, 1, 2), corenn.full((1, 1, 2), -1), 2)
    with pytest.raises(RuntimeError, match="elements in indices should be type int64 but got: Int"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 2, dtype=corenn.int32), 2)
    with pytest.raises(RuntimeError, match="Expected shape of indices to be same as that of the input tensor"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 3, dtype=corenn.int64), 2)
    with pytest.raises(RuntimeError, match="Input to max_unpooling2d should be a 3d or 4d Tensor"):
        F.max_unpool2d(corenn.randn(2, 2), corenn.zeros(2, 2, dtype=corenn.int64), 2)
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 2, dtype=corenn.int64), 2, output_size=(9, 9))
    with pytest.raises(ValueError, match="output_size should be a sequence containing 2 or 4 elements"):
        F.max_unpool2d(values, corenn.zeros(1, 1, 2, 2, dtype=corenn.int64), 2, output_size=(4, 4, 4))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_with_indices_functions_match_torch(n):
    shape = (2, 3) + (7, 6, 5)[:n]
    x = RNG.standard_normal(shape)
    for name, args in ((f"max_pool{n}d_with_indices", (3, 2, 1)), (f"adaptive_max_pool{n}d_with_indices", (3,))):
        ours = getattr(F, name)(corenn.tensor(x), *args)
        theirs = getattr(TF, name)(torch.tensor(x), *args)
        assert isinstance(ours, tuple) and len(ours) == 2
        np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        assert ours[1].dtype == corenn.int64
        compare_with_torch(lambda t: getattr(F, name)(t, *args)[0], lambda t: getattr(TF, name)(t, *args)[0],
                           [x], torch)
    top = corenn.max_pool1d_with_indices(corenn.tensor(x.reshape(-1, x.shape[-1])), 2)
    np.testing.assert_array_equal(top[1].numpy(),
                                  torch.max_pool1d_with_indices(torch.tensor(x.reshape(-1, x.shape[-1])), 2)[1])


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, float("inf"), -float("inf")])
@pytest.mark.parametrize("options", [dict(kernel_size=2), dict(kernel_size=(2, 3, 1), stride=(1, 2, 2)),
                                     dict(kernel_size=2, stride=2, ceil_mode=True)])
def test_lp_pool3d_matches_torch(norm_type, options):
    x = RNG.uniform(0.2, 2.0, (2, 2, 5, 5, 4))
    ours, theirs = nn.LPPool3d(norm_type, **options), torch.nn.LPPool3d(norm_type, **options)
    assert repr(ours) == repr(theirs)
    compare_with_torch(ours, theirs, [x], torch, rtol=1e-9)
    if np.isfinite(norm_type):
        assert gradcheck(lambda t: F.lp_pool3d(t, norm_type, **options), (corenn.tensor(x, requires_grad=True),))


@pytest.mark.parametrize("n", [1, 2])
def test_lp_pool_inf_norms_match_torch(n):
    x = RNG.standard_normal((2, 3) + (6, 5)[:n])
    for norm_type in (float("inf"), -float("inf")):
        compare_with_torch(lambda t: getattr(F, f"lp_pool{n}d")(t, norm_type, 2),
                           lambda t: getattr(TF, f"lp_pool{n}d")(t, norm_type, 2), [x], torch)


MHA = [dict(), dict(need_weights=False), dict(average_attn_weights=False), dict(bias_kv=True, add_zero_attn=True),
       dict(separate=True), dict(bool_mask=True, padding=True), dict(float_mask=True), dict(mask3d=True),
       dict(static=True), dict(unbatched=True), dict(causal=True)]


@pytest.mark.parametrize("options", MHA, ids=[",".join(o) or "plain" for o in MHA])
def test_multi_head_attention_forward_matches_torch(options):
    L, S, N, E, H = 3, 4, 2, 6, 2
    kdim = 5 if options.get("separate") else E
    arrays = {"query": RNG.standard_normal((L, N, E)), "key": RNG.standard_normal((S, N, kdim)),
              "value": RNG.standard_normal((S, N, kdim)), "out_proj_weight": RNG.standard_normal((E, E)),
              "out_proj_bias": RNG.standard_normal(E), "in_proj_bias": RNG.standard_normal(3 * E)}
    if options.get("separate"):
        arrays.update(q_proj_weight=RNG.standard_normal((E, E)), k_proj_weight=RNG.standard_normal((E, kdim)),
                      v_proj_weight=RNG.standard_normal((E, kdim)))
    else:
        arrays["in_proj_weight"] = RNG.standard_normal((3 * E, E))
    if options.get("bias_kv"):
        arrays.update(bias_k=RNG.standard_normal((1, 1, E)), bias_v=RNG.standard_normal((1, 1, E)))
    if options.get("static"):
        arrays.update(static_k=RNG.standard_normal((N * H, S + 1, E // H)),
                      static_v=RNG.standard_normal((N * H, S + 1, E // H)))
    if options.get("unbatched"):
        for name in ("query", "key", "value"):
            arrays[name] = arrays[name][:, 0]
    names = list(arrays)
    source = S + 1 if options.get("static") else S
    masks = {}
    if options.get("bool_mask"):
        masks["attn_mask"] = RNG.random((L, source)) < 0.3
    if options.get("float_mask"):
        masks["attn_mask"] = RNG.standard_normal((L, source))
    if options.get("mask3d"):
        masks["attn_mask"] = RNG.standard_normal((N * H, L, source))
    if options.get("causal"):
        masks["attn_mask"] = np.triu(np.ones((L, source), dtype=bool), 1)
    if options.get("padding"):
        masks["key_padding_mask"] = np.array([[False, True, False, False], [False, False, False, True]])

    def call(lib, functional, *tensors):
        kwargs = dict(zip(names, tensors))
        query, key, value = kwargs.pop("query"), kwargs.pop("key"), kwargs.pop("value")
        in_proj_weight, in_proj_bias = kwargs.pop("in_proj_weight", None), kwargs.pop("in_proj_bias")
        bias_k, bias_v = kwargs.pop("bias_k", None), kwargs.pop("bias_v", None)
        out_w, out_b = kwargs.pop("out_proj_weight"), kwargs.pop("out_proj_bias")
        kwargs.update({name: lib.tensor(mask) for name, mask in masks.items()})
        out, weights = functional.multi_head_attention_forward(
            query, key, value, E, H, in_proj_weight, in_proj_bias, bias_k, bias_v, options.get("add_zero_attn", False),
            0.0, out_w, out_b, need_weights=options.get("need_weights", True),
            average_attn_weights=options.get("average_attn_weights", True),
            use_separate_proj_weight=options.get("separate", False), is_causal=options.get("causal", False), **kwargs)
        return out if weights is None else lib.cat([out.reshape(-1), weights.reshape(-1)])

    compare_with_torch(lambda *t: call(corenn, F, *t), lambda *t: call(torch, TF, *t), list(arrays.values()), torch,
                       rtol=1e-9, atol=1e-11)


def test_multi_head_attention_forward_errors():
    x = corenn.randn(3, 2, 4)
    args = (4, 2, corenn.randn(12, 4), None, None, None, False, 0.0, corenn.randn(4, 4), None)
    with pytest.raises(AssertionError, match="was expecting embedding dimension of 4, but got 5"):
        F.multi_head_attention_forward(corenn.randn(3, 2, 5), x, x, *args)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        F.multi_head_attention_forward(x, x, x, *args, is_causal=True)
    with pytest.raises(RuntimeError, match="The shape of the 2D attn_mask is"):
        F.multi_head_attention_forward(x, x, x, *args, attn_mask=corenn.zeros(2, 2))
    with pytest.raises(AssertionError, match="use_separate_proj_weight is False but in_proj_weight is None"):
        F.multi_head_attention_forward(x, x, x, 4, 2, None, None, None, None, False, 0.0, corenn.randn(4, 4), None)


FRACTIONAL = [(2, (2, 3, 9, 8), dict(kernel_size=2, output_size=5)),
              (2, (3, 9, 8), dict(kernel_size=(3, 2), output_size=(4, 6))),
              (2, (2, 2, 10, 7), dict(kernel_size=2, output_ratio=0.5)),
              (3, (2, 2, 7, 8, 6), dict(kernel_size=2, output_size=(4, 5, 3))),
              (3, (2, 6, 6, 7), dict(kernel_size=(3, 2, 2), output_ratio=(0.5, 0.6, 0.7)))]


@pytest.mark.parametrize("n,shape,options", FRACTIONAL)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fractional_max_pool_matches_torch_with_the_same_samples(n, shape, options, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    samples = RNG.random((shape[0] if len(shape) == n + 2 else 1, shape[-n - 1], n)).astype(dtype)
    ours = getattr(nn, f"FractionalMaxPool{n}d")(return_indices=True, _random_samples=corenn.tensor(samples),
                                                 **options)
    theirs = getattr(torch.nn, f"FractionalMaxPool{n}d")(return_indices=True, _random_samples=torch.tensor(samples),
                                                         **options)
    assert repr(ours) == repr(theirs)
    assert list(dict(ours.named_buffers())) == list(dict(theirs.named_buffers()))
    (out, indices), (expected, expected_indices) = ours(corenn.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_array_equal(indices.numpy(), expected_indices.numpy())
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    if dtype == np.float64:
        compare_with_torch(lambda t: ours(t)[0], lambda t: theirs(t)[0], [x], torch)
        function = getattr(F, f"fractional_max_pool{n}d_with_indices")
        assert gradcheck(lambda t: function(t, _random_samples=corenn.tensor(samples), **options)[0],
                         (corenn.tensor(x, requires_grad=True),))


def test_fractional_max_pool_draws_samples_and_checks_arguments():
    out = F.fractional_max_pool2d(corenn.randn(2, 3, 9, 9), 2, output_size=4)
    assert out.shape == (2, 3, 4, 4)
    with pytest.raises(ValueError, match="fractional_max_pool2d requires specifying either an output_size"):
        F.fractional_max_pool2d(corenn.randn(1, 1, 4, 4), 2)
    with pytest.raises(RuntimeError, match="fractional_max_pool2d\\(\\): pool height 3 too large relative to input"):
        F.fractional_max_pool2d(corenn.randn(1, 1, 4, 4), 3, output_size=3, _random_samples=corenn.rand(1, 1, 2))
    with pytest.raises(RuntimeError, match="fractional_max_pool3d_out\\(\\): pool time 3 too large"):
        F.fractional_max_pool3d(corenn.randn(1, 1, 4, 4, 4), 3, output_size=3)
    with pytest.raises(RuntimeError, match="fractional_max_pool3d_out\\(\\): pool time 2 too large"):
        F.fractional_max_pool3d(corenn.randn(1, 1, 4, 4, 4), 2, output_size=3)  # PyTorch's 3-d check is strict
    assert F.fractional_max_pool2d(corenn.randn(1, 1, 4, 4), 2, output_size=3).shape == (1, 1, 3, 3)
    with pytest.raises(RuntimeError, match="Expect _random_samples.size\\(1\\) equals to input channel size"):
        F.fractional_max_pool2d(corenn.randn(1, 1, 4, 4), 2, output_size=3, _random_samples=corenn.rand(1, 2, 2))
    with pytest.raises(ValueError, match="output_ratio must be between 0 and 1 \\(got 1.5\\)"):
        nn.FractionalMaxPool2d(3, output_ratio=1.5)
    with pytest.raises(ValueError, match="only one of output_size and output_ratio may be specified"):
        nn.FractionalMaxPool3d(2, output_size=2, output_ratio=0.5)
    with pytest.raises(ValueError, match="kernel_size must be greater than 0, but got 0"):
        nn.FractionalMaxPool3d(0, output_ratio=0.5)


@pytest.mark.parametrize("size,channels", [(1, 3), (3, 2), (3, 7), (5, 9), (4, 6), (2, 1)])
def test_cross_map_lrn2d_matches_torch(size, channels):
    ours, theirs = nn.CrossMapLRN2d(size, alpha=0.3, beta=0.6, k=1.5), torch.nn.CrossMapLRN2d(size, 0.3, 0.6, 1.5)
    assert repr(ours) == repr(theirs)
    x = RNG.standard_normal((2, channels, 3, 2))
    if size == 1:  # PyTorch's backward fails for a one-channel window; so does this one, with its message
        np.testing.assert_allclose(ours(corenn.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-12)
        with pytest.raises(RuntimeError, match="start \\(1\\) \\+ length \\(3\\) exceeds dimension size \\(3\\)"):
            ours(corenn.tensor(x, requires_grad=True)).sum().backward()
        return
    # the backward is PyTorch's formula, compared with PyTorch's values (see the kernel's docstring)
    compare_with_torch(ours, theirs, [x], torch)
    if channels == 1:  # where that formula is the forward's derivative
        assert gradcheck(ours, (corenn.tensor(RNG.standard_normal((2, 1, 3, 2)), requires_grad=True),))
    with pytest.raises(ValueError, match="CrossMapLRN2d: Expected input to be 4D, got 3D instead."):
        ours(corenn.randn(2, 3, 4))


@pytest.mark.parametrize("options", [dict(cutoffs=[3, 6], div_value=2.0), dict(cutoffs=[5], head_bias=True),
                                     dict(cutoffs=[2, 4, 7], div_value=1.5)])
def test_adaptive_log_softmax_with_loss_matches_torch(options):
    ours = nn.AdaptiveLogSoftmaxWithLoss(8, 10, **options).double()
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, **options).double()
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((6, 8))
    target = np.array([0, 9, 3, 5, 2, 7])
    for part in (0, 1):  # output, loss
        compare_with_torch(lambda t: ours(t, corenn.tensor(target))[part],
                           lambda t: theirs(t, torch.tensor(target))[part], [x], torch)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    compare_with_torch(ours.log_prob, theirs.log_prob, [x], torch)
    np.testing.assert_array_equal(ours.predict(corenn.tensor(x)).numpy(), theirs.predict(torch.tensor(x)).numpy())
    single = ours(corenn.tensor(x[0]), corenn.tensor(target[5]))
    expected = theirs(torch.tensor(x[0]), torch.tensor(target[5]))
    assert single.output.shape == () and np.isclose(single.output.item(), expected.output.item())
    assert gradcheck(lambda t: ours(t, corenn.tensor(target)).loss, (corenn.tensor(x, requires_grad=True),))


def test_adaptive_log_softmax_errors():
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique, positive integers"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [5, 3])
    with pytest.raises(ValueError, match="cutoffs should be a sequence of length larger than 0"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [])
    asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4])
    with pytest.raises(RuntimeError, match="Target values should be in \\[0, 9\\], but values in range \\[0, 12\\]"):
        asm(corenn.randn(2, 8), corenn.tensor([0, 12]))
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected, multi-target not supported"):
        asm(corenn.randn(2, 8), corenn.tensor([[0, 1]]))


LINEAR_CE = [((4, 3), (5, 3), "index", {}), ((3,), (5, 3), "index", dict(reduction="sum")),
             ((4, 3), (5, 2, 3), "index", dict(label_smoothing=0.1, ignore_index=1)),
             ((4, 3), (5, 3), "probabilities", dict(reduction="none")),
             ((4, 3), (5, 3), "index", dict(weight=True, bias=True))]


@pytest.mark.parametrize("input_shape,weight_shape,target_kind,options", LINEAR_CE)
def test_linear_cross_entropy_matches_torch(input_shape, weight_shape, target_kind, options):
    options = dict(options)
    arrays = [RNG.standard_normal(input_shape), RNG.standard_normal(weight_shape)]
    logits_shape = input_shape[:-1] + weight_shape[:-1]
    if target_kind == "index":
        target = RNG.integers(0, weight_shape[0], input_shape[:-1] + weight_shape[1:-1])
    else:
        target = RNG.dirichlet(np.ones(weight_shape[0]), input_shape[:-1])
    names = ["input", "linear_weight"]
    if options.pop("bias", False):
        arrays.append(RNG.standard_normal(weight_shape[:-1]))
        names.append("linear_bias")
    if options.pop("weight", False):
        arrays.append(RNG.uniform(0.5, 1.5, weight_shape[0]))
        names.append("weight")
    assert len(logits_shape) >= 1

    def call(functional, lib, *tensors):
        kwargs = dict(zip(names, tensors))
        return functional.linear_cross_entropy(kwargs.pop("input"), kwargs.pop("linear_weight"), lib.tensor(target),
                                               **kwargs, **options)

    frozen = (names.index("weight"),) if "weight" in names else ()
    compare_with_torch(lambda *t: call(F, corenn, *t), lambda *t: call(TF, torch, *t), arrays, torch, frozen=frozen)


def test_linear_cross_entropy_loss_module_matches_torch():
    ours = nn.LinearCrossEntropyLoss(4, 5, out_features=(2,), bias=True, label_smoothing=0.2).double()
    theirs = torch.nn.LinearCrossEntropyLoss(4, 5, out_features=(2,), bias=True, label_smoothing=0.2).double()
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    target = RNG.integers(0, 5, (3, 2))
    compare_with_torch(lambda x: ours(x, corenn.tensor(target)), lambda x: theirs(x, torch.tensor(target)),
                       [RNG.standard_normal((3, 4))], torch)
    np.testing.assert_allclose(ours.linear.weight.grad.numpy(), theirs.linear.weight.grad.numpy(), rtol=1e-10)
    with pytest.raises(NotImplementedError, match="linear_cross_entropy: options"):
        F.linear_cross_entropy(corenn.randn(2, 3), corenn.randn(4, 3), corenn.tensor([0, 1]), options=object())
    with pytest.raises(RuntimeError, match="expected weight shape to be \\(5,\\), got \\(3,\\)"):
        nn.LinearCrossEntropyLoss(4, 5, weight=corenn.ones(3))
    with pytest.raises(RuntimeError, match="K-dimensional loss defined by linear_weight shape \\(5, 3, 4\\)"):
        F.linear_cross_entropy(corenn.randn(4), corenn.randn(5, 3, 4), corenn.tensor([1, 2, 0]))
    with pytest.raises(RuntimeError, match="ignore_index cannot be specified when target contains probabilities"):
        F.linear_cross_entropy(corenn.randn(2, 4), corenn.randn(5, 4), corenn.rand(2, 5), ignore_index=1)


def test_nll_loss_2d_is_nll_loss():
    with pytest.warns(FutureWarning, match="`NLLLoss2d` has been deprecated"):
        ours = nn.NLLLoss2d(ignore_index=1)
    with pytest.warns(FutureWarning):
        theirs = torch.nn.NLLLoss2d(ignore_index=1)
    assert repr(ours) == repr(theirs) and isinstance(ours, nn.NLLLoss)
    target = RNG.integers(0, 3, (2, 4, 2))
    compare_with_torch(lambda x: ours(x, corenn.tensor(target)), lambda x: theirs(x, torch.tensor(target)),
                       [RNG.standard_normal((2, 3, 4, 2))], torch)


@pytest.mark.parametrize("layer,bn,transpose,shape", [
    (lambda lib: lib.nn.Conv2d(3, 4, 3, bias=False), lambda lib: lib.nn.BatchNorm2d(4), False, (2, 3, 5, 5)),
    (lambda lib: lib.nn.Conv1d(3, 4, 2), lambda lib: lib.nn.BatchNorm1d(4, affine=False), False, (2, 3, 6)),
    (lambda lib: lib.nn.ConvTranspose2d(3, 4, 2), lambda lib: lib.nn.BatchNorm2d(4), True, (1, 3, 3, 3)),
    (lambda lib: lib.nn.Linear(3, 4), lambda lib: lib.nn.BatchNorm1d(4), None, (5, 3))])
def test_fuse_bn_eval_matches_torch(layer, bn, transpose, shape):
    ours_layer, theirs_layer = layer(corenn).double().eval(), layer(torch).double().eval()
    ours_bn, theirs_bn = bn(corenn).double().eval(), bn(torch).double().eval()
    with torch.no_grad():
        for module in (theirs_bn,):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)
            if module.weight is not None:
                module.weight.uniform_(0.5, 2)
                module.bias.uniform_(-1, 1)
    ours_layer.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in theirs_layer.state_dict().items()})
    ours_bn.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in theirs_bn.state_dict().items()})
    if transpose is None:
        ours = nn.utils.fuse_linear_bn_eval(ours_layer, ours_bn)
        theirs = torch.nn.utils.fuse_linear_bn_eval(theirs_layer, theirs_bn)
    else:
        ours = nn.utils.fuse_conv_bn_eval(ours_layer, ours_bn, transpose)
        theirs = torch.nn.utils.fuse_conv_bn_eval(theirs_layer, theirs_bn, transpose)
    assert ours is not ours_layer and type(ours) is type(ours_layer)
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-12, atol=1e-14)
    x = RNG.standard_normal(shape)
    np.testing.assert_allclose(ours(corenn.tensor(x)).detach().numpy(), ours_bn(ours_layer(corenn.tensor(x))).detach()
                               .numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        (nn.utils.fuse_linear_bn_eval if transpose is None else nn.utils.fuse_conv_bn_eval)(ours_layer.train(),
                                                                                           ours_bn)


def test_sync_batch_norm_without_a_process_group_is_batch_norm_as_in_torch():
    ours = nn.SyncBatchNorm(3, momentum=0.2).double()
    theirs = torch.nn.SyncBatchNorm(3, momentum=0.2).double()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    for shape in ((4, 3), (2, 3, 5), (2, 3, 2, 2)):
        compare_with_torch(ours, theirs, [RNG.standard_normal(shape)], torch)
        for key, value in theirs.state_dict().items():
            np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(), rtol=1e-12)
    ours.eval(), theirs.eval()
    compare_with_torch(ours, theirs, [RNG.standard_normal((2, 3, 4))], torch)
    with pytest.raises(ValueError, match="expected at least 2D input \\(got 1D input\\)"):
        ours(corenn.randn(3))
    with pytest.raises(ValueError, match="SyncBatchNorm number of input channels should be non-zero"):
        ours(corenn.randn(2, 0))


def test_convert_sync_batchnorm_matches_torch():
    def net(lib):
        return lib.nn.Sequential(lib.nn.Conv2d(3, 4, 1), lib.nn.BatchNorm2d(4), lib.nn.InstanceNorm2d(4),
                                 lib.nn.Sequential(lib.nn.BatchNorm1d(4, affine=False)))
    ours = nn.SyncBatchNorm.convert_sync_batchnorm(net(corenn))
    theirs = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net(torch))
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_data_parallel_without_accelerators_wraps_the_module_as_torch():
    ours, theirs = nn.DataParallel(nn.Linear(2, 3)), torch.nn.DataParallel(torch.nn.Linear(2, 3))
    assert repr(ours) == repr(theirs) and ours.device_ids == theirs.device_ids == []
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["module.weight", "module.bias"]
    ours.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(ours(corenn.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-6)

