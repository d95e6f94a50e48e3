"""Tensors: the ``Tensor`` class, factories, random numbers and printing."""
from corenn.tensor.creation import *  # noqa: F401,F403
from corenn.tensor.random import *  # noqa: F401,F403
from corenn.tensor.tensor import Size, Tensor, as_tensor, from_numpy, is_tensor, numel, tensor  # noqa: F401
