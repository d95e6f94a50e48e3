"""corenn's ops, one file per family; each op's kernel (forward + backward) lives beside its front end.

This module is also the built-in plugin that registers the core kernels for every
numpy-API backend (device type ``"*"``, priority 0) and binds the op functions
as ``Tensor`` methods (``t.exp()`` is ``corenn.exp(t)``).
"""
from __future__ import annotations

import inspect

from corenn.dispatch import KernelRegistration
from corenn.hookspecs import hookimpl
from corenn.ops import elementwise, linalg, movement, nn, reduce
from corenn.ops import special
from corenn.ops.special import *  # noqa: F401,F403
from corenn.ops import activation, conv, dropout, embedding, loss, normalization, pooling  # layer kernels
from corenn.ops import optim_update  # noqa: F401 - sgd_update / adam_update, looked up by corenn.optim
from corenn.ops import upsample  # noqa: F401 - the "upsample" kernel behind nn.functional.interpolate
from corenn.ops import recurrent  # noqa: F401 - lstm_cell / gru_cell: one step of nn.LSTM / nn.GRU
from corenn.ops.recurrent import gru_cell, lstm_cell  # noqa: F401
from corenn.ops import ctc  # the "ctc_loss" kernel; corenn.ctc_loss is torch.ctc_loss
from corenn.ops.ctc import ctc_loss  # noqa: F401
from corenn.ops import sampling  # the "grid_sample" kernel; torch.grid_sampler, torch.affine_grid_generator
from corenn.ops.sampling import *  # noqa: F401,F403
from corenn.ops import nn_functions  # torch.layer_norm, torch.dropout, ...: ATen's spellings of nn.functional
from corenn.ops.nn_functions import *  # noqa: F401,F403
from corenn.ops.activation import *  # noqa: F401,F403
from corenn.ops.conv import *  # noqa: F401,F403
from corenn.ops.pooling import *  # noqa: F401,F403
from corenn.ops._kernel import CORE_KERNELS, public_function
from corenn.tensor.tensor import Tensor
from corenn.ops.elementwise import *  # noqa: F401,F403
from corenn.ops.elementwise import (abs, add, addcdiv, addcmul, bitwise_and, bitwise_left_shift,  # noqa: F401
                                   bitwise_not, bitwise_or, bitwise_right_shift, bitwise_xor, clamp, div, eq,
                                   floor_divide, ge, gt, le, lerp, lt, masked_fill, mul, ne, neg, pow, remainder, rsub,
                                   sub)
from corenn.ops.linalg import addmm, baddbmm, bmm, dot, einsum, ger, inner, matmul, mm, mv, outer  # noqa: F401
from corenn.ops.linalg import *  # noqa: F401,F403
from corenn.ops import statistics  # median, quantile, histograms, cov, ...
from corenn.ops.statistics import *  # noqa: F401,F403
from corenn.ops.statistics import sum_to_size  # noqa: F401 - a Tensor method only, as in PyTorch
from corenn.ops import layout  # rotations, stacks and splits, scatters, windows, *_copy
from corenn.ops.layout import *  # noqa: F401,F403
from corenn.ops import spectral  # stft (real and imaginary parts)
from corenn.ops.spectral import stft  # noqa: F401
from corenn.ops.movement import *  # noqa: F401,F403
from corenn.ops.movement import (broadcast_tensors, cat, chunk, gather, index_add, index_fill, index_select,  # noqa
                                 scatter, scatter_add, split, stack, unbind)
from corenn.ops.nn import linear, log_softmax, softmax  # noqa: F401
from corenn.ops.reduce import *  # noqa: F401,F403
from corenn.ops.reduce import all, any, max, min, return_types, sum  # noqa: F401,A004
return_types.frexp = elementwise.FrexpResult  # frexp is elementwise; its named result sits with the others


__all__ = sorted(set(elementwise.__all__ + special.__all__ + reduce.__all__ + movement.__all__ + linalg.__all__ + nn.__all__
                     + statistics.__all__ + layout.__all__ + spectral.__all__
                     + conv.__all__ + pooling.__all__ + activation.__all__ + recurrent.__all__ + nn_functions.__all__ + ctc.__all__ + sampling.__all__
                     + ["return_types"]))


@hookimpl
def corenn_register_kernels():
    return [KernelRegistration(op=name, device_type="*", kernel=cls, priority=0, source="corenn.ops")
            for name, cls in CORE_KERNELS.items()]


# Functions that are also Tensor methods under the same name (``t.sum(1)`` is ``sum(t, 1)``).
TENSOR_METHODS = """
add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow float_power maximum minimum
eq ne lt le gt ge greater greater_equal less less_equal not_equal logical_and logical_or logical_xor logical_not
bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift isnan isinf isfinite signbit
neg negative abs absolute sign exp exp2 expm1 log log2 log10 log1p sqrt rsqrt square reciprocal sin cos tan tanh
sigmoid relu erf floor ceil round trunc fix clamp clip clamp_min clamp_max where masked_fill addcmul addcdiv lerp
xlogy nan_to_num isclose allclose equal
sum nansum mean prod max min amax amin aminmax argmax argmin var std logsumexp norm all any count_nonzero cumsum
cumprod
reshape view view_as reshape_as flatten unflatten squeeze unsqueeze permute transpose swapaxes swapdims t movedim
moveaxis expand expand_as broadcast_to repeat tile contiguous clone split chunk tensor_split unbind narrow select
nonzero argwhere masked_select gather take_along_dim scatter scatter_add index_select index_add index_fill index_put
tril triu flip fliplr flipud roll argsort sort topk unique diagonal diag trace
matmul mm bmm mv dot inner outer ger addmm baddbmm
det slogdet logdet inverse pinverse svd cholesky cholesky_inverse cholesky_solve triangular_solve lu
matrix_exp matrix_power kron cross vdot dist addmv addr addbmm
median nanmedian kthvalue mode msort cummax cummin logcumsumexp quantile nanquantile nanmean histc histogram
bincount unique_consecutive diff cov corrcoef renorm sum_to_size
rot90 diag_embed diagflat take put index_copy index_reduce scatter_reduce diagonal_scatter select_scatter
slice_scatter as_strided as_strided_scatter dsplit hsplit vsplit repeat_interleave ravel split_with_sizes unsafe_chunk
unsafe_split unsafe_split_with_sizes narrow_copy geqrf orgqr ormqr nonzero_static stft
softmax log_softmax
asin acos atan asinh acosh atanh sinh cosh arcsin arccos arctan arcsinh arccosh arctanh sinc deg2rad rad2deg frac
logit sgn positive atan2 arctan2 hypot copysign logaddexp logaddexp2 fmax fmin ldexp nextafter heaviside gcd lcm
is_signed is_conj is_neg is_nonzero is_same_size conj conj_physical resolve_conj resolve_neg isreal isposinf isneginf
lgamma digamma polygamma mvlgamma erfc erfinv i0 igamma igammac angle frexp
""".split()


def _where_method(self, condition, y):
    """``self.where(condition, y)`` is ``corenn.where(condition, self, y)``, as in PyTorch."""
    return elementwise.where(condition, self, y)


public_function(_where_method, "where")


def _bind_methods(tensor_cls):
    # where's and polygamma's methods take their operands in another order than the functions
    namespace = dict(globals(), where=_where_method, polygamma=special._polygamma_method)
    for name in TENSOR_METHODS:
        setattr(tensor_cls, name, namespace[name])
    tensor_cls.__add__ = tensor_cls.__radd__ = namespace["add"]
    tensor_cls.__mul__ = tensor_cls.__rmul__ = namespace["mul"]
    tensor_cls.__sub__ = namespace["sub"]
    tensor_cls.__truediv__ = namespace["div"]
    tensor_cls.__pow__ = namespace["pow"]
    tensor_cls.__neg__ = namespace["neg"]
    tensor_cls.T = property(movement._T)
    tensor_cls.mT = property(movement._mT)
    tensor_cls.unfold = layout.unfold  # the sliding window (nn.functional.unfold is im2col)
    tensor_cls.resize_ = layout.resize_
    tensor_cls.resize_as_ = layout.resize_as_
    tensor_cls.resize, tensor_cls.resize_as = layout.resize, layout.resize_as
    tensor_cls.as_strided_ = layout.as_strided_
    tensor_cls.dim_order = layout.dim_order
    from corenn.tensor.creation import new, new_empty_strided
    tensor_cls.new_empty_strided = new_empty_strided
    tensor_cls.new = new  # PyTorch's legacy constructor
    for name in ("neg", "abs", "sqrt", "exp", "log", "sigmoid", "tanh", "relu", "floor", "ceil", "round", "trunc",
                 "sign", "reciprocal", "sin", "cos", "square", "clamp_min", "clamp_max", "fmod", "remainder",
                 "tril", "triu", "logical_not", "where", "log1p",
                 "expm1", "erf", "index_put"):
        _bind_inplace(tensor_cls, name, namespace[name])
    for name in INPLACE_METHODS:
        _bind_inplace(tensor_cls, name, namespace[name])


# Pointwise ops whose in-place variant ``t.name_(...)`` PyTorch also has (besides those bound above).
INPLACE_METHODS = """
asin acos atan asinh acosh atanh sinh cosh arcsin arccos arctan arcsinh arccosh arctanh sinc deg2rad rad2deg frac
logit sgn atan2 arctan2 hypot copysign ldexp nextafter heaviside gcd lcm absolute negative exp2 log2 log10 rsqrt tan
fix eq ne lt le gt ge greater greater_equal less less_equal not_equal bitwise_and
bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift subtract multiply divide true_divide
floor_divide xlogy nan_to_num cumsum cumprod lgamma digamma polygamma mvlgamma erfc erfinv i0 igamma igammac
addmm baddbmm addmv addr addbmm put index_copy index_reduce scatter_reduce renorm
""".split()


def _bind_inplace(tensor_cls, name, function):
    if hasattr(tensor_cls, name + "_"):
        return

    def method(self, *args, **kwargs):
        self._check_inplace()  # a leaf that requires grad refuses every in-place op, differentiable or not
        try:
            result = function(self, *args, **kwargs)
        except TypeError:
            _check_arguments(name + "_", function, self, args, kwargs)
            raise
        if not isinstance(result, Tensor):  # ``t.eq_(None)``: eq's Python-object answer has no place in t
            raise TypeError(f"{name}_(): argument 'other' must be Tensor or Number, not "
                            f"{type(args[0] if args else None).__name__}")
        return self._inplace_from(result)

    public_function(method, name + "_", f"In-place version of :meth:`{name}`.")
    method.__wrapped__ = function  # inspect.signature shows the op's parameters
    setattr(tensor_cls, name + "_", method)


def _check_arguments(name, function, *args_and_kwargs):
    """Raise the TypeError for arguments that don't fit ``function`` under the name called (``arccos_``, not
    ``acos``, whose function an alias shares)."""
    self, args, kwargs = args_and_kwargs
    try:
        inspect.signature(function).bind(self, *args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{name}(): {error}") from None
