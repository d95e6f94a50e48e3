"""PyTorch's legacy tensor types: ``corenn.FloatTensor``, ``corenn.LongTensor``, ... (CPU only).

Older programs build tensors with them (``torch.LongTensor([1, 2])``, ``torch.FloatTensor(3, 4)``)
and test types with them (``isinstance(t, torch.FloatTensor)``). Here each is a class whose
call makes an ordinary ``corenn.Tensor`` of its dtype and whose ``isinstance`` checks the
dtype: there is no tensor subclass per dtype.

    >>> import corenn
    >>> corenn.LongTensor([1, 2])
    tensor([1, 2])
    >>> isinstance(corenn.zeros(2), corenn.FloatTensor)
    True
"""
from __future__ import annotations

import numbers

from corenn import _dtype
from corenn.tensor.tensor import Tensor


class _LegacyTensorType(type):
    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, Tensor) and value.dtype == cls.dtype and value.device.type == "cpu"

    def __call__(cls, *args, device=None):
        from corenn.tensor import creation
        from corenn.tensor.tensor import tensor
        if device is not None and str(device) != "cpu":
            raise RuntimeError(f"legacy constructor expects device type: cpu but device type: {device} was passed")
        if not args:
            return creation.empty(0, dtype=cls.dtype)
        if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
            return creation.empty(*args, dtype=cls.dtype)  # sizes: an uninitialised tensor
        if len(args) == 1 and isinstance(args[0], Tensor):
            if args[0].dtype != cls.dtype:
                raise TypeError(f"expected {cls.dtype} (got {args[0].dtype})")
            return args[0]
        if len(args) == 1:
            if isinstance(args[0], tuple) and all(isinstance(a, numbers.Integral) for a in args[0]) and \
                    type(args[0]).__name__ == "Size":
                return creation.empty(*args[0], dtype=cls.dtype)
            return tensor(args[0], dtype=cls.dtype)  # data: a sequence, or an array
        raise TypeError(f"{cls.__name__}(): expected sizes (ints) or one sequence of data, got "
                        f"{', '.join(type(a).__name__ for a in args)}")

    def __repr__(cls):
        return f"<class 'corenn.{cls.__name__}'>"


def _legacy(name: str, dtype) -> type:
    return _LegacyTensorType(name, (), {"dtype": dtype, "__doc__": f"``corenn.{name}``: a {dtype} tensor (legacy)."})


FloatTensor = _legacy("FloatTensor", _dtype.float32)
DoubleTensor = _legacy("DoubleTensor", _dtype.float64)
HalfTensor = _legacy("HalfTensor", _dtype.float16)
LongTensor = _legacy("LongTensor", _dtype.int64)
IntTensor = _legacy("IntTensor", _dtype.int32)
ShortTensor = _legacy("ShortTensor", _dtype.int16)
CharTensor = _legacy("CharTensor", _dtype.int8)
ByteTensor = _legacy("ByteTensor", _dtype.uint8)
BoolTensor = _legacy("BoolTensor", _dtype.bool_)

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ShortTensor", "CharTensor",
           "ByteTensor", "BoolTensor"]
