"""The ``torch.<name>`` spellings of the layer functions (``torch.layer_norm``, ``torch.dropout``, ...).

PyTorch exposes its ATen layer ops at the top level with ATen's signatures, which differ from
``torch.nn.functional``'s: the losses take ``reduction`` as an int (0 none, 1 mean, 2 sum), the
dropouts take ``train`` instead of ``training``, ``torch.batch_norm`` orders its tensors
``weight, bias, running_mean, running_var``, ``torch.embedding`` takes ``weight`` first and
``padding_idx=-1`` for none. Each function here maps that signature onto the ``nn.functional``
implementation, so the computation (and its backward) is the one ``corenn.nn.functional`` has.

    >>> corenn.layer_norm(corenn.tensor([[1., 3.]]), [2], eps=0.0).tolist()
    [[-1.0, 1.0]]
"""
from __future__ import annotations

import importlib

from corenn._argcheck import check_int, check_number
from corenn.ops._kernel import check_tensor


def _functional():
    # nn.functional imports every layer's kernels (and corenn.ops): looked up at call time, not at import.
    return importlib.import_module("corenn.nn.functional")


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(reduction, op):
    """ATen's int reduction (``torch.nn._reduction.get_enum``) as nn.functional's string.

    The defaults are 0 (none): ATen's schemas say ``reduction=Mean``, but PyTorch's Python binding reads
    that default as 0, so ``torch.kl_div(a, b)`` is elementwise; a port must get what PyTorch gives.
    """
    reduction = check_int(reduction, "reduction")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}(): reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")
    return _REDUCTIONS[reduction]


def _no_cudnn(value, name, op):
    """The cuDNN switches choose a GPU library; any value computes the same thing on the numpy backends."""
    if not isinstance(value, bool):
        raise TypeError(f"{op}(): argument '{name}' must be bool, not {type(value).__name__}")


# ---------------------------------------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------------------------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    """``torch.layer_norm``: :func:`corenn.nn.functional.layer_norm` (``cudnn_enable`` changes nothing here).

        >>> corenn.layer_norm(corenn.ones(2, 3), [3]).tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    _no_cudnn(cudnn_enable, "cudnn_enable", "layer_norm")
    return _functional().layer_norm(input, normalized_shape, weight, bias, eps)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    """``torch.batch_norm``: ATen's argument order (``weight, bias, running_mean, running_var``).

        >>> corenn.batch_norm(corenn.ones(4, 2), None, None, None, None, True, 0.1, 1e-5, False).tolist()[0]
        [0.0, 0.0]
    """
    _no_cudnn(cudnn_enabled, "cudnn_enabled", "batch_norm")
    return _functional().batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    """``torch.group_norm``: :func:`corenn.nn.functional.group_norm`.

        >>> corenn.group_norm(corenn.ones(1, 4, 2), 2).abs().sum().item()
        0.0
    """
    _no_cudnn(cudnn_enabled, "cudnn_enabled", "group_norm")
    return _functional().group_norm(input, num_groups, weight, bias, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled):
    """``torch.instance_norm``: ATen's argument order (``weight, bias, running_mean, running_var``).

        >>> corenn.instance_norm(corenn.ones(1, 2, 3), None, None, None, None, True, 0.1, 1e-5, False).shape
        corenn.Size([1, 2, 3])
    """
    _no_cudnn(cudnn_enabled, "cudnn_enabled", "instance_norm")
    return _functional().instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum,
                                       eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``torch.rms_norm``: :func:`corenn.nn.functional.rms_norm`.

        >>> corenn.rms_norm(corenn.tensor([[3., 4.]]), [2], eps=0.0).shape
        corenn.Size([1, 2])
    """
    return _functional().rms_norm(input, normalized_shape, weight, eps)


# ---------------------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------------------

def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """``torch.embedding``: ``weight`` first; a negative ``padding_idx`` means none (ATen's convention).

        >>> corenn.embedding(corenn.eye(3), corenn.tensor([2, 0])).tolist()
        [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    padding_idx = check_int(padding_idx, "padding_idx")
    check_tensor(weight, "weight", "embedding")
    # ATen takes any padding_idx: one that no row has (negative, or past the end) pads nothing
    inside = 0 <= padding_idx < (weight.shape[0] if weight.ndim else 0)
    return _functional().embedding(indices, weight, padding_idx if inside else None,
                                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def embedding_renorm_(input, indices, max_norm, norm_type):
    """Rescale, in place, the rows of ``input`` named by ``indices`` whose ``norm_type``-norm exceeds
    ``max_norm`` to norm ``max_norm`` (what ``F.embedding(max_norm=...)`` does first); no gradient is recorded.

        >>> w = corenn.tensor([[3., 4.], [0.3, 0.4]])
        >>> corenn.embedding_renorm_(w, corenn.tensor([0, 1]), 1.0, 2.0).norm(dim=1).tolist()[1]
        0.5
    """
    check_tensor(input, "input", "embedding_renorm_")
    check_tensor(indices, "indices", "embedding_renorm_")
    if input.ndim != 2:
        raise RuntimeError(f"embedding_renorm_(): 'self' must be 2-D, got a tensor of size {list(input.shape)}")
    if indices.dtype.is_floating_point or indices.dtype.name == "bool":
        raise RuntimeError(f"embedding_renorm_(): Expected tensor for argument 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {indices.dtype} instead")
    _functional()._renorm_rows(input, indices, check_number(max_norm, "max_norm"),
                               check_number(norm_type, "norm_type"))
    return input


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """``torch.embedding_bag``: ``(output, offset2bag, bag_size, max_indices)`` for 1-D ``indices`` split by
    ``offsets``; ``mode`` 0 sum, 1 mean, 2 max. ``output`` is :func:`corenn.nn.functional.embedding_bag`'s.

    The other three are what PyTorch's CPU kernel returns for its backward: ``offset2bag`` (each index's
    bag; empty in sum mode without ``padding_idx`` below float64, PyTorch's fast path), ``bag_size``
    (indices per bag, padding left out; zeros of ``offsets``' length in sum mode) and ``max_indices`` (per
    bag and feature, the row that won in max mode; ``bag_size`` again in mean mode; zeros in sum mode).

        >>> out, offset2bag, bag_size, _ = corenn.embedding_bag(corenn.eye(3), corenn.tensor([0, 1, 2]),
        ...                                                     corenn.tensor([0, 2]), mode=1)
        >>> out.tolist(), offset2bag.tolist(), bag_size.tolist()
        ([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], [0, 0, 1], [2, 1])
    """
    import numpy

    import corenn
    modes = {0: "sum", 1: "mean", 2: "max"}
    check_tensor(weight, "weight", "embedding_bag")
    if not isinstance(mode, int) or mode not in modes:
        raise RuntimeError(f"embedding_bag(): mode must be 0 (sum), 1 (mean) or 2 (max), got {mode}")
    check_tensor(indices, "indices", "embedding_bag")
    check_tensor(offsets, "offsets", "embedding_bag")
    if indices.ndim != 1:
        raise RuntimeError(f"embedding_bag(): expected 1-D indices, got {indices.ndim}-D (2-D bags are "
                           f"nn.functional.embedding_bag's)")
    output = _functional().embedding_bag(indices, weight, offsets, scale_grad_by_freq=scale_grad_by_freq,
                                         mode=modes[mode], sparse=sparse, per_sample_weights=per_sample_weights,
                                         include_last_offset=include_last_offset, padding_idx=padding_idx)
    device, long = indices.device, corenn.int64
    values = indices.numpy().astype(numpy.int64)
    starts = offsets.numpy().astype(numpy.int64)
    if include_last_offset:
        starts, ends = starts[:-1], starts[1:]
    else:
        ends = numpy.append(starts[1:], len(values)).astype(numpy.int64)
    bags = len(starts)
    bag_of = numpy.repeat(numpy.arange(bags, dtype=numpy.int64), ends - starts)
    kept = numpy.ones(len(values), bool) if padding_idx is None else values != padding_idx % weight.shape[0]
    zeros = corenn.zeros(len(offsets), dtype=long, device=device)
    if mode == 0:
        # PyTorch's fast sum path (float32, float16, bfloat16; no padding_idx) leaves offset2bag empty
        fast = padding_idx is None and weight.dtype != corenn.float64
        offset2bag = corenn.zeros(0, dtype=long, device=device) if fast else corenn.tensor(bag_of, device=device)
        return output, offset2bag, zeros, zeros.clone()
    bag_size = corenn.tensor(numpy.bincount(bag_of[kept], minlength=bags), dtype=long, device=device)
    if mode == 1:
        return output, corenn.tensor(bag_of, device=device), bag_size, bag_size.clone()
    table = weight.detach().numpy()
    max_indices = numpy.zeros((bags, weight.shape[1]), dtype=numpy.int64)
    for bag in range(bags):
        rows = values[starts[bag]:ends[bag]][kept[starts[bag]:ends[bag]]]
        if rows.size:  # the first row holding the maximum wins, as PyTorch's loop
            max_indices[bag] = rows[table[rows].argmax(axis=0)]
    return output, corenn.tensor(bag_of, device=device), bag_size, corenn.tensor(max_indices, device=device)


# ---------------------------------------------------------------------------------------------------------
# Dropout (``train`` where nn.functional says ``training``)
# ---------------------------------------------------------------------------------------------------------

def _channel_dropout(input, p, train, inplace, op):
    """``torch.feature_dropout``: one draw per (N, C) entry of input with at least 2 dims."""
    from corenn.ops.dropout import _keep_mask
    from corenn.ops._kernel import run
    check_tensor(input, "input", op)
    p = _checked_p(p, op)
    if input.ndim < 2:
        raise RuntimeError(f"{op}(): Feature dropout requires at least 2 dimensions in the input")
    if not train or p == 0.0 or input.numel() == 0:
        return input
    mask = _keep_mask(input, p, shape=tuple(input.shape[:2]) + (1,) * (input.ndim - 2))
    out = run("dropout", input, mask=mask)
    return input._inplace_from(out) if inplace else out


def _checked_p(p, op):
    p = check_number(p, "p")
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"{op}(): dropout probability has to be between 0 and 1, but got {p}")
    return p


def dropout(input, p, train):
    """``torch.dropout``: zero each element with probability ``p``, scale the rest by ``1 / (1 - p)``.

        >>> corenn.dropout(corenn.ones(3), 0.5, False).tolist()
        [1.0, 1.0, 1.0]
    """
    return _functional().dropout(input, _checked_p(p, "dropout"), train)


def dropout_(input, p, train):
    """In-place :func:`dropout`."""
    return _functional().dropout(input, _checked_p(p, "dropout_"), train, inplace=True)


def feature_dropout(input, p, train):
    """``torch.feature_dropout``: zero whole (sample, channel) slices of (N, C, *) input with probability ``p``.

        >>> corenn.feature_dropout(corenn.ones(2, 3, 4), 0.5, False).shape
        corenn.Size([2, 3, 4])
    """
    return _channel_dropout(input, p, train, False, "feature_dropout")


def feature_dropout_(input, p, train):
    """In-place :func:`feature_dropout`."""
    return _channel_dropout(input, p, train, True, "feature_dropout_")


def alpha_dropout(input, p, train):
    """``torch.alpha_dropout``: dropout that keeps SELU's zero mean and unit variance.

        >>> corenn.alpha_dropout(corenn.ones(3), 0.5, False).tolist()
        [1.0, 1.0, 1.0]
    """
    return _functional().alpha_dropout(input, _checked_p(p, "alpha_dropout"), train)


def alpha_dropout_(input, p, train):
    """In-place :func:`alpha_dropout`."""
    return _functional().alpha_dropout(input, _checked_p(p, "alpha_dropout_"), train, inplace=True)


def feature_alpha_dropout(input, p, train):
    """``torch.feature_alpha_dropout``: :func:`alpha_dropout` of whole channels.

        >>> corenn.feature_alpha_dropout(corenn.ones(2, 3, 4), 0.5, False).shape
        corenn.Size([2, 3, 4])
    """
    return _functional().feature_alpha_dropout(input, _checked_p(p, "feature_alpha_dropout"), train)


def feature_alpha_dropout_(input, p, train):
    """In-place :func:`feature_alpha_dropout`."""
    p = _checked_p(p, "feature_alpha_dropout_")
    return _functional().feature_alpha_dropout(input, p, train, inplace=True)


# ---------------------------------------------------------------------------------------------------------
# Activations and rearrangements
# ---------------------------------------------------------------------------------------------------------

def prelu(input, weight):
    """``torch.prelu``: ``max(0, x) + weight * min(0, x)``.

        >>> corenn.prelu(corenn.tensor([-2., 3.]), corenn.tensor([0.25])).tolist()
        [-0.5, 3.0]
    """
    return _functional().prelu(input, weight)


def rrelu(input, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    """``torch.rrelu``: randomized leaky ReLU (slope ``(lower + upper) / 2`` when not training).

        >>> corenn.rrelu(corenn.tensor([-3., 1.]), 0.1, 0.3).tolist()
        [-0.6000000238418579, 1.0]
    """
    if generator is not None:
        raise NotImplementedError("rrelu(): the 'generator' argument is not supported; seed with corenn.manual_seed")
    return _functional().rrelu(input, lower, upper, training)


def rrelu_(input, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    """In-place :func:`rrelu`."""
    if generator is not None:
        raise NotImplementedError("rrelu_(): the 'generator' argument is not supported; seed with corenn.manual_seed")
    return _functional().rrelu(input, lower, upper, training, inplace=True)


def celu_(input, alpha=1.0):
    """In-place ``celu``.

        >>> corenn.celu_(corenn.tensor([1.])).tolist()
        [1.0]
    """
    return _functional().celu(input, alpha, inplace=True)


def selu_(input):
    """In-place ``selu``.

        >>> corenn.selu_(corenn.tensor([0.])).tolist()
        [0.0]
    """
    return _functional().selu(input, inplace=True)


def threshold(input, threshold, value):
    """``x`` where ``x > threshold``, else ``value``.

        >>> corenn.threshold(corenn.tensor([1., 3.]), 2., -1.).tolist()
        [-1.0, 3.0]
    """
    return _functional().threshold(input, threshold, value)


def threshold_(input, threshold, value):
    """In-place :func:`threshold`."""
    return _functional().threshold(input, threshold, value, inplace=True)


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0.

        >>> corenn.hardshrink(corenn.tensor([-1., 0.2])).tolist()
        [-1.0, 0.0]
    """
    return _functional().hardshrink(input, lambd)


def pixel_shuffle(input, upscale_factor):
    """(*, C*r*r, H, W) to (*, C, H*r, W*r).

        >>> corenn.pixel_shuffle(corenn.randn(1, 8, 3, 3), 2).shape
        corenn.Size([1, 2, 6, 6])
    """
    return _functional().pixel_shuffle(input, upscale_factor)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H*r, W*r) to (*, C*r*r, H, W), the inverse of :func:`pixel_shuffle`.

        >>> corenn.pixel_unshuffle(corenn.randn(1, 2, 6, 6), 2).shape
        corenn.Size([1, 8, 3, 3])
    """
    return _functional().pixel_unshuffle(input, downscale_factor)


def channel_shuffle(input, groups):
    """Interleave the channels of (N, C, *) input across ``groups``.

        >>> corenn.channel_shuffle(corenn.arange(4.).reshape(1, 4, 1), 2).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0]
    """
    return _functional().channel_shuffle(input, groups)


def constant_pad_nd(input, pad, value=0):
    """Pad the last dims with ``value``; ``pad = (left, right, top, bottom, ...)``, negative entries crop.

        >>> corenn.constant_pad_nd(corenn.ones(1, 2), [1, 0], 5.).tolist()
        [[5.0, 1.0, 1.0]]
    """
    from corenn.ops.movement import pad as _pad
    return _pad(input, pad, "constant", value)


# ---------------------------------------------------------------------------------------------------------
# Layers: convolution, bilinear, recurrent cells
# ---------------------------------------------------------------------------------------------------------

def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``torch.convolution``: N-d (1, 2 or 3) convolution or transposed convolution, chosen by ``weight``'s
    rank and ``transposed``.

        >>> corenn.convolution(corenn.ones(1, 1, 4), corenn.ones(1, 1, 2), None, [1], [0], [1], False,
        ...                    [0], 1).tolist()
        [[[2.0, 2.0, 2.0]]]
    """
    check_tensor(input, "input", "convolution")
    check_tensor(weight, "weight", "convolution")
    dims = weight.ndim - 2
    if dims not in (1, 2, 3):
        raise NotImplementedError(f"convolution(): {dims}-d convolution is not supported (weight of size "
                                  f"{list(weight.shape)}); 1-d, 2-d and 3-d are")
    F = _functional()
    if transposed:
        return getattr(F, f"conv_transpose{dims}d")(input, weight, bias, stride, padding, output_padding, groups,
                                                   dilation)
    if any(check_int(o, "output_padding") for o in output_padding):
        raise RuntimeError("convolution(): non-zero output_padding is only supported for transposed convolutions, "
                           f"got {list(output_padding)}")
    return getattr(F, f"conv{dims}d")(input, weight, bias, stride, padding, dilation, groups)


def bilinear(input1, input2, weight, bias=None):
    """``x1^T A x2 + b`` per output feature.

        >>> corenn.bilinear(corenn.ones(2, 3), corenn.ones(2, 4), corenn.ones(5, 3, 4)).shape
        corenn.Size([2, 5])
    """
    return _functional().bilinear(input1, input2, weight, bias)


def _rnn_cell(input, hx, w_ih, w_hh, b_ih, b_hh, op, activation):
    for tensor, name in ((input, "input"), (hx, "hx"), (w_ih, "w_ih"), (w_hh, "w_hh")):
        check_tensor(tensor, name, op)
    if input.ndim != 2 or hx.ndim != 2:  # ATen's cells are batched only (nn.RNNCell adds the batch dim)
        raise IndexError(f"{op}(): expected input and hx of 2 dims (batch, features), got input of size "
                         f"{list(input.shape)} and hx of size {list(hx.shape)}")
    if w_ih.ndim != 2 or w_ih.shape[1] != input.shape[-1] or w_hh.ndim != 2 or \
            tuple(w_hh.shape) != (w_ih.shape[0], hx.shape[-1]) or w_ih.shape[0] != hx.shape[-1]:
        raise RuntimeError(f"{op}(): weights of sizes {list(w_ih.shape)} and {list(w_hh.shape)} do not match "
                           f"input of size {list(input.shape)} and hx of size {list(hx.shape)}")
    F = _functional()
    return activation(F.linear(input, w_ih, b_ih) + F.linear(hx, w_hh, b_hh))


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman RNN step: ``tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (``nn.RNNCell``).

        >>> corenn.rnn_tanh_cell(corenn.ones(1, 2), corenn.zeros(1, 3), corenn.zeros(3, 2),
        ...                      corenn.zeros(3, 3)).tolist()
        [[0.0, 0.0, 0.0]]
    """
    import corenn
    return _rnn_cell(input, hx, w_ih, w_hh, b_ih, b_hh, "rnn_tanh_cell", corenn.tanh)


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One Elman RNN step with ReLU: ``relu(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

        >>> corenn.rnn_relu_cell(corenn.ones(1, 2), corenn.zeros(1, 3), corenn.ones(3, 2),
        ...                      corenn.zeros(3, 3)).tolist()
        [[2.0, 2.0, 2.0]]
    """
    return _rnn_cell(input, hx, w_ih, w_hh, b_ih, b_hh, "rnn_relu_cell", _functional().relu)


def _recurrent(mode, op, args, kwargs):
    """ATen's recurrent networks: ``(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
    batch_first)``, or over a packed sequence ``(data, batch_sizes, hx, params, has_biases, num_layers, dropout,
    train, bidirectional)``; ``params`` lists each layer's and direction's w_ih, w_hh (b_ih, b_hh) (w_hr)."""
    from corenn.nn.modules.rnn import run_layers
    from corenn.tensor.tensor import Tensor
    # the packed form puts batch_sizes (a tensor) second: LSTM's hx is a list, the others' a tensor after it
    second = 1 if mode == "LSTM" else 2
    packed = len(args) > second and isinstance(args[second], Tensor)
    names = (("data", "batch_sizes", "hx", "params", "has_biases", "num_layers", "dropout", "train", "bidirectional")
             if packed else ("input", "hx", "params", "has_biases", "num_layers", "dropout", "train", "bidirectional",
                             "batch_first"))
    if len(args) + len(kwargs) != len(names):
        raise TypeError(f"{op}() takes {len(names)} arguments ({', '.join(names)}), got {len(args) + len(kwargs)}")
    bound = dict(zip(names, args), **kwargs)
    hx, params = bound["hx"], list(bound["params"])
    num_layers, has_biases = check_int(bound["num_layers"], "num_layers"), bool(bound["has_biases"])
    directions = 2 if bound["bidirectional"] else 1
    state0 = tuple(hx) if mode == "LSTM" else (hx,)
    per = len(params) // max(num_layers * directions, 1)
    plain = 4 if has_biases else 2
    if len(params) != per * num_layers * directions or per not in (plain, plain + (mode == "LSTM")):
        raise RuntimeError(f"{op}(): expected {plain} parameters per layer and direction "
                           f"({num_layers * directions} of them), got {len(params)}")

    def layer_weights(layer, direction):
        group = params[(layer * directions + direction) * per:][:per]
        w_ih, w_hh = group[0], group[1]
        b_ih, b_hh = (group[2], group[3]) if has_biases else (None, None)
        w_hr = group[-1] if per == plain + 1 else None
        return (w_ih, b_ih), (w_hh, b_hh, w_hr)

    if packed:
        data = check_tensor(bound["data"], "data", op)
        batch_sizes = [int(n) for n in bound["batch_sizes"].tolist()]
    else:
        data = check_tensor(bound["input"], "input", op)
        if data.ndim != 3:
            raise RuntimeError(f"{op}(): expected input of 3 dimensions (seq, batch, feature), got {data.ndim}")
        if bound["batch_first"]:
            data = data.transpose(0, 1)
        steps, batch = data.shape[0], data.shape[1]
        batch_sizes = [batch] * steps
        data = data.reshape(steps * batch, data.shape[2])
    output, state_n = run_layers(mode, data, batch_sizes, state0, layer_weights, num_layers, directions,
                                 check_number(bound["dropout"], "dropout"), bool(bound["train"]))
    if not packed:
        output = output.reshape(len(batch_sizes), batch, output.shape[-1])
        if bound["batch_first"]:
            output = output.transpose(0, 1)
    return (output, *state_n)


def rnn_tanh(*args, **kwargs):
    """``torch.rnn_tanh``: an Elman RNN (tanh) over a sequence with explicit weights; returns ``(output, h_n)``.

        >>> w = [corenn.randn(4, 3), corenn.randn(4, 4)]
        >>> out, h = corenn.rnn_tanh(corenn.randn(5, 2, 3), corenn.zeros(1, 2, 4), w, False, 1, 0.0, False, False,
        ...                          False)
        >>> out.shape, h.shape
        (corenn.Size([5, 2, 4]), corenn.Size([1, 2, 4]))
    """
    return _recurrent("RNN_TANH", "rnn_tanh", args, kwargs)


def rnn_relu(*args, **kwargs):
    """``torch.rnn_relu``: :func:`rnn_tanh` with ReLU.

        >>> w = [corenn.randn(4, 3), corenn.randn(4, 4)]
        >>> corenn.rnn_relu(corenn.randn(2, 5, 3), corenn.zeros(1, 2, 4), w, False, 1, 0.0, False, False,
        ...                 True)[0].shape
        corenn.Size([2, 5, 4])
    """
    return _recurrent("RNN_RELU", "rnn_relu", args, kwargs)


def lstm(*args, **kwargs):
    """``torch.lstm``: an LSTM over a sequence with explicit weights; ``hx`` is ``(h_0, c_0)``; returns
    ``(output, h_n, c_n)``.

        >>> w = [corenn.randn(16, 3), corenn.randn(16, 4)]
        >>> h0 = (corenn.zeros(1, 2, 4), corenn.zeros(1, 2, 4))
        >>> [t.shape[-1] for t in corenn.lstm(corenn.randn(5, 2, 3), h0, w, False, 1, 0.0, False, False, False)]
        [4, 4, 4]
    """
    return _recurrent("LSTM", "lstm", args, kwargs)


def gru(*args, **kwargs):
    """``torch.gru``: a GRU over a sequence with explicit weights; returns ``(output, h_n)``.

        >>> w = [corenn.randn(12, 3), corenn.randn(12, 4)]
        >>> corenn.gru(corenn.randn(5, 2, 3), corenn.zeros(1, 2, 4), w, False, 1, 0.0, False, False, False)[1].shape
        corenn.Size([1, 2, 4])
    """
    return _recurrent("GRU", "gru", args, kwargs)


def norm_except_dim(v, pow=2, dim=0):
    """The ``pow``-norm of ``v`` over every dim but ``dim``, shaped to broadcast against ``v`` (weight norm's
    ``g``); ``dim=-1`` is the norm of all of ``v``.

        >>> corenn.norm_except_dim(corenn.tensor([[3., 4.], [0., 1.]])).tolist()
        [[5.0], [1.0]]
    """
    check_tensor(v, "v", "norm_except_dim")
    dim = check_int(dim, "dim")
    if dim == -1:
        return v.norm(pow)
    if v.ndim == 0:
        raise IndexError(f"norm_except_dim(): Dimension specified as {dim} but tensor has no dimensions")
    if dim == 0:
        shape = [v.shape[0]] + [1] * (v.ndim - 1)
        return v.reshape(v.shape[0], -1).norm(pow, 1).reshape(shape)
    if dim == v.ndim - 1:
        shape = [1] * (v.ndim - 1) + [v.shape[-1]]
        return v.reshape(-1, v.shape[-1]).norm(pow, 0).reshape(shape)
    return norm_except_dim(v.transpose(0, dim), pow, 0).transpose(0, dim)


# ---------------------------------------------------------------------------------------------------------
# Distances and losses (``reduction`` as ATen's int: 0 none, 1 mean, 2 sum)
# ---------------------------------------------------------------------------------------------------------

def cosine_similarity(x1, x2, dim=1, eps=1e-08):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim``.

        >>> corenn.cosine_similarity(corenn.tensor([[1., 0.]]), corenn.tensor([[1., 1.]])).tolist()
        [0.7071067690849304]
    """
    return _functional().cosine_similarity(x1, x2, dim, eps)


def pairwise_distance(x1, x2, p=2.0, eps=1e-06, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dimension.

        >>> corenn.pairwise_distance(corenn.tensor([[3., 0.]]), corenn.tensor([[0., 4.]]), eps=0.0).tolist()
        [5.0]
    """
    return _functional().pairwise_distance(x1, x2, p, eps, keepdim)


def kl_div(input, target, reduction=0, *, log_target=False):
    """``torch.kl_div``: pointwise KL divergence; reduction 1 is the mean over all elements.

        >>> corenn.kl_div(corenn.tensor([0.]), corenn.tensor([1.])).tolist()
        [0.0]
    """
    return _functional().kl_div(input, target, reduction=_reduction(reduction, "kl_div"), log_target=log_target)


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    """``max(0, -target * (input1 - input2) + margin)``.

        >>> corenn.margin_ranking_loss(corenn.tensor([1.]), corenn.tensor([2.]), corenn.tensor([1.])).item()
        1.0
    """
    return _functional().margin_ranking_loss(input1, input2, target, margin,
                                             reduction=_reduction(reduction, "margin_ranking_loss"))


def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    """``x`` where ``target == 1``, ``max(0, margin - x)`` where ``target == -1``.

        >>> corenn.hinge_embedding_loss(corenn.tensor([0.5]), corenn.tensor([-1.])).item()
        0.5
    """
    return _functional().hinge_embedding_loss(input, target, margin,
                                              reduction=_reduction(reduction, "hinge_embedding_loss"))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False, reduction=0):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with the ``p``-norm distance.

        >>> corenn.triplet_margin_loss(corenn.zeros(1, 2), corenn.zeros(1, 2), corenn.ones(1, 2) * 5).item()
        0.0
    """
    return _functional().triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                             reduction=_reduction(reduction, "triplet_margin_loss"))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    """Poisson negative log likelihood (every argument required, as in ATen).

        >>> corenn.poisson_nll_loss(corenn.tensor([0.]), corenn.tensor([1.]), True, False, 1e-8, 1).item()
        1.0
    """
    return _functional().poisson_nll_loss(input, target, log_input, full, eps=eps,
                                          reduction=_reduction(reduction, "poisson_nll_loss"))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where ``target == -1``.

        >>> corenn.cosine_embedding_loss(corenn.ones(1, 2), corenn.ones(1, 2), corenn.tensor([1.])).item()
        0.0
    """
    return _functional().cosine_embedding_loss(input1, input2, target, margin,
                                               reduction=_reduction(reduction, "cosine_embedding_loss"))


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=0):
    """Sigmoid and binary cross entropy in one numerically stable expression.

        >>> round(corenn.binary_cross_entropy_with_logits(corenn.tensor([0.]), corenn.tensor([1.])).item(), 4)
        0.6931
    """
    return _functional().binary_cross_entropy_with_logits(
        input, target, weight, reduction=_reduction(reduction, "binary_cross_entropy_with_logits"),
        pos_weight=pos_weight)


# ``corenn.dropout`` and ``corenn.embedding`` are imported by corenn/__init__.py itself: in ``corenn.ops`` those
# names are kernel modules (a plugin imports ``from corenn.ops import embedding``), which a star import would hide.
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__ and name not in ("dropout", "embedding")]
