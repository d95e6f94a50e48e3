"""Lazy modules: layers whose input size is read from the first input (``nn.LazyLinear(10)``).

Until the first forward call (the "dry run") a lazy module holds :class:`UninitializedParameter` s and
:class:`UninitializedBuffer` s, tensors with a dtype and a device but no shape and no values. The dry
run reads the input's size, creates the parameters and initializes them as the ordinary layer does,
and the module then becomes that ordinary class (``type(m) is nn.Linear``), as in PyTorch.

The parameters stay the same objects through the dry run, but as PyTorch documents, build the
optimizer after it: the parameters have no values before.

    >>> m = nn.LazyLinear(3)
    >>> m
    LazyLinear(in_features=0, out_features=3, bias=True)
    >>> m(corenn.randn(2, 5)).shape
    corenn.Size([2, 3])
    >>> m
    Linear(in_features=5, out_features=3, bias=True)
"""
from __future__ import annotations

import itertools

import corenn
from corenn.module.parameter import Parameter
from corenn.nn.modules.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from corenn.nn.modules.linear import Linear
from corenn.nn.modules.normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d,
                                             InstanceNorm3d, _BatchNorm, _InstanceNorm)
from corenn.tensor.tensor import Tensor

_STORAGE = Tensor._data  # the slot under the ``_data`` property of uninitialized tensors

_NOT_INITIALIZED = ("Attempted to use an uninitialized parameter. This error happens when you are using a "
                    "`LazyModule` or explicitly manipulating `corenn.nn.UninitializedParameter` objects. When using "
                    "LazyModules Call `forward` with a dummy batch to initialize the parameters before calling "
                    "corenn functions")


class UninitializedTensorMixin:
    """What :class:`UninitializedParameter` and :class:`UninitializedBuffer` share: a dtype and a device, no data.

    Any use of the values raises ValueError (an op reads ``_data``); ``materialize`` gives the tensor
    its shape and turns it into ``cls_to_become`` in place, so that whoever holds it sees the change.
    """

    __slots__ = ()
    cls_to_become: type = Tensor

    @property
    def _data(self):
        raise ValueError(_NOT_INITIALIZED)

    @_data.setter
    def _data(self, array):
        _STORAGE.__set__(self, array)

    @property
    def shape(self):
        raise RuntimeError("Can't access the shape of an uninitialized parameter or buffer. This error usually "
                           "happens in `load_state_dict` when trying to load an uninitialized parameter into an "
                           "initialized one. Call `forward` to initialize the parameters before accessing their "
                           "attributes.")

    def size(self, dim=None):
        return self.shape

    @property
    def dtype(self):
        from corenn import _dtype
        return _dtype._by_numpy[_STORAGE.__get__(self).dtype]

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Create the tensor's data, uninitialized values of ``shape`` (``device`` and ``dtype`` default to the
        tensor's own), and make it a ``cls_to_become`` (Parameter or Tensor).

            >>> p = nn.UninitializedParameter()
            >>> p.materialize((2, 3))
            >>> type(p).__name__, p.shape
            ('Parameter', corenn.Size([2, 3]))
        """
        empty = corenn.empty(shape, device=self.device if device is None else device,
                             dtype=self.dtype if dtype is None else dtype)
        _STORAGE.__set__(self, empty._data)
        self._device = empty._device
        self.__class__ = self.cls_to_become

    def to(self, *args, **kwargs):
        """Set the dtype and device the data will be created with and return this tensor: ``module.to()`` before
        the dry run keeps the same object (PyTorch returns a new uninitialized tensor; there are no values to copy
        either way)."""
        moved = corenn.empty(0, device=self.device, dtype=self.dtype).to(*args, **kwargs)
        _STORAGE.__set__(self, moved._data)
        self._device = moved._device
        return self

    def __repr__(self):
        return f"<{type(self).__name__}>"

    __str__ = __repr__

    def _recipe(self):
        # plain values (dtype by name, device as text): what pickle and deepcopy rebuild it from
        return (type(self), self.requires_grad, str(self.device), str(self.dtype).split(".")[-1],
                getattr(self, "persistent", True))

    def __reduce_ex__(self, protocol):
        return (_rebuild_uninitialized, self._recipe())

    def __deepcopy__(self, memo):
        copied = _rebuild_uninitialized(*self._recipe())
        memo[id(self)] = copied
        return copied


def _rebuild_uninitialized(cls, requires_grad, device, dtype_name, persistent):
    """An uninitialized parameter or buffer like the one pickled or deep-copied (it has no values to copy)."""
    dtype = getattr(corenn, dtype_name)
    if issubclass(cls, UninitializedBuffer):
        return cls(requires_grad, device=device, dtype=dtype, persistent=persistent)
    return cls(requires_grad, device=device, dtype=dtype)


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A parameter with no shape yet (``torch.nn.UninitializedParameter``): a lazy module's parameter before its
    first forward; ``materialize(shape)`` makes it an ordinary :class:`Parameter`.

        >>> p = nn.UninitializedParameter(dtype=corenn.float64)
        >>> p, p.dtype
        (<UninitializedParameter>, corenn.float64)
    """

    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        empty = corenn.empty(0, device=device, dtype=dtype)
        param = Tensor._wrap.__func__(cls, empty._data, empty._device, bool(requires_grad))
        return param


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer with no shape yet (``torch.nn.UninitializedBuffer``); ``materialize(shape)`` makes it a Tensor.

        >>> nn.UninitializedBuffer()
        <UninitializedBuffer>
    """

    __slots__ = ()
    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None, persistent: bool = True):
        empty = corenn.empty(0, device=device, dtype=dtype)
        buffer = Tensor._wrap.__func__(cls, empty._data, empty._device, bool(requires_grad))
        buffer.persistent = persistent
        buffer._is_buffer = True
        return buffer


def is_lazy(tensor) -> bool:
    """Whether ``tensor`` is an uninitialized parameter or buffer."""
    return isinstance(tensor, UninitializedTensorMixin)


class LazyModuleMixin:
    """Infers a module's parameter shapes from its first input (``torch.nn.modules.lazy.LazyModuleMixin``).

    A subclass defines ``initialize_parameters(*inputs)`` (materialize and initialize the parameters)
    and ``cls_to_become`` (the ordinary class the module turns into after the first forward).
    ``load_state_dict`` may fill an uninitialized module: its parameters take the saved shapes.
    """

    cls_to_become: type | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._load_hook = self.register_load_state_dict_pre_hook(self._lazy_load_hook)
        self._lazy_load_post_hook = self.register_load_state_dict_post_hook(self._lazy_load_post)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters, with_kwargs=True)
        self._lazy_to_lazy = set()

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # an uninitialized tensor has nothing to detach: the state dict holds it as is (as PyTorch's)
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if is_lazy(param) or keep_vars else param.detach()
        for name, buffer in self._buffers.items():
            if buffer is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buffer if is_lazy(buffer) or keep_vars else buffer.detach()

    def _lazy_load_hook(self, module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                        error_msgs):
        """Give each uninitialized tensor the shape of the saved tensor it will be loaded from."""
        for name, tensor in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if key not in state_dict or tensor is None or not is_lazy(tensor):
                continue
            saved = state_dict[key]
            if is_lazy(saved):  # nothing to load: the tensor stays uninitialized
                del state_dict[key]
                self._lazy_to_lazy.add(key)
            else:
                with corenn.no_grad():
                    tensor.materialize(saved.shape)

    def _lazy_load_post(self, module, incompatible_keys):
        # an uninitialized entry taken out by the pre-hook was loaded (as nothing), not missing
        incompatible_keys.missing_keys[:] = [k for k in incompatible_keys.missing_keys if k not in self._lazy_to_lazy]
        self._lazy_to_lazy.clear()

    def initialize_parameters(self, *args, **kwargs):
        """Materialize and initialize the parameters from the first input (each lazy class defines it)."""
        raise NotImplementedError(f"initialize_parameters is not implemented for {type(self).__name__}")

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter or buffer of this module (not its children) is still uninitialized."""
        return any(is_lazy(t) for t in itertools.chain(self._parameters.values(), self._buffers.values()))

    def _infer_parameters(self, module, args, kwargs=None):
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        for name in ("_initialize_hook", "_load_hook", "_lazy_load_post_hook"):
            getattr(module, name).remove()
            delattr(module, name)
        del module._lazy_to_lazy
        if module.cls_to_become is not None:
            # PyTorch's contract: after the dry run the module is an ordinary Linear / Conv2d / ... (its type,
            # repr and isinstance checks), with the lazy machinery gone.
            module.__class__ = module.cls_to_become


# ---------------------------------------------------------------------------------------------------------
# LazyLinear
# ---------------------------------------------------------------------------------------------------------

class LazyLinear(LazyModuleMixin, Linear):
    """:class:`Linear` whose ``in_features`` is the last dim of the first input.

        >>> layer = nn.LazyLinear(4)
        >>> layer(corenn.randn(2, 7)).shape, layer.weight.shape
        (corenn.Size([2, 4]), corenn.Size([4, 7]))
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            with corenn.no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()


# ---------------------------------------------------------------------------------------------------------
# LazyConv1d/2d/3d, LazyConvTranspose1d/2d/3d
# ---------------------------------------------------------------------------------------------------------

class _LazyConvXdMixin(LazyModuleMixin):
    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def _lazy_weights(self, out_channels, bias, device, dtype):
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if not self.has_uninitialized_params():
            return
        self.in_channels = self._get_in_channels(input)
        if self.in_channels % self.groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        with corenn.no_grad():
            if self.transposed:
                self.weight.materialize((self.in_channels, self.out_channels // self.groups, *self.kernel_size))
            else:
                self.weight.materialize((self.out_channels, self.in_channels // self.groups, *self.kernel_size))
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()

    def _get_in_channels(self, input) -> int:
        unbatched, batched = self._n + 1, self._n + 2
        if input.ndim not in (unbatched, batched):
            raise RuntimeError(f"Expected {unbatched}D (unbatched) or {batched}D (batched) input to "
                               f"{type(self).__name__}, but got input of size: {input.shape}")
        return input.shape[1] if input.ndim == batched else input.shape[0]


class _LazyConv(_LazyConvXdMixin):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        # in_channels and out_channels 0, no bias: nothing is allocated until the first input
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode, device, dtype)
        self._lazy_weights(out_channels, bias, device, dtype)


class _LazyConvTranspose(_LazyConvXdMixin):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=True,
                 dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation, padding_mode,
                         device, dtype)
        self._lazy_weights(out_channels, bias, device, dtype)


class LazyConv1d(_LazyConv, Conv1d):
    """:class:`Conv1d` whose ``in_channels`` is read from the first input.

        >>> nn.LazyConv1d(4, 3)(corenn.randn(2, 5, 8)).shape
        corenn.Size([2, 4, 6])
    """

    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    """:class:`Conv2d` whose ``in_channels`` is read from the first input.

        >>> nn.LazyConv2d(8, 3)
        LazyConv2d(0, 8, kernel_size=(3, 3), stride=(1, 1))
    """

    cls_to_become = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    """:class:`Conv3d` whose ``in_channels`` is read from the first input.

        >>> nn.LazyConv3d(2, 2)(corenn.randn(1, 3, 4, 4, 4)).shape
        corenn.Size([1, 2, 3, 3, 3])
    """

    cls_to_become = Conv3d


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    """:class:`ConvTranspose1d` whose ``in_channels`` is read from the first input.

        >>> nn.LazyConvTranspose1d(5, 3, stride=2)(corenn.randn(2, 4, 6)).shape
        corenn.Size([2, 5, 13])
    """

    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    """:class:`ConvTranspose2d` whose ``in_channels`` is read from the first input.

        >>> nn.LazyConvTranspose2d(3, 2, stride=2)(corenn.randn(1, 4, 3, 3)).shape
        corenn.Size([1, 3, 6, 6])
    """

    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    """:class:`ConvTranspose3d` whose ``in_channels`` is read from the first input.

        >>> nn.LazyConvTranspose3d(2, 2)(corenn.randn(1, 3, 2, 2, 2)).shape
        corenn.Size([1, 2, 3, 3, 3])
    """

    cls_to_become = ConvTranspose3d


# ---------------------------------------------------------------------------------------------------------
# LazyBatchNorm1d/2d/3d, LazyInstanceNorm1d/2d/3d
# ---------------------------------------------------------------------------------------------------------

class _LazyNormBase(LazyModuleMixin):
    """``num_features`` from the first input's dim 1. As PyTorch's, the lazy instance norms too default to
    ``affine=True, track_running_stats=True`` (the ordinary InstanceNorm defaults to False for both)."""

    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None, dtype=None, *,
                 bias=True):
        super().__init__(0, eps, momentum, False, False, device, dtype)  # nothing allocated yet
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            self.num_batches_tracked = corenn.tensor(0, dtype=corenn.long, device=device)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:
        if not self.has_uninitialized_params():
            return
        self.num_features = input.shape[1]
        with corenn.no_grad():
            for tensor in (self.weight, self.bias, self.running_mean, self.running_var):
                if is_lazy(tensor):
                    tensor.materialize((self.num_features,))
            self.reset_parameters()


class LazyBatchNorm1d(_LazyNormBase, _BatchNorm):
    """:class:`BatchNorm1d` whose ``num_features`` is read from the first input.

        >>> nn.LazyBatchNorm1d()(corenn.randn(4, 3)).shape
        corenn.Size([4, 3])
    """

    cls_to_become = BatchNorm1d
    _expected_dims = BatchNorm1d._expected_dims


class LazyBatchNorm2d(_LazyNormBase, _BatchNorm):
    """:class:`BatchNorm2d` whose ``num_features`` is read from the first input.

        >>> nn.LazyBatchNorm2d()
        LazyBatchNorm2d(0, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    cls_to_become = BatchNorm2d
    _expected_dims = BatchNorm2d._expected_dims


class LazyBatchNorm3d(_LazyNormBase, _BatchNorm):
    """:class:`BatchNorm3d` whose ``num_features`` is read from the first input.

        >>> nn.LazyBatchNorm3d()(corenn.randn(2, 3, 2, 2, 2)).shape
        corenn.Size([2, 3, 2, 2, 2])
    """

    cls_to_become = BatchNorm3d
    _expected_dims = BatchNorm3d._expected_dims


class LazyInstanceNorm1d(_LazyNormBase, _InstanceNorm):
    """:class:`InstanceNorm1d` whose ``num_features`` is read from the first input.

        >>> nn.LazyInstanceNorm1d()(corenn.randn(2, 3, 5)).shape
        corenn.Size([2, 3, 5])
    """

    cls_to_become = InstanceNorm1d
    _spatial = InstanceNorm1d._spatial


class LazyInstanceNorm2d(_LazyNormBase, _InstanceNorm):
    """:class:`InstanceNorm2d` whose ``num_features`` is read from the first input.

        >>> nn.LazyInstanceNorm2d()(corenn.randn(2, 3, 4, 4)).shape
        corenn.Size([2, 3, 4, 4])
    """

    cls_to_become = InstanceNorm2d
    _spatial = InstanceNorm2d._spatial


class LazyInstanceNorm3d(_LazyNormBase, _InstanceNorm):
    """:class:`InstanceNorm3d` whose ``num_features`` is read from the first input.

        >>> nn.LazyInstanceNorm3d()(corenn.randn(2, 3, 2, 2, 2)).shape
        corenn.Size([2, 3, 2, 2, 2])
    """

    cls_to_become = InstanceNorm3d
    _spatial = InstanceNorm3d._spatial
