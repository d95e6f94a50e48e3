"""corenn: a hackable deep-learning framework with PyTorch's API, on numpy, extended by plugins.

    >>> import corenn
    >>> x = corenn.tensor([1., 2.], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
"""
from __future__ import annotations

__version__ = "0.1.0"

import numpy as _np

from corenn import _argcheck, _dtype
from corenn._dtype import (bool_ as bool, dtype, double, finfo, float, float16, float32, float64,  # noqa
                           get_default_dtype, half, iinfo, int, int8, int16, int32, int64, long,
                           promote_types, result_type,
                           set_default_dtype, short, uint8)
from corenn.dispatch import device
from corenn.hookspecs import hookimpl
import importlib as _importlib

# The module itself: the attribute ``corenn.tensor.tensor`` is the factory function.
_tensor_module = _importlib.import_module("corenn.tensor.tensor")
from corenn.tensor.tensor import Size, Tensor, as_tensor, from_numpy, is_tensor, numel, tensor
from corenn.autograd import node as _node

# Bind the late references of the hot path (Tensor is defined after the autograd node module).
_node._Tensor = _argcheck._Tensor = Tensor
_node._SCALAR_TYPES = frozenset(t for t in _np.sctypeDict.values() if issubclass(t, _np.generic))
_node._asarray = _np.asarray

from corenn import plugins  # noqa: E402
from corenn import ops as _ops  # noqa: E402

plugins.load_builtins()  # the cpu backend and core kernels; installed plugins load at the end of this file
_tensor_module._CPU = device("cpu")
_tensor_module._ops = _ops
_ops._bind_methods(Tensor)

from corenn import autograd  # noqa: E402
from corenn.autograd.grad_mode import (enable_grad, inference_mode, is_grad_enabled,  # noqa: E402,F401
                                       is_inference_mode_enabled, no_grad, set_grad_enabled)
from corenn.ops import *  # noqa: E402,F401,F403
from corenn.ops import abs, all, any, max, min, pow, round, sum, return_types  # noqa: E402,F401,A004
# torch.dropout / torch.embedding: not in corenn.ops's namespace, where those names are kernel modules
from corenn.ops.nn_functions import dropout, embedding  # noqa: E402,F401
from corenn.tensor.creation import *  # noqa: E402,F401,F403
from corenn.tensor.printing import set_printoptions  # noqa: E402,F401
from corenn.tensor.legacy import (BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor,  # noqa: E402,F401
                                  HalfTensor, IntTensor, LongTensor, ShortTensor)
from corenn.tensor.random import (Generator, get_rng_state, initial_seed, manual_seed, seed,  # noqa: E402,F401
                                  set_rng_state, bernoulli, binomial, multinomial, normal, poisson, rand, rand_like, randint,
                                  randint_like, randn, randn_like, randperm)
from corenn.tensor import random as _random  # noqa: E402

_random.default_generator = _random._default_for(device("cpu"))
default_generator = _random.default_generator


def is_floating_point(input: Tensor) -> bool:  # (annotations are not evaluated: ``bool`` is the builtin here)
    """Whether ``input`` has a floating dtype (``torch.is_floating_point``)."""
    if not isinstance(input, Tensor):
        raise _argcheck.not_tensors(input=input)
    return input.dtype.is_floating_point


def __getattr__(name):
    # Subpackages load on first use, keeping ``import corenn`` fast.
    import importlib
    if name in ("nn", "optim", "fx", "utils", "testing", "serialization", "cuda", "accelerator", "backends", "amp",
                "cpu", "multiprocessing", "jit", "compiler", "linalg", "special", "distributions"):
        return importlib.import_module(f"corenn.{name}")
    if name in _dtype.LOW_PRECISION_NAMES:  # bfloat16, float8_*: ml_dtypes loads on first use
        return _dtype.low_precision_dtype(name)
    if name in ("set_float32_matmul_precision", "get_float32_matmul_precision"):
        return getattr(importlib.import_module("corenn.backends.cuda"), name)
    if name == "compile":  # torch.compile's spelling; corenn.compiler loads on first use
        return importlib.import_module("corenn.compiler").compile
    if name == "autocast":  # torch.autocast is torch.amp.autocast; programs spell it both ways
        return importlib.import_module("corenn.amp").autocast
    if name in ("save", "load"):
        serialization = importlib.import_module("corenn.serialization")
        return getattr(serialization, name)
    # ``corenn.qint8``, ``corenn.quantize_per_tensor``, ...: names that plugins register (corenn_register_names).
    registered = plugins._names.get(name)
    if registered is not None:
        return registered[0]
    # ``corenn.profiler``, ``corenn.distributed``, ... : import paths that plugins register.
    from corenn import import_paths
    return import_paths.module_getattr(__name__, name)


# Installed plugins load last, so that they can use all of corenn's API while they import.
plugins.ensure_loaded()
