"""Recurrent layers: RNN, LSTM, GRU and their single-step cells (mirrors ``torch.nn.modules.rnn``).

Written from the core's ops (``F.linear``, ``sigmoid``, ``tanh``, ``cat``), so autograd comes
for free. Two things keep the time loop short:

* each layer's input projection ``x @ W_ih^T + b_ih`` is one matmul over every time step at
  once; only ``h @ W_hh^T`` stays inside the loop, one matmul per step for all the gates;
* padded and packed input run through the same loop: a padded (T, N, *) batch is a packed
  one whose ``batch_sizes`` are all N. As sequences end, their rows leave the running state
  (sequences are sorted longest first, so the running rows are always a prefix).

Parameters carry PyTorch's names (``weight_ih_l0``, ``bias_hh_l1_reverse``, ``weight_hr_l0``)
in PyTorch's order, so state dicts move both ways.
"""
from __future__ import annotations

import math
import numbers
import warnings

import corenn
from corenn.module.module import Module
from corenn.module.parameter import Parameter
from corenn.nn import functional as F, init
from corenn.nn.utils.rnn import PackedSequence
from corenn.ops.recurrent import gru_step, lstm_layer, lstm_step
from corenn.tensor.tensor import Tensor

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---------------------------------------------------------------------------------------------------------
# One time step of each cell. ``input_gates`` is x @ W_ih^T + b_ih, already computed.
# ---------------------------------------------------------------------------------------------------------

def _rnn_tanh_step(input_gates, state, w_hh, b_hh, w_hr=None):
    return (corenn.tanh(input_gates + F.linear(state[0], w_hh, b_hh)),)


def _rnn_relu_step(input_gates, state, w_hh, b_hh, w_hr=None):
    return (F.relu(input_gates + F.linear(state[0], w_hh, b_hh)),)


def _lstm_step(input_gates, state, w_hh, b_hh, w_hr=None):
    # One node per step (corenn.ops.recurrent): the dozen ops of the gates cost more than their arithmetic.
    h, c = lstm_step(input_gates, state[0], state[1], w_hh, b_hh)
    if w_hr is not None:  # proj_size > 0: the hidden state is projected down
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(input_gates, state, w_hh, b_hh, w_hr=None):
    # One node per step (corenn.ops.recurrent); PyTorch applies the reset gate after the hidden matmul.
    return (gru_step(input_gates, state[0], w_hh, b_hh),)


_STEPS = {"RNN_TANH": _rnn_tanh_step, "RNN_RELU": _rnn_relu_step, "LSTM": _lstm_step, "GRU": _gru_step}


def _run_direction(step, input_gates, batch_sizes, initial, weights, reverse):
    """Run one direction of one layer over packed rows; returns (output rows, final state per sequence).

    ``input_gates`` holds ``sum(batch_sizes)`` rows, step after step; ``initial`` is a tuple of
    (N, *) states (h, or h and c). Forwards, finished sequences drop off the end of the running
    state and their final state is kept aside; backwards, sequences join as their last step comes.
    """
    if step is _lstm_step and weights[2] is None and len(set(batch_sizes)) == 1:
        # Sequences of one length, no projection: the whole direction is one lstm_layer node.
        gates = input_gates.reshape(len(batch_sizes), batch_sizes[0], input_gates.shape[-1])
        if reverse:
            gates = gates.flip(0)
        output, h, c = lstm_layer(gates, initial[0], initial[1], weights[0], weights[1])
        if reverse:
            output = output.flip(0)
        return output.reshape(-1, output.shape[-1]), (h, c)
    pieces = input_gates.split(batch_sizes) if len(batch_sizes) > 1 else [input_gates]
    outputs = [None] * len(batch_sizes)
    if not reverse:
        state, finished = initial, []
        for t, (piece, size) in enumerate(zip(pieces, batch_sizes)):
            if size < state[0].shape[0]:
                finished.append(tuple(s[size:] for s in state))
                state = tuple(s[:size] for s in state)
            state = step(piece, state, *weights)
            outputs[t] = state[0]
        if finished:
            finished.append(state)
            state = tuple(corenn.cat([part[i] for part in reversed(finished)]) for i in range(len(state)))
    else:
        state = tuple(s[:batch_sizes[-1]] for s in initial)
        for t in range(len(batch_sizes) - 1, -1, -1):
            size = batch_sizes[t]
            running = state[0].shape[0]
            if size > running:
                state = tuple(corenn.cat([s, s0[running:size]]) for s, s0 in zip(state, initial))
            state = step(pieces[t], state, *weights)
            outputs[t] = state[0]
    output = corenn.cat(outputs) if len(outputs) > 1 else outputs[0]
    return output, state


def run_layers(mode, data, batch_sizes, state0, layer_weights, num_layers, directions, dropout, train):
    """Every layer and direction of a recurrent network over packed rows ``data`` (``sum(batch_sizes)`` rows).

    ``state0`` holds the initial states, (layers * directions, N, size) each; ``layer_weights(layer,
    direction)`` gives ``((w_ih, b_ih), (w_hh, b_hh, w_hr))``. Returns the last layer's output rows and the
    final states, stacked as ``state0``. Dropout (``train``) goes between layers, as in PyTorch.
    """
    step = _STEPS[mode]
    finals = [[] for _ in state0]
    layer_input = data
    for layer in range(num_layers):
        if layer > 0 and dropout > 0 and train:
            layer_input = F.dropout(layer_input, dropout)
        outputs = []
        for direction in range(directions):
            (w_ih, b_ih), step_weights = layer_weights(layer, direction)
            index = layer * directions + direction
            input_gates = F.linear(layer_input, w_ih, b_ih)   # every time step in one matmul
            output, state = _run_direction(step, input_gates, batch_sizes, tuple(s[index] for s in state0),
                                           step_weights, reverse=direction == 1)
            outputs.append(output)
            for kept, s in zip(finals, state):
                kept.append(s)
        layer_input = outputs[0] if directions == 1 else corenn.cat(outputs, dim=-1)
    return layer_input, tuple(corenn.stack(kept) for kept in finals)


class RNNBase(Module):
    """Shared machinery of :class:`RNN`, :class:`LSTM` and :class:`GRU` (parameters, checks, the layer loop)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", stacklevel=2)
        for arg, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                                 ("input_size", input_size, int), ("hidden_size", hidden_size, int),
                                 ("num_layers", num_layers, int), ("proj_size", proj_size, int)):
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise TypeError(f"{name}: {arg} should be of type {kind.__name__}, got: {type(value).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden_size = proj_size if proj_size > 0 else hidden_size
        factory = dict(device=device, dtype=dtype)
        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            layer_input_size = input_size if layer == 0 else real_hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                shapes = {"weight_ih": (gate_size, layer_input_size), "weight_hh": (gate_size, real_hidden_size)}
                if bias:
                    shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
                if proj_size > 0:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                names = []
                for kind, shape in shapes.items():
                    setattr(self, kind + suffix, Parameter(corenn.empty(shape, **factory)))
                    names.append(kind + suffix)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """A no-op kept for ported code: cuDNN's flat weight buffer has no counterpart here."""

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """Per layer and direction, its parameters in PyTorch's order (w_ih, w_hh, b_ih, b_hh, w_hr)."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # -----------------------------------------------------------------------------------------------------
    # forward
    # -----------------------------------------------------------------------------------------------------

    def _layer_weights(self, layer: int, direction: int) -> tuple:
        """(w_ih, b_ih) for the input projection and (w_hh, b_hh, w_hr) for the step."""
        suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
        b_ih = getattr(self, "bias_ih" + suffix) if self.bias else None
        b_hh = getattr(self, "bias_hh" + suffix) if self.bias else None
        w_hr = getattr(self, "weight_hr" + suffix) if self.proj_size > 0 else None
        return (getattr(self, "weight_ih" + suffix), b_ih), (getattr(self, "weight_hh" + suffix), b_hh, w_hr)

    def _state_sizes(self) -> tuple:
        real_hidden_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (real_hidden_size, self.hidden_size) if self.mode == "LSTM" else (real_hidden_size,)

    def forward(self, input, hx=None):
        name = type(self).__name__
        is_lstm = self.mode == "LSTM"
        packed = isinstance(input, PackedSequence)
        sizes = self._state_sizes()
        directions = 2 if self.bidirectional else 1
        if packed:
            data, batch_sizes_tensor, sorted_indices, unsorted_indices = input
            batch_sizes = [int(n) for n in batch_sizes_tensor.tolist()]
            batch, batched = batch_sizes[0], True
            if data.ndim != 2:
                raise RuntimeError(f"input must have 2 dimensions, got {data.ndim}")
        else:
            if not isinstance(input, Tensor):
                raise TypeError(f"{name}.forward(): input must be a Tensor or a PackedSequence, got "
                                f"{type(input).__name__}")
            if input.ndim not in (2, 3):
                raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D tensor instead")
            batched = input.ndim == 3
            if not batched:
                input = input.unsqueeze(1)
            elif self.batch_first:
                input = input.transpose(0, 1)
            steps, batch = input.shape[0], input.shape[1]
            batch_sizes = [batch] * steps
            data = input.reshape(steps * batch, input.shape[2])
            sorted_indices = unsorted_indices = None
        if data.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{data.shape[-1]}")
        weight = self.weight_ih_l0
        if data.dtype != weight.dtype:
            raise ValueError(f"RNN input dtype ({data.dtype}) does not match weight dtype ({weight.dtype}). Convert "
                             f"input: input.to({weight.dtype}), or convert model: model.to({data.dtype})")

        # the initial state, as a tuple of (layers * directions, N, size) tensors
        if hx is None:
            state0 = tuple(corenn.zeros((self.num_layers * directions, batch, size), dtype=data.dtype,
                                        device=data.device) for size in sizes)
        else:
            state0 = tuple(hx) if is_lstm else (hx,)
            if is_lstm and len(state0) != 2:
                raise RuntimeError(f"{name}: hx must be a tuple (h_0, c_0), got {len(state0)} tensors")
            wanted = 3 if batched else 2
            if any(s.ndim != wanted for s in state0):
                got = ", ".join(f"{s.ndim}-D" for s in state0)
                what = "hx and cx" if is_lstm else "hx"
                raise RuntimeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, {what} should also "
                                   f"be {wanted}-D but got ({got}) tensor{'s' if is_lstm else ''}")
            if not batched:
                state0 = tuple(s.unsqueeze(1) for s in state0)
            labels = ("Expected hidden[0] size {}, got {}", "Expected hidden[1] size {}, got {}") if is_lstm \
                else ("Expected hidden size {}, got {}",)
            for s, size, label in zip(state0, sizes, labels):
                expected = (self.num_layers * directions, batch, size)
                if tuple(s.shape) != expected:
                    raise RuntimeError(label.format(expected, list(s.shape)))
            if sorted_indices is not None:
                state0 = tuple(s.index_select(1, sorted_indices) for s in state0)

        layer_input, state_n = run_layers(self.mode, data, batch_sizes, state0, self._layer_weights, self.num_layers,
                                          directions, self.dropout, self.training)

        if packed:
            if unsorted_indices is not None:
                state_n = tuple(s.index_select(1, unsorted_indices) for s in state_n)
            output = PackedSequence(layer_input, batch_sizes_tensor, sorted_indices, unsorted_indices)
        else:
            output = layer_input.reshape(len(batch_sizes), batch, layer_input.shape[-1])
            if not batched:
                output = output.squeeze(1)
                state_n = tuple(s.squeeze(1) for s in state_n)
            elif self.batch_first:
                output = output.transpose(0, 1)
        return output, (state_n if is_lstm else state_n[0])


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (``nonlinearity='relu'`` for ReLU).

    Arguments as PyTorch's: ``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``. Returns ``(output, h_n)``.

        >>> rnn = nn.RNN(10, 20, 2)
        >>> output, h_n = rnn(corenn.randn(5, 3, 10))
        >>> output.shape, h_n.shape
        (corenn.Size([5, 3, 20]), corenn.Size([2, 3, 20]))
    """

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:  # RNN's fourth positional argument is nonlinearity, before bias
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory over a sequence; gates ordered (input, forget, cell, output) as PyTorch's.

    ``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0)``. Returns ``(output, (h_n, c_n))``; with ``proj_size``
    the hidden state is projected by ``weight_hr_l{k}``.

        >>> lstm = nn.LSTM(28, 64, batch_first=True)
        >>> output, (h_n, c_n) = lstm(corenn.randn(4, 7, 28))
        >>> output.shape, h_n.shape
        (corenn.Size([4, 7, 64]), corenn.Size([1, 4, 64]))
    """

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit over a sequence; gates ordered (reset, update, new) as PyTorch's.

    ``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False)``. Returns ``(output, h_n)``.

        >>> gru = nn.GRU(10, 20, bidirectional=True)
        >>> output, h_n = gru(corenn.randn(5, 3, 10))
        >>> output.shape, h_n.shape
        (corenn.Size([5, 3, 40]), corenn.Size([2, 3, 20]))
    """

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Cells: one time step
# ---------------------------------------------------------------------------------------------------------

class RNNCellBase(Module):
    """Shared parameters and checks of the cells: ``weight_ih`` (G, in), ``weight_hh`` (G, H), biases (G)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        factory = dict(device=device, dtype=dtype)
        self.weight_ih = Parameter(corenn.empty((num_chunks * hidden_size, input_size), **factory))
        self.weight_hh = Parameter(corenn.empty((num_chunks * hidden_size, hidden_size), **factory))
        if bias:
            self.bias_ih = Parameter(corenn.empty(num_chunks * hidden_size, **factory))
            self.bias_hh = Parameter(corenn.empty(num_chunks * hidden_size, **factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _prepare(self, input, hx, state_count: int):
        """Checks; returns (batched input, tuple of batched states, whether the input was batched)."""
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}.forward(): input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} expected {self.input_size}")
        if hx is None:
            zeros = corenn.zeros((input.shape[0], self.hidden_size), dtype=input.dtype, device=input.device)
            return input, (zeros,) * state_count, batched
        states = tuple(hx) if state_count == 2 else (hx,)
        for s in states:
            if s.ndim != input.ndim:
                raise RuntimeError(f"{name}: Expected hidden state to be {input.ndim}D to match the input, got "
                                   f"{s.ndim}D instead")
        if not batched:
            states = tuple(s.unsqueeze(0) for s in states)
        for s in states:
            if tuple(s.shape) != (input.shape[0], self.hidden_size):
                raise RuntimeError(f"{name}: hidden state has shape {list(s.shape)}, expected "
                                   f"{[input.shape[0], self.hidden_size]}")
        return input, states, batched


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or ReLU).

        >>> cell = nn.RNNCell(10, 20)
        >>> cell(corenn.randn(3, 10)).shape
        corenn.Size([3, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        input, state, batched = self._prepare(input, hx, 1)
        step = _rnn_tanh_step if self.nonlinearity == "tanh" else _rnn_relu_step
        (h,) = step(F.linear(input, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step; returns ``(h', c')``.

        >>> cell = nn.LSTMCell(10, 20)
        >>> h, c = cell(corenn.randn(3, 10))
        >>> h.shape, c.shape
        (corenn.Size([3, 20]), corenn.Size([3, 20]))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, state, batched = self._prepare(input, hx, 2)
        h, c = _lstm_step(F.linear(input, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step.

        >>> cell = nn.GRUCell(10, 20)
        >>> cell(corenn.randn(3, 10)).shape
        corenn.Size([3, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, state, batched = self._prepare(input, hx, 1)
        (h,) = _gru_step(F.linear(input, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
