"""Bad input gets PyTorch's exception type and a message naming what was wrong."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import dispatch


def test_matmul_shape_mismatch_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        corenn.ones(2, 3) @ corenn.ones(4, 5)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        corenn.mm(corenn.ones(2, 3), corenn.ones(4, 5))
    with pytest.raises(RuntimeError, match=r"\[3\].*\[4\]"):
        corenn.ones(3) @ corenn.ones(4)
    with pytest.raises(RuntimeError, match=r"batch2 tensor to be: \[2, 4\] but got: \[3, 4\]"):
        corenn.bmm(corenn.ones(2, 3, 4), corenn.ones(3, 4, 5))


@pytest.mark.parametrize("op", [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, lambda a, b: a / b,
                                lambda a, b: corenn.maximum(a, b), lambda a, b: a < b,
                                lambda a, b: corenn.where(a > 0, a, b)])
def test_broadcasting_failure_names_both_shapes(op):
    with pytest.raises(RuntimeError, match=r"\[2, 3\] and \[4, 3\]|\[2, 3\].*\[4, 3\]|size of tensor a \(2\) must "
                                           r"match the size of tensor b \(4\)"):
        op(corenn.ones(2, 3), corenn.ones(4, 3))


def test_broadcasting_message_is_pytorchs():
    with pytest.raises(RuntimeError) as info:
        corenn.ones(2, 3) + corenn.ones(4, 3)
    message = str(info.value)
    assert "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0" in message
    assert "[2, 3]" in message and "[4, 3]" in message


@pytest.fixture
def second_device():
    """A second numpy-backed device type, registered the way a plugin registers one."""
    backend = dispatch.Backend(type="testdev", xp=np, to_device=lambda array, index: np.array(array),
                               to_host=lambda array: array, source="test_errors")
    dispatch.backends.register(backend)
    try:
        yield "testdev"
    finally:
        dispatch.backends.unregister("testdev")


def test_device_mismatch_names_both_devices(second_device):
    # numpy arrays can't tell the device apart, so build the foreign tensor by hand.
    other = corenn.Tensor._wrap(np.ones(3, dtype=np.float32), corenn.device(second_device))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, cpu and testdev"):
        corenn.ones(3) + other
    with pytest.raises(RuntimeError, match="cpu and testdev"):
        corenn.ones(3) @ other


def test_unknown_device_names_available_devices_and_plugin():
    with pytest.raises(RuntimeError, match="unknown device type 'tpu'; available devices: cpu"):
        corenn.zeros(2, device="tpu")
    if "cuda" not in dispatch.backends:
        with pytest.raises(RuntimeError, match="available devices: .*cpu.*corenn-cuda"):
            corenn.ones(2).to("cuda")
    with pytest.raises(RuntimeError, match="Invalid device string"):
        corenn.device("cuda:x")


def test_dtype_errors_name_the_dtypes():
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype, but got: corenn.float32 != "
                                           "corenn.float64"):
        corenn.ones(2, 3) @ corenn.ones(3, 2, dtype=corenn.float64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        corenn.ones(2, dtype=corenn.int64).add_(0.5)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks, but got mask with dtype "
                                           "corenn.float32"):
        corenn.ones(2).masked_fill(corenn.ones(2), 1.0)
    with pytest.raises(RuntimeError, match="Expected dtype int64 for index, got corenn.float32"):
        corenn.gather(corenn.ones(2, 3), 1, corenn.ones(2, 3))
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        corenn.ones(3)[corenn.tensor([1.5])]
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require gradients, got "
                                           "corenn.int64"):
        corenn.tensor([1]).requires_grad_()


def test_shape_errors():
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        corenn.ones(2, 3).view(4)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0. Expected size 3 "
                                           "but got size 4 for tensor number 1 in the list"):
        corenn.cat([corenn.ones(2, 3), corenn.ones(2, 4)])
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, but got \[2\] at entry 0 "
                                           r"and \[3\] at entry 1"):
        corenn.stack([corenn.ones(2), corenn.ones(3)])
    with pytest.raises(RuntimeError, match="The expanded size of the tensor \\(4\\) must match the existing size "
                                           "\\(2\\)"):
        corenn.ones(2, 3).expand(4, 3)
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(5\) must match the existing size "
                                           r"\(3\) at non-singleton dimension 1"):
        corenn.ones(2, 3).expand(4, 5)  # both dimensions mismatch: PyTorch checks from the last and names it
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got "
                                         r"5\)"):
        corenn.ones(2, 3).sum(5)
    with pytest.raises(RuntimeError, match="duplicate dims"):
        corenn.ones(2, 3).permute(0, 0)


def test_type_errors():
    with pytest.raises(TypeError):
        corenn.ones(2) + "a"
    with pytest.raises(TypeError, match="dtype must be a corenn.dtype"):
        corenn.zeros(2, dtype="float32")
    with pytest.raises(ValueError):
        corenn.tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="~ \\(bitwise_not\\) is only supported for integer and bool tensors"):
        ~corenn.ones(2)


def test_bad_input_loses_nothing():
    x = corenn.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError):
        x.add_(corenn.ones(3))
    assert x.tolist() == [1.0, 2.0]
    i = corenn.tensor([1, 2])
    with pytest.raises(RuntimeError):
        i.mul_(1.5)
    assert i.tolist() == [1, 2] and i.dtype is corenn.int64


@pytest.mark.parametrize("call, name", [(lambda: corenn.exp(2.0), "exp"), (lambda: corenn.relu(3), "relu"),
                                        (lambda: corenn.sum([1, 2]), "sum"),
                                        (lambda: corenn.tanh(None), "tanh")])
def test_a_non_tensor_input_is_a_type_error_naming_the_op(call, name):
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'input' must be Tensor, not"):
        call()
