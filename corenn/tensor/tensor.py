"""The ``Tensor`` class: an array on a device plus what autograd needs to know about it.

Math methods (``t.exp()``, ``t.sum(1)``, ...) are the functions of :mod:`corenn.ops`
bound as methods (see ``corenn/ops/__init__.py``); this file holds what is
specific to the tensor object itself: properties, conversion, autograd entry
points, Python operators and in-place updates.
"""
from __future__ import annotations

import copy as _copy
import numbers
import warnings
import weakref

import numpy as np

from corenn import _argcheck, _dtype
from corenn import dispatch
from corenn.autograd import node as _node
from corenn.utils.hooks import RemovableHandle

__all__ = ["Tensor", "Size", "tensor", "as_tensor", "from_numpy", "is_tensor", "numel"]


class Size(tuple):
    """A tensor's shape: a tuple that prints as ``corenn.Size([2, 3])``."""

    __slots__ = ()

    def __repr__(self):
        return f"corenn.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, item):
        result = tuple.__getitem__(self, item)
        return Size(result) if isinstance(item, slice) else result

    def __add__(self, other):
        return Size(tuple.__add__(self, tuple(other)))

    def __reduce__(self):
        return (Size, (tuple(self),))


_CPU = None  # the cpu device, bound after the cpu backend registers


class Tensor:
    """A multi-dimensional array with autograd (mirrors ``torch.Tensor``).

    Create tensors with :func:`corenn.tensor`, :func:`corenn.zeros`, ... ; the raw
    array is ``t._data`` (numpy on ``cpu``), the device ``t.device``.

    Example::

        >>> x = corenn.tensor([1., 2.], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad
        tensor([2., 4.])
    """

    # Only what every op sets is a slot; rarely-set state has class-level defaults and lands in
    # the instance __dict__ when used, keeping tensor creation (once per op) cheap.
    __slots__ = ("_data", "_device", "_grad_fn", "_requires_grad", "_output_nr", "__weakref__", "__dict__")
    _grad = None
    _hooks = None
    _post_accumulate_grad_hooks = None
    _retains_grad = False

    # numpy defers binary operators to us (``np_scalar * t`` calls ``t.__rmul__``).
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __new__(cls, *args, **kwargs):
        if cls is Tensor and args:
            # corenn.Tensor([1, 2]) / corenn.Tensor(2, 3) as PyTorch allows: float32 data / uninitialised shape.
            if len(args) == 1 and not isinstance(args[0], numbers.Integral):
                return tensor(args[0], dtype=_dtype.get_default_dtype())
            from corenn.tensor.creation import empty
            return empty(*args, **kwargs)
        return object.__new__(cls)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def _wrap(cls, array, device=None, requires_grad=False):
        t = object.__new__(cls)
        if array.__class__ in _node._SCALAR_TYPES:
            array = np.asarray(array)
        t._data = array
        t._device = device if device is not None else device_of_array(array)
        t._grad_fn = None
        t._requires_grad = bool(requires_grad)
        t._output_nr = 0
        return t

    # -- basic properties ---------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        """The shape, or the length of dimension ``dim``."""
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[_normalize_dim(dim, self._data.ndim)]

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    ndimension = dim

    def numel(self) -> int:
        return int(self._data.size)

    nelement = numel

    def element_size(self) -> int:
        return self._data.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element (``element_size()``)."""
        return self._data.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes the elements take: ``numel() * itemsize`` (a view counts its own elements, as in PyTorch)."""
        return int(self._data.size) * self._data.dtype.itemsize

    @property
    def H(self) -> "Tensor":
        """The conjugate transpose of a matrix: its transpose, for corenn's real dtypes."""
        if self._data.ndim == 0:
            warnings.warn("Tensor.H is deprecated on 0-D tensors. Consider using x.conj().", UserWarning,
                          stacklevel=2)
            return self
        if self._data.ndim != 2:
            hint = " For batches of matrices, consider using tensor.mH" if self._data.ndim > 2 else ""
            raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self._data.ndim}-D "
                               f"tensor.{hint}")
        return _ops.transpose(self, 0, 1)

    @property
    def mH(self) -> "Tensor":
        """The conjugate transpose of the last two dimensions: ``mT``, for corenn's real dtypes."""
        return _transpose_last(self, "tensor.mH")

    @property
    def real(self) -> "Tensor":
        """The real part: the tensor itself, for corenn's real dtypes."""
        return self

    @property
    def imag(self) -> "Tensor":
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")

    def adjoint(self) -> "Tensor":
        """The conjugate transpose of the last two dimensions; ``transpose(-2, -1)`` for real dtypes."""
        return _transpose_last(self, "tensor.adjoint()")

    @property
    def dtype(self) -> _dtype.dtype:
        return _dtype._by_numpy[self._data.dtype]

    @property
    def device(self) -> dispatch.device:
        return self._device

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self._device.type == "cpu"

    @property
    def is_xpu(self) -> bool:
        return self._device.type == "xpu"

    @property
    def is_mps(self) -> bool:
        return self._device.type == "mps"

    @property
    def is_meta(self) -> bool:
        return self._device.type == "meta"

    def get_device(self) -> int:
        return -1 if self._device.index is None else self._device.index

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return False

    def stride(self, dim: int | None = None):
        """Strides in elements, as PyTorch reports them."""
        strides = tuple(s // self._data.dtype.itemsize for s in self._data.strides)
        return strides if dim is None else strides[_normalize_dim(dim, self._data.ndim)]

    def is_contiguous(self) -> bool:
        return bool(self._data.flags.c_contiguous)

    def data_ptr(self) -> int:
        interface = getattr(self._data, "__array_interface__", None) or self._data.__cuda_array_interface__
        return interface["data"][0]

    def storage_offset(self) -> int:
        base = self._data
        while getattr(base, "base", None) is not None:
            base = base.base
        return (self.data_ptr() - Tensor._wrap(base, self._device).data_ptr()) // self._data.dtype.itemsize \
            if hasattr(base, "dtype") else 0

    # -- autograd state -------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool):
        self.requires_grad_(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Set whether autograd records ops on this leaf tensor (in place; returns self)."""
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use a "
                                   "computed variable in a subgraph that doesn't require differentiation use "
                                   "var_no_grad = var.detach().")
            return self
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(_argcheck.named(f"only Tensors of floating point dtype can require gradients, got "
                                               f"{self.dtype}"))
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def grad(self):
        """The gradient accumulated by ``backward`` (None until then).

        Assigning checks what PyTorch checks: a Tensor or None, on this tensor's device,
        of its shape and dtype (a ``(1,)`` gradient on a ``(1000,)`` parameter is an error,
        not a broadcast at ``step()``).
        """
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            _check_assigned_grad(self, value)
        self._grad = value

    @grad.deleter
    def grad(self):
        self._grad = None

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    @property
    def grad_fn(self):
        return self._grad_fn

    @property
    def output_nr(self) -> int:
        return self._output_nr

    @property
    def data(self) -> "Tensor":
        """A tensor sharing this one's array, outside autograd (prefer ``detach()``)."""
        return Tensor._wrap(self._data, self._device)

    @data.setter
    def data(self, value: "Tensor"):
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data must be set to a Tensor, got {type(value).__name__}")
        self._data = value._data
        self._device = value._device

    def detach(self) -> "Tensor":
        """A new tensor sharing this one's data, cut from the graph (``requires_grad=False``)."""
        return Tensor._wrap(self._data, self._device)

    def detach_(self) -> "Tensor":
        self._grad_fn = None
        self._requires_grad = False
        return self

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after backward."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._grad_fn is None or self._retains_grad:
            return
        import weakref
        ref = weakref.ref(self)

        def retain(grad):
            owner = ref()
            if owner is not None:
                owner.grad = grad.clone() if owner.grad is None else owner.grad + grad
        self._add_hook(retain)
        self._retains_grad = True

    def register_hook(self, hook) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces it.

        Example::

            >>> h = x.register_hook(lambda g: g * 2)   # doubles x's gradient
            >>> h.remove()
        """
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        return self._add_hook(hook)

    def register_post_accumulate_grad_hook(self, hook) -> RemovableHandle:
        """Call ``hook(tensor)`` once per backward, after this leaf's whole gradient is accumulated into ``.grad``.

        Only for leaf tensors that require grad. The hook gets the tensor itself (read
        ``tensor.grad``) and must return None. A leaf used several times in the graph
        receives its gradient in parts; the hook runs after the last part, as PyTorch
        runs it after AccumulateGrad. ``autograd.grad`` accumulates nothing and runs no
        such hook. DistributedDataParallel uses it to start all-reducing a bucket while
        backward goes on.

        Example::

            >>> w = corenn.ones(2, requires_grad=True)
            >>> h = w.register_post_accumulate_grad_hook(lambda t: print(t.grad))
            >>> (w * w).sum().backward()
            tensor([2., 2.])
            >>> h.remove()
        """
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        from collections import OrderedDict

        from corenn.autograd import node
        if self._post_accumulate_grad_hooks is None:
            self._post_accumulate_grad_hooks = OrderedDict()
        hooks = self._post_accumulate_grad_hooks
        handle = _PostAccumulateHandle(hooks, self)
        hooks[handle.id] = hook
        node.post_accumulate_hooked[id(self)] = self
        return handle

    def _add_hook(self, hook) -> RemovableHandle:
        from collections import OrderedDict
        if self._grad_fn is None:
            if self._hooks is None:
                self._hooks = OrderedDict()
            hooks = self._hooks
        else:
            fn = self._grad_fn
            fn.has_hooks = True
            if fn._tensor_hooks is None:
                fn._tensor_hooks = {}
            hooks = fn._tensor_hooks.setdefault(self._output_nr, OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = hook
        return handle

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves it depends on."""
        from corenn.autograd import backward
        backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    # -- conversion -----------------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The data as a numpy array, sharing memory on the CPU."""
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self._device.type != "cpu":
            if not force:
                raise TypeError(f"can't convert {self._device} device type tensor to numpy. Use Tensor.cpu() to copy "
                                "the tensor to host memory first.")
            return dispatch.get_backend(self._device.type).to_host(self._data)
        return self._data

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self._data.size != 1:
            raise RuntimeError(_argcheck.named(f"a Tensor with {self._data.size} elements cannot be converted to "
                                               "Scalar"))
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def _host(self) -> np.ndarray:
        if self._device.type == "cpu":
            return self._data
        return dispatch.get_backend(self._device.type).to_host(self._data)

    def __bool__(self):
        if self._data.size != 1:
            raise RuntimeError(_argcheck.named(f"Boolean value of Tensor with {self._data.size} values is ambiguous"))
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self._data.size != 1:
            raise TypeError(_argcheck.named("only integer tensors of a single element can be converted to an index"))
        return int(self.item())

    def __complex__(self):
        return complex(self.item())

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self):
        return id(self)

    def __contains__(self, element):
        return bool((self == element).any().item())

    def __format__(self, spec):
        if self._data.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __repr__(self):
        from corenn.tensor.printing import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    # -- dtype / device movement -----------------------------------------------------------
    def to(self, *args, **kwargs) -> "Tensor":
        """Convert dtype and/or move device: ``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``.

        Returns ``self`` when nothing changes (unless ``copy=True``), as in PyTorch.
        """
        target_device, target_dtype, copy = _parse_to_args(args, kwargs)
        from corenn.ops.movement import to_copy
        if target_device is not None:
            target_device = dispatch.resolve_device(target_device)
        same_device = target_device is None or target_device == self._device
        same_dtype = target_dtype is None or target_dtype is self.dtype
        if same_device and same_dtype and not copy:
            return self
        return to_copy(self, target_device if not same_device else None, target_dtype)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False) -> "Tensor":
        if device is None:
            device = "cuda"
        elif isinstance(device, int):
            device = f"cuda:{device}"
        return self.to(device)

    def type(self, dtype=None):
        if dtype is None:
            return f"corenn.{_TYPE_NAMES[self.dtype]}"
        if isinstance(dtype, type) and isinstance(getattr(dtype, "dtype", None), _dtype.dtype):
            dtype = dtype.dtype  # a legacy type: t.type(corenn.LongTensor)
        if isinstance(dtype, str):
            name = dtype.split(".")[-1]
            reverse = {v: k for k, v in _TYPE_NAMES.items()}
            if name not in reverse:
                raise ValueError(f"invalid type: {dtype!r}")
            dtype = reverse[name]
        return self.to(dtype)

    def type_as(self, other: "Tensor") -> "Tensor":
        if not isinstance(other, Tensor):
            raise _argcheck.not_tensors(other=other)
        return self.to(other.dtype)

    def float(self):
        return self.to(_dtype.float32)

    def double(self):
        return self.to(_dtype.float64)

    def half(self):
        return self.to(_dtype.float16)

    def share_memory_(self) -> "Tensor":
        """Move the data into shared memory, in place (``torch.Tensor.share_memory_``): see :mod:`corenn.multiprocessing`."""
        from corenn.multiprocessing import _sharing
        return _sharing.share_memory_tensor(self)

    def is_shared(self) -> bool:
        """Whether the data is in shared memory (``share_memory_``, or received from another process)."""
        from corenn.multiprocessing import _sharing
        return _sharing.is_shared(self)

    def bfloat16(self):
        return self.to(_dtype.low_precision_dtype("bfloat16"))

    def int(self):
        return self.to(_dtype.int32)

    def long(self):
        return self.to(_dtype.int64)

    def short(self):
        return self.to(_dtype.int16)

    def char(self):
        return self.to(_dtype.int8)

    def byte(self):
        return self.to(_dtype.uint8)

    def bool(self):
        return self.to(_dtype.bool_)

    # -- new_* constructors ------------------------------------------------------------------
    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return tensor(data, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        from corenn.tensor.creation import zeros
        return zeros(*size, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        from corenn.tensor.creation import ones
        return ones(*size, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        from corenn.tensor.creation import empty
        return empty(*size, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        from corenn.tensor.creation import full
        return full(size, fill_value, dtype=dtype or self.dtype, device=device or self._device,
                    requires_grad=requires_grad)

    # -- copying -------------------------------------------------------------------------------
    def __deepcopy__(self, memo):
        if self._grad_fn is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment. If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        if id(self) in memo:
            return memo[id(self)]
        new = object.__new__(type(self))
        memo[id(self)] = new
        new._data = self._data.copy()
        new._device = self._device
        new._grad_fn = None
        new._requires_grad = self._requires_grad
        new._output_nr = 0
        for key, value in self.__dict__.items():
            if key not in ("_hooks", "_retains_grad"):
                setattr(new, key, _copy.deepcopy(value, memo))
        return new

    def __reduce_ex__(self, protocol):
        # Pickled as host data (for worker processes and multiprocessing); the graph is not pickled.
        return (_rebuild_tensor, (type(self), self._host(), str(self._device), self._requires_grad,
                                  {k: v for k, v in self.__dict__.items()
                                   if k not in ("_grad", "_hooks", "_retains_grad")}))

    # -- in-place updates --------------------------------------------------------------------
    def _check_inplace(self) -> None:
        if self._requires_grad and self._grad_fn is None and _node.grad_mode.enabled:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")

    def _inplace_from(self, result: "Tensor") -> "Tensor":
        """Make ``self`` hold ``result`` (computed out of place), keeping self's dtype and identity.

        Without a graph to record, the values are written into self's array, so views and
        arrays shared with numpy see them. When autograd records, self is rebound to the
        result's array and node instead: the old array may be saved by a node for backward.
        """
        if result._data.dtype != self._data.dtype:
            result_dtype, own = _dtype._by_numpy[result._data.dtype], self.dtype
            if result_dtype.category > own.category:
                raise RuntimeError(_argcheck.named(f"result type {_TYPE_NAMES[result_dtype][:-6]} can't be cast to "
                                                   f"the desired output type {_TYPE_NAMES[own][:-6]}"))
        if result._requires_grad and _node.grad_mode.enabled:
            self._check_inplace()
            if result._data.dtype != self._data.dtype:
                result = result.to(self.dtype)
            if result._data.shape != self._data.shape:
                raise RuntimeError(f"output with shape {list(self._data.shape)} doesn't match the broadcast shape "
                                   f"{list(result._data.shape)}")
            self._data = result._data
            self._grad_fn = result._grad_fn
            self._output_nr = result._output_nr
            self._requires_grad = True
            return self
        self._write(result._data)
        return self

    def _write(self, array) -> None:
        target = self._data
        if array.shape != target.shape:
            try:
                array = self._device._xp.broadcast_to(array, target.shape)
            except ValueError:
                raise RuntimeError(_argcheck.named(f"output with shape {list(target.shape)} doesn't match the "
                                                   f"broadcast shape {list(array.shape)}")) from None
        try:
            self._device._xp.copyto(target, array, casting="unsafe")
        except ValueError as error:
            raise RuntimeError(f"cannot write into this tensor in place: {error} (is it an expanded view? "
                               "use .clone() first)") from None

    def copy_(self, src, non_blocking=False) -> "Tensor":
        """Copy ``src``'s values into this tensor (broadcasting, converting dtype and device)."""
        if not isinstance(src, Tensor):
            try:
                src = tensor(src)
            except (TypeError, ValueError):
                raise _argcheck.not_tensors(src=src) from None
        if src._device != self._device:
            src = src.to(self._device)
        if src._requires_grad and _node.grad_mode.enabled or (self._requires_grad and _node.grad_mode.enabled
                                                         and self._grad_fn is not None):
            from corenn.ops.elementwise import add
            expanded = src.to(self.dtype).expand(self.shape)
            return self._inplace_from(add(expanded, 0))
        self._check_inplace()
        self._write(src._data)
        return self

    def zero_(self) -> "Tensor":
        self._check_inplace()
        if self._grad_fn is not None and _node.grad_mode.enabled:
            return self._inplace_from(self * 0)
        self._data[...] = 0
        return self

    def fill_(self, value) -> "Tensor":
        self._check_inplace()
        if isinstance(value, Tensor) and value.ndim:
            raise RuntimeError(_argcheck.named(f"fill_ only supports 0-dimension value tensor but got tensor with "
                                               f"{value.ndim} dimensions."))
        value = _argcheck.check_number(value, "value")
        if self._grad_fn is not None and _node.grad_mode.enabled:
            return self._inplace_from(self * 0 + value)
        self._data[...] = value
        return self

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, index):
        from corenn.ops.movement import getitem
        return getitem(self, index)

    def __setitem__(self, index, value):
        from corenn.ops.movement import setitem
        setitem(self, index, value)

    # -- Python operators (each a corenn op) ---------------------------------------------------------
    # ``+ - * / **`` and unary ``-`` are the ops themselves (bound by ``corenn.ops._bind_methods``): one
    # call less on the hottest path. Addition and multiplication commute, dtype promotion included.

    # Every operator below answers NotImplemented for an operand that is not a tensor, a number or an
    # array (a list, a tuple, None, a string): Python then raises its TypeError, and ``t == (1, 2)`` is
    # False, as in PyTorch. (``+ - * / **`` are the ops, which raise that TypeError themselves.)
    def __rsub__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.rsub(self, other)

    def __rtruediv__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.div(other, self)  # div picks the float dtype before the scalar is converted

    def __floordiv__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.floor_divide(self, other)

    def __rfloordiv__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.floor_divide(_scalar_like(other, self), self)

    def __mod__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.remainder(self, other)

    def __rmod__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.remainder(_scalar_like(other, self), self)

    def __rpow__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.pow(_scalar_like(other, self), self)

    def __matmul__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.matmul(_as_tensor_for(other, self), self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.abs(self)

    def __invert__(self):
        return _ops.bitwise_not(self)

    def __and__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_and(self, other)

    __rand__ = __and__

    def __or__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_or(self, other)

    __ror__ = __or__

    def __xor__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_xor(self, other)

    __rxor__ = __xor__

    def __lshift__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_left_shift(self, other)

    def __rlshift__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_left_shift(_scalar_like(other, self), self)

    def __rshift__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_right_shift(self, other)

    def __rrshift__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.bitwise_right_shift(_scalar_like(other, self), self)

    def __eq__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.eq(self, other)

    def __ne__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.ne(self, other)

    def __lt__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.lt(self, other)

    def __le__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.le(self, other)

    def __gt__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.gt(self, other)

    def __ge__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return _ops.ge(self, other)

    # In-place operators: ``x += y`` is ``x.add_(y)``.
    def __iadd__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self.add_(other)

    def __isub__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self.sub_(other)

    def __imul__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self.mul_(other)

    def __itruediv__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self.div_(other)

    def __ifloordiv__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.floor_divide(self, other))

    def __imod__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.remainder(self, other))

    def __ipow__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self.pow_(other)

    def __imatmul__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.matmul(self, other))

    def __iand__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.bitwise_and(self, other))

    def __ior__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.bitwise_or(self, other))

    def __ixor__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.bitwise_xor(self, other))

    def __ilshift__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.bitwise_left_shift(self, other))

    def __irshift__(self, other):
        if not _is_operand(other):
            return NotImplemented
        return self._inplace_from(_ops.bitwise_right_shift(self, other))

    # Fast in-place arithmetic: when nothing is recorded, update the array directly.
    def add_(self, other, *, alpha=1):
        if _node.grad_mode.enabled and (self._requires_grad or getattr(other, "_requires_grad", False)):
            return self._inplace_from(_ops.add(self, other, alpha=alpha))
        return self._ufunc_inplace("add", other, alpha)

    def sub_(self, other, *, alpha=1):
        if _node.grad_mode.enabled and (self._requires_grad or getattr(other, "_requires_grad", False)):
            return self._inplace_from(_ops.sub(self, other, alpha=alpha))
        return self._ufunc_inplace("subtract", other, alpha)

    def mul_(self, other):
        if _node.grad_mode.enabled and (self._requires_grad or getattr(other, "_requires_grad", False)):
            return self._inplace_from(_ops.mul(self, other))
        return self._ufunc_inplace("multiply", other, 1)

    def div_(self, other, *, rounding_mode=None):
        if rounding_mode is not None or (_node.grad_mode.enabled and (
                self._requires_grad or getattr(other, "_requires_grad", False))) or not self.dtype.is_floating_point:
            return self._inplace_from(_ops.div(self, other, rounding_mode=rounding_mode))
        return self._ufunc_inplace("true_divide", other, 1)

    def _ufunc_inplace(self, name, other, alpha):
        if other.__class__ not in (int, float, bool) and not isinstance(other, Tensor):
            if isinstance(other, numbers.Number):
                other = _python_scalar(other)
            elif hasattr(other, "shape") and hasattr(other, "dtype"):
                other = tensor(other, device=self._device)  # an array operand: its own dtype, as in PyTorch
            else:
                raise TypeError(_argcheck.named(f"expected a Tensor or a number, got {_argcheck.type_name(other)}"))
        if isinstance(other, Tensor):
            if other._device is not self._device:
                if other._device.type != "cpu" or other._data.ndim != 0:
                    raise _node._device_mismatch(name, self._device, other._device)
                other = other.to(self._device)  # a 0-dim cpu tensor acts as a scalar
            other_dtype = other.dtype
            other = other._data
        else:
            if other.__class__ not in (float, int) and not isinstance(other, numbers.Number):
                raise TypeError(_argcheck.named(f"argument 'other' must be Tensor or a number, not "
                                                f"{_argcheck.type_name(other)}"))
            other_dtype = _dtype.scalar_dtype(other)
        if other_dtype.category > self.dtype.category:
            raise RuntimeError(_argcheck.named(f"result type {_TYPE_NAMES[other_dtype][:-6]} can't be cast to the "
                                               f"desired output type {_TYPE_NAMES[self.dtype][:-6]}"))
        if alpha != 1:
            if alpha.__class__ not in (float, int) and not isinstance(alpha, numbers.Number):
                raise TypeError(_argcheck.named(f"argument 'alpha' must be a number, not "
                                                f"{_argcheck.type_name(alpha)}"))
            other = other * alpha
        try:
            getattr(self._device._xp, name)(self._data, other, out=self._data, casting="unsafe")
        except ValueError as error:
            raise RuntimeError(_argcheck.named(f"in-place {name} failed for a tensor of shape "
                                               f"{list(self._data.shape)}: {error}")) from None
        return self

    def pow_(self, exponent):
        return self._inplace_from(_ops.pow(self, exponent))

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return self._inplace_from(_ops.addcmul(self, tensor1, tensor2, value=value))

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return self._inplace_from(_ops.addcdiv(self, tensor1, tensor2, value=value))

    def lerp_(self, end, weight):
        return self._inplace_from(_ops.lerp(self, end, weight))

    def clamp_(self, min=None, max=None):
        return self._inplace_from(_ops.clamp(self, min, max))

    clip_ = clamp_

    def masked_fill_(self, mask, value):
        return self._inplace_from(_ops.masked_fill(self, mask, value))

    def scatter_(self, dim, index, src=None, *, value=None, reduce=None):
        return self._inplace_from(_ops.scatter(self, dim, index, src if src is not None else value, reduce=reduce))

    def scatter_add_(self, dim, index, src):
        return self._inplace_from(_ops.scatter_add(self, dim, index, src))

    def index_add_(self, dim, index, source, *, alpha=1):
        return self._inplace_from(_ops.index_add(self, dim, index, source, alpha=alpha))

    def index_fill_(self, dim, index, value):
        return self._inplace_from(_ops.index_fill(self, dim, index, value))

    # Random fills (used by nn.init): values drawn from corenn's generator.
    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator=None):
        from corenn.tensor import random as _random
        return self._inplace_from(Tensor._wrap(_random.uniform_array(self, a, b, generator), self._device))

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        from corenn.tensor import random as _random
        return self._inplace_from(Tensor._wrap(_random.normal_array(self, mean, std, generator), self._device))

    def random_(self, from_=0, to=None, *, generator=None):
        from corenn.tensor import random as _random
        return self._inplace_from(Tensor._wrap(_random.random_array(self, from_, to, generator), self._device))

    def bernoulli_(self, p=0.5, *, generator=None):
        from corenn.tensor import random as _random
        return self._inplace_from(Tensor._wrap(_random.bernoulli_array(self, p, generator), self._device))

    def exponential_(self, lambd=1.0, *, generator=None):
        from corenn.tensor import random as _random
        return self._inplace_from(Tensor._wrap(_random.exponential_array(self, lambd, generator), self._device))

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator=None):
        from corenn.tensor import random as _random
        self._check_inplace()
        return self._inplace_from(Tensor._wrap(_random.cauchy_array(self, median, sigma, generator), self._device))

    def geometric_(self, p, *, generator=None):
        from corenn.tensor import random as _random
        self._check_inplace()
        return self._inplace_from(Tensor._wrap(_random.geometric_array(self, p, generator), self._device))

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator=None):
        from corenn.tensor import random as _random
        self._check_inplace()
        return self._inplace_from(Tensor._wrap(_random.log_normal_array(self, mean, std, generator), self._device))

    def bernoulli(self, p=None, *, generator=None) -> "Tensor":
        """0/1 samples, 1 with probability ``self`` (or ``p``) (``corenn.bernoulli(self, p)``)."""
        from corenn.tensor import random as _random
        return _random.bernoulli(self, p, generator=generator)

    def multinomial(self, num_samples, replacement=False, *, generator=None) -> "Tensor":
        """Category indices drawn with probabilities proportional to self's rows (``corenn.multinomial``)."""
        from corenn.tensor import random as _random
        return _random.multinomial(self, num_samples, replacement, generator=generator)

    # Python callables applied element by element, on the host (as slow as PyTorch says they are).
    def apply_(self, callable) -> "Tensor":
        """Replace each element ``x`` by ``callable(x)`` (a Python number), in place."""
        return self._map_elements("apply_", callable)

    def map_(self, tensor, callable) -> "Tensor":
        """Replace each element ``x`` by ``callable(x, y)``, ``y`` from ``tensor`` broadcast to self's shape."""
        return self._map_elements("map_", callable, tensor)

    def map2_(self, x, y, callable) -> "Tensor":
        """Replace each element ``s`` by ``callable(s, a, b)``, ``a`` and ``b`` from ``x`` and ``y`` broadcast."""
        return self._map_elements("map2_", callable, x, y)

    def _map_elements(self, name, function, *others) -> "Tensor":
        if self._requires_grad:
            raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use var.detach().{name}() "
                               "instead.")
        columns = [self._host().ravel().tolist()]
        for other in others:
            if not isinstance(other, Tensor):
                raise _argcheck.not_tensors(tensor=other)
            columns.append(other.detach().expand(self.shape)._host().ravel().tolist())
        kind = self._data.dtype.kind
        results = []
        for values in zip(*columns):
            result = function(*values)
            if not isinstance(result, numbers.Real):
                raise TypeError(f"must be real number, not {type(result).__name__}")
            results.append(bool(result) if kind == "b" else int(result) if kind in "iu" else float(result))
        self._write(tensor(np.array(results, dtype=self._data.dtype).reshape(self._data.shape),
                           device=self._device)._data)
        return self

    # In-place views: the tensor becomes a view of its own storage with another shape.
    def _inplace_view(self, result: "Tensor") -> "Tensor":
        self._check_inplace()
        self._data = result._data
        if result._requires_grad and _node.grad_mode.enabled:
            self._grad_fn = result._grad_fn
            self._output_nr = result._output_nr
        return self

    def t_(self) -> "Tensor":
        return self._inplace_view(_ops.t(self))

    def transpose_(self, dim0, dim1) -> "Tensor":
        return self._inplace_view(_ops.transpose(self, dim0, dim1))

    def swapaxes_(self, axis0, axis1) -> "Tensor":
        return self._inplace_view(_ops.transpose(self, axis0, axis1))

    def swapdims_(self, dim0, dim1) -> "Tensor":
        return self._inplace_view(_ops.transpose(self, dim0, dim1))

    def squeeze_(self, dim=None) -> "Tensor":
        return self._inplace_view(_ops.squeeze(self) if dim is None else _ops.squeeze(self, dim))

    def unsqueeze_(self, dim) -> "Tensor":
        return self._inplace_view(_ops.unsqueeze(self, dim))

    def float_power_(self, exponent) -> "Tensor":
        """In-place ``float_power``: the result is float64, so self must be float64 (PyTorch's rule)."""
        if self.dtype is not _dtype.float64:
            raise RuntimeError(f"the base given to float_power_ has dtype {_TYPE_NAMES[self.dtype][:-6]} but the "
                               "operation's result requires dtype Double")
        self._check_inplace()
        return self._inplace_from(_ops.float_power(self, exponent))

    def fill_diagonal_(self, fill_value, wrap=False) -> "Tensor":
        """Fill the main diagonal (all dimensions equal, or a matrix); ``wrap``: tall matrices restart it
        every ``columns + 1`` rows."""
        self._check_inplace()
        shape = self._data.shape
        if len(shape) < 2:
            raise RuntimeError("dimensions must larger than 1")
        if len(shape) > 2 and len(set(shape)) != 1:
            raise RuntimeError("all dimensions of input must be of equal length")
        mask = np.zeros(shape, dtype=bool)
        np.fill_diagonal(mask, True, wrap=wrap)
        mask = Tensor._wrap(self._device._xp.asarray(mask), self._device)
        return self._inplace_from(_ops.masked_fill(self, mask, _argcheck.check_number(fill_value, "fill_value")))

    # PyTorch lets these three write into a leaf that requires grad (they record nothing), unlike eq_ & co.
    def logical_and_(self, other) -> "Tensor":
        return self._inplace_from(_ops.logical_and(self, other))

    def logical_or_(self, other) -> "Tensor":
        return self._inplace_from(_ops.logical_or(self, other))

    def logical_xor_(self, other) -> "Tensor":
        return self._inplace_from(_ops.logical_xor(self, other))

    def conj_physical_(self) -> "Tensor":
        """Conjugate in place: nothing to change in a real tensor."""
        self._check_inplace()
        return self


_TYPE_NAMES = {
    _dtype.float16: "HalfTensor", _dtype.float32: "FloatTensor", _dtype.float64: "DoubleTensor",
    _dtype.int8: "CharTensor", _dtype.int16: "ShortTensor", _dtype.int32: "IntTensor", _dtype.int64: "LongTensor",
    _dtype.uint8: "ByteTensor", _dtype.bool_: "BoolTensor",
}


def _rebuild_tensor(cls, host_array, device_str, requires_grad, state):
    t = tensor(host_array, device=device_str)
    if cls is not Tensor:
        new = object.__new__(cls)
        for slot in ("_data", "_device", "_grad_fn", "_requires_grad", "_output_nr"):
            setattr(new, slot, getattr(t, slot))
        t = new
    t._requires_grad = requires_grad
    t.__dict__.update(state)
    return t


def _check_assigned_grad(t: Tensor, grad) -> None:
    """``t.grad = grad`` is allowed only for a tensor of t's device, shape and dtype (as PyTorch)."""
    if not isinstance(grad, Tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(grad).__name__}")
    if grad._device is not t._device:
        if grad._device.type != t._device.type:
            raise RuntimeError(f"attempting to assign a gradient with device type '{grad._device.type}' to a tensor "
                               f"with device type '{t._device.type}'. Please ensure that the gradient and the tensor "
                               "are on the same device")
        raise RuntimeError(f"attempting to assign a gradient located on device with index '{grad._device.index}' to a "
                           f"tensor located on device with index '{t._device.index}'. Please ensure that the "
                           "gradient and the tensor are on the same device")
    if grad._data.shape != t._data.shape:
        raise RuntimeError(f"attempting to assign a gradient of size '{list(grad._data.shape)}' to a tensor of size "
                           f"'{list(t._data.shape)}'. Please ensure that the gradient and the tensor are the same size")
    if grad._data.dtype != t._data.dtype:
        raise RuntimeError(f"attempting to assign a gradient with dtype '{grad.dtype}' to a tensor with dtype "
                           f"'{t.dtype}'. The gradient must match the tensor's dtype")


def _transpose_last(t: Tensor, name: str) -> Tensor:
    """``mH`` and ``adjoint()``: the last two dimensions swapped (conjugation is nothing for real dtypes)."""
    if t._data.ndim < 2:
        raise RuntimeError(f"{name} is only supported on matrices or batches of matrices. Got {t._data.ndim}-D "
                           "tensor.")
    return _ops.transpose(t, -2, -1)


def _normalize_dim(dim: int, ndim: int, argument: str = "dim") -> int:
    """``dim`` as an index in ``range(ndim)`` (a 0-d tensor takes dims 0 and -1); errors name the op and argument."""
    bound = max(ndim, 1)
    if dim.__class__ is not int:
        dim = _argcheck.check_int(dim, argument)
    if not -bound <= dim < bound:
        raise IndexError(_argcheck.named(
            f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], but got {dim})"))
    return dim + bound if dim < 0 else dim


def _is_operand(value) -> bool:
    """Whether a binary operator takes ``value``: a tensor, a number or an array; not a list or tuple (PyTorch)."""
    return isinstance(value, (Tensor, numbers.Number)) or (hasattr(value, "shape") and hasattr(value, "dtype"))


def _python_scalar(value):
    """A numpy scalar as the Python number it holds (PyTorch types ``np.int64(3)`` like ``3``)."""
    if value.__class__ in (int, float, bool) or not isinstance(value, numbers.Number):
        return value
    return value.item() if hasattr(value, "item") else value


def _scalar_like(value, like: Tensor) -> Tensor:
    """A Python scalar on the left of an operator, as a 0-d tensor of the dtype PyTorch would give."""
    value = _python_scalar(value)
    target = _dtype.dtype_with_scalar(like.dtype, value)
    if value.__class__ is int and target.category == 1:
        from corenn.ops._kernel import _wrap_integer  # uint8: -3 wraps to 253, as in PyTorch
        value = _wrap_integer(value, target)
    return Tensor._wrap(like._device._xp.asarray(value, dtype=target.numpy), like._device)


def _as_tensor_for(value, like: Tensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return tensor(value, device=like._device)


def _parse_to_args(args, kwargs):
    target_device = kwargs.pop("device", None)
    target_dtype = kwargs.pop("dtype", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, _dtype.dtype):
            target_dtype = arg
        elif isinstance(arg, Tensor):
            target_device, target_dtype = arg._device, arg.dtype
        elif isinstance(arg, (str, dispatch.device)):
            target_device = arg
        elif isinstance(arg, bool):
            continue  # non_blocking / copy passed positionally
        else:
            raise TypeError(f"to() received an invalid argument {arg!r}: expected a dtype, device, string or tensor")
    if target_device is not None:
        target_device = dispatch.device(target_device)
    if target_dtype is not None:
        _argcheck.check_dtype(target_dtype)
    return target_device, target_dtype, copy


def device_of_array(array) -> dispatch.device:
    """The device an array lives on: ``cpu`` for numpy, else asked of the backends."""
    if isinstance(array, np.ndarray):
        return _CPU
    for backend in dispatch.backends:
        if backend.type != "cpu" and isinstance(array, backend.xp.ndarray):
            return dispatch.device(backend.type, backend.array_device_index(array))
    raise TypeError(f"cannot tell the device of a {type(array).__name__}")


def _infer_array(data, xp, dtype=None):
    """Python data -> host array with PyTorch's default dtype choices, or in ``dtype`` when one is asked for.

    With a ``dtype``, Python numbers go straight to it: through the default float32 first, a
    float64 tensor of ``[1.000001]`` would hold float32's rounding of it.
    """
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, Tensor):
        return data._host()
    if isinstance(data, (list, tuple)):
        if any(isinstance(x, Tensor) for x in _flatten_first(data)):
            data = _tensors_to_values(data)
    array = np.asarray(data)
    if dtype is not None and array.dtype.kind in "biufc":
        return array.astype(dtype.numpy, copy=False)
    if array.dtype == np.float64 and not isinstance(data, np.generic):
        array = array.astype(_dtype.get_default_dtype().numpy)  # Python floats -> default dtype
    elif array.dtype.kind in "iu" and not isinstance(data, np.generic):
        array = array.astype(np.int64)
    elif array.dtype.kind == "O":
        raise TypeError(f"could not convert data of type {type(data).__name__} to a tensor: ragged nested sequences "
                        "or unsupported element types")
    elif array.dtype.kind in "US":
        raise TypeError(f"new(): invalid data type '{array.dtype.name}': corenn tensors hold numbers only")
    return array


def _flatten_first(data):
    while isinstance(data, (list, tuple)) and data:
        yield data[0]
        data = data[0]


def _tensors_to_values(data):
    if isinstance(data, Tensor):
        return data._host().tolist()
    if isinstance(data, (list, tuple)):
        return [_tensors_to_values(x) for x in data]
    return data


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False) -> Tensor:
    """Build a tensor by copying ``data`` (nested lists, numbers, numpy arrays, tensors).

    Python floats become the default dtype (float32), ints int64, bools bool;
    numpy arrays keep their dtype.

    Example::

        >>> corenn.tensor([[1, 2], [3, 4]])
        tensor([[1, 2],
                [3, 4]])
    """
    if isinstance(data, Tensor):
        import warnings
        warnings.warn("To copy construct from a tensor, it is recommended to use sourceTensor.clone().detach() or "
                      "sourceTensor.clone().detach().requires_grad_(True), rather than corenn.tensor(sourceTensor).",
                      UserWarning, stacklevel=2)
    target_device = dispatch.resolve_device(device) if device is not None else _CPU
    if dtype is not None and not isinstance(dtype, _dtype.dtype):
        raise TypeError(f"dtype must be a corenn.dtype such as corenn.float32, got {dtype!r}")
    host = _infer_array(data, None, dtype)
    if dtype is not None:
        host = host.astype(dtype.numpy, copy=False)
    else:
        _dtype.from_numpy(host.dtype)  # raises a clear TypeError for unsupported numpy dtypes
    if target_device is _CPU:
        array = np.array(host, copy=True)
    else:
        array = dispatch.get_backend(target_device.type).to_device(host, target_device.index)
    result = Tensor._wrap(array, target_device)
    if requires_grad:
        result.requires_grad_(True)
    return result


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor` but shares memory with numpy arrays and tensors when it can."""
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype) if (device or dtype) else data
    if isinstance(data, np.ndarray) and (device is None or dispatch.device(device) is _CPU):
        t = from_numpy(data)
        return t if dtype is None else t.to(dtype)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with ``array``: writes through one are seen by the other."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy(): expected np.ndarray (got {type(array).__name__})")
    _dtype.from_numpy(array.dtype)
    return Tensor._wrap(array, _CPU)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> int:
    if not isinstance(input, Tensor):
        raise _argcheck.not_tensors(input=input)
    return input.numel()


_ops = None  # corenn.ops, bound at import time by corenn/__init__ (the operators call into it)


class _PostAccumulateHandle(RemovableHandle):
    """Removes a post-accumulate-grad hook; with the tensor's last one gone, backward stops counting for it."""

    def __init__(self, hooks_dict: dict, tensor):
        super().__init__(hooks_dict)
        self._tensor_ref = weakref.ref(tensor)

    def remove(self) -> None:
        super().remove()
        tensor = self._tensor_ref()
        if tensor is not None and not tensor._post_accumulate_grad_hooks:
            from corenn.autograd import node
            node.post_accumulate_hooked.pop(id(tensor), None)

    def __getstate__(self):
        return super().__getstate__(), self._tensor_ref()

    def __setstate__(self, state) -> None:
        base, tensor = state
        super().__setstate__(base)
        self._tensor_ref = weakref.ref(tensor) if tensor is not None else (lambda: None)

