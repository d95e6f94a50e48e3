"""One LSTM or GRU time step as one kernel: the hidden product, the gates and the new state(s).

Written from single ops, an LSTM step records about a dozen nodes (the product with
``W_hh``, an add, a split, three sigmoids, two tanhs, three multiplies, an add), and at the
small batches recurrent models train with, per-op bookkeeping is most of the time. Here the
step is one node: ``nn.LSTM``/``nn.LSTMCell`` and ``nn.GRU``/``nn.GRUCell`` call it once per
time step (the input projection of all time steps stays one matmul before the loop).

The kernel's op is ``lstm_cell(input_gates, h, c, w_hh, b_hh=None) -> (h_next, c_next)``
(:func:`lstm_step`), in PyTorch's gate order (input, forget, cell, output); :func:`lstm_cell`
is PyTorch's ``torch.lstm_cell(input, (h, c), w_ih, w_hh, b_ih, b_hh)`` on top of it::

    gates = input_gates + h @ w_hh.T + b_hh
    i, f, g, o = sigmoid(gates[:, :H]), sigmoid(gates[:, H:2H]), tanh(gates[:, 2H:3H]), sigmoid(gates[:, 3H:])
    c_next = f * c + i * g
    h_next = o * tanh(c_next)

and ``gru_cell(input_gates, h, w_hh, b_hh=None) -> h_next`` (:func:`gru_step`; :func:`gru_cell`
is ``torch.gru_cell``), gate order (reset, update, new), the reset gate applied after the
hidden product as PyTorch does::

    hidden = h @ w_hh.T + b_hh
    r, z = sigmoid(input_gates[:, :H] + hidden[:, :H]), sigmoid(input_gates[:, H:2H] + hidden[:, H:2H])
    n = tanh(input_gates[:, 2H:] + r * hidden[:, 2H:])
    h_next = (1 - z) * n + z * h
"""
from __future__ import annotations

import numpy as np

from corenn.ops._kernel import Op, check_tensor, kernel, run

__all__ = ["lstm_cell", "gru_cell"]


def _sigmoid(xp, x):
    # PyTorch's formula: exp(-x) overflows to inf for very negative x, and 1 / (1 + inf) is the right 0.
    with np.errstate(over="ignore"):
        return 1 / (1 + xp.exp(-x))


@kernel("lstm_cell", "LstmCellBackward0")
class LSTMCell(Op):
    num_outputs = 2

    @staticmethod
    def forward(ctx, input_gates, h, c, w_hh, b_hh=None):
        xp = ctx.xp
        gates = input_gates + h @ w_hh.T
        if b_hh is not None:
            gates += b_hh
        hidden = c.shape[-1]
        # One sigmoid over all four gates (the cell gate's is not used) costs less than three calls.
        activated = _sigmoid(xp, gates)
        activated[..., 2 * hidden:3 * hidden] = xp.tanh(gates[..., 2 * hidden:3 * hidden])
        in_gate, forget_gate = activated[..., :hidden], activated[..., hidden:2 * hidden]
        cell_gate, out_gate = activated[..., 2 * hidden:3 * hidden], activated[..., 3 * hidden:]
        c_next = forget_gate * c + in_gate * cell_gate
        tanh_c = xp.tanh(c_next)
        h_next = out_gate * tanh_c
        ctx.save_for_backward(h, c, w_hh, activated, tanh_c)
        ctx.has_bias = b_hh is not None
        return h_next, c_next

    @staticmethod
    def backward(ctx, grads):
        xp = ctx.xp
        h, c, w_hh, activated, tanh_c = ctx.saved
        hidden = c.shape[-1]
        in_gate, forget_gate = activated[..., :hidden], activated[..., hidden:2 * hidden]
        cell_gate, out_gate = activated[..., 2 * hidden:3 * hidden], activated[..., 3 * hidden:]
        grad_h_next, grad_c_next = grads
        # d c_next: what reaches it directly, plus what reaches it through h_next = o * tanh(c_next)
        grad_c = xp.zeros_like(c) if grad_c_next is None else grad_c_next
        grad_gates = xp.zeros_like(activated)  # the gates' pre-activations, laid out as the forward's gates
        if grad_h_next is not None:
            grad_c = grad_c + grad_h_next * out_gate * (1 - tanh_c * tanh_c)
            grad_gates[..., 3 * hidden:] = grad_h_next * tanh_c * out_gate * (1 - out_gate)
        else:
            grad_gates[..., 3 * hidden:] = 0
        grad_gates[..., :hidden] = grad_c * cell_gate * in_gate * (1 - in_gate)
        grad_gates[..., hidden:2 * hidden] = grad_c * c * forget_gate * (1 - forget_gate)
        grad_gates[..., 2 * hidden:3 * hidden] = grad_c * in_gate * (1 - cell_gate * cell_gate)
        need_gates, need_h, need_c, need_w, *need_b = ctx.needs_input_grad
        grad_w = None
        if need_w:
            grad_w = grad_gates.T @ h if h.ndim == 2 else xp.outer(grad_gates, h)  # one unbatched step: outer
        grad_b = None
        if ctx.has_bias and need_b[0]:
            grad_b = grad_gates.sum(axis=0) if grad_gates.ndim == 2 else grad_gates
        return (grad_gates if need_gates else None,
                grad_gates @ w_hh if need_h else None,
                grad_c * forget_gate if need_c else None,
                grad_w,
                *((grad_b,) if ctx.has_bias else ()))


@kernel("lstm_layer", "LstmLayerBackward0")
class LSTMLayer(Op):
    """Every time step of one LSTM layer and direction as one node (the path of sequences of equal length).

    The arithmetic is ``lstm_cell``'s, step after step. One node for all steps buys three things:
    no per-step node; each step's ufuncs write into arrays made once for the whole sequence
    (at recurrent models' small batches a call costs more than its arithmetic); and in the
    backward, every derivative that does not depend on the recurrence (the gates' own, through
    sigmoid and tanh) is computed for all steps at once before the loop, which then needs about
    eight calls a step, and the gradients of ``w_hh`` and ``b_hh`` are one product and one sum
    over all steps instead of T small products that autograd would then add up one by one.
    """

    num_outputs = 3

    @staticmethod
    def forward(ctx, input_gates, h0, c0, w_hh, b_hh=None):
        xp = ctx.xp
        steps, hidden = input_gates.shape[0], c0.shape[-1]
        i, f, g, o = (slice(k * hidden, (k + 1) * hidden) for k in range(4))
        gates_in = input_gates if b_hh is None else input_gates + b_hh  # the hidden bias, added once
        w_t = xp.ascontiguousarray(w_hh.T)
        hs = xp.empty((steps + 1,) + h0.shape, dtype=h0.dtype)  # h_{t-1} of every step, for the backward
        cs = xp.empty((steps + 1,) + c0.shape, dtype=c0.dtype)
        activated = xp.empty(input_gates.shape, dtype=input_gates.dtype)
        tanh_cs = xp.empty((steps,) + c0.shape, dtype=c0.dtype)
        gates = xp.empty(input_gates.shape[1:], dtype=input_gates.dtype)
        hs[0], cs[0] = h0, c0
        with np.errstate(over="ignore"):  # sigmoid's exp(-x) overflows to inf for very negative x: 1/inf is 0
            for t in range(steps):
                xp.matmul(hs[t], w_t, out=gates)
                gates += gates_in[t]
                act = activated[t]
                xp.negative(gates, out=act)      # one sigmoid over all four gates ...
                xp.exp(act, out=act)
                act += 1
                xp.divide(1, act, out=act)
                xp.tanh(gates[..., g], out=act[..., g])  # ... and tanh over the cell gate's
                xp.multiply(act[..., f], cs[t], out=cs[t + 1])
                cs[t + 1] += act[..., i] * act[..., g]
                xp.tanh(cs[t + 1], out=tanh_cs[t])
                xp.multiply(act[..., o], tanh_cs[t], out=hs[t + 1])
        ctx.save_for_backward(hs, cs, w_hh, activated, tanh_cs)
        ctx.has_bias = b_hh is not None
        # Copies: the outputs may be changed in place later, the saved states must not be.
        return hs[1:].copy(), hs[steps].copy(), cs[steps].copy()

    @staticmethod
    def backward(ctx, grads):
        xp = ctx.xp
        hs, cs, w_hh, activated, tanh_cs = ctx.saved
        grad_outputs, grad_h_last, grad_c_last = grads
        steps, hidden = activated.shape[0], cs.shape[-1]
        i, f, g, o = (slice(k * hidden, (k + 1) * hidden) for k in range(4))
        # What does not depend on the recurrence, for all steps at once: each gate's derivative times the
        # factor it meets (d c_t / d i = g, d c_t / d f = c_{t-1}, d c_t / d g = i, d h_t / d o = tanh c_t).
        factors = activated * (1 - activated)
        factors[..., g] = 1 - activated[..., g] * activated[..., g]
        factors[..., i] *= activated[..., g]
        factors[..., f] *= cs[:-1]
        factors[..., g] *= activated[..., i]
        factors[..., o] *= tanh_cs
        through_tanh = activated[..., o] * (1 - tanh_cs * tanh_cs)  # d h_t / d c_t
        grad_gates = xp.empty(activated.shape, dtype=activated.dtype)
        grad_h = xp.zeros(hs.shape[1:], dtype=hs.dtype) if grad_h_last is None else grad_h_last.copy()
        grad_c = xp.zeros(cs.shape[1:], dtype=cs.dtype) if grad_c_last is None else grad_c_last.copy()
        for t in range(steps - 1, -1, -1):
            if grad_outputs is not None:
                grad_h += grad_outputs[t]
            grad_c += grad_h * through_tanh[t]
            step_grads, factor = grad_gates[t], factors[t]
            xp.multiply(grad_h, factor[..., o], out=step_grads[..., o])
            for gate in (i, f, g):
                xp.multiply(grad_c, factor[..., gate], out=step_grads[..., gate])
            xp.matmul(step_grads, w_hh, out=grad_h)
            grad_c *= activated[t, ..., f]
        need_gates, need_h, need_c, need_w, *need_b = ctx.needs_input_grad
        rows = grad_gates.reshape(-1, grad_gates.shape[-1])
        grad_w = rows.T @ hs[:-1].reshape(-1, hs.shape[-1]) if need_w else None
        grad_b = rows.sum(axis=0) if ctx.has_bias and need_b[0] else None
        return (grad_gates if need_gates else None, grad_h if need_h else None, grad_c if need_c else None, grad_w,
                *((grad_b,) if ctx.has_bias else ()))


def lstm_layer(input_gates, h0, c0, w_hh, b_hh=None):
    """One LSTM layer and direction over a (T, N, 4H) sequence of input gates: ``(outputs, h_T, c_T)``.

    ``nn.LSTM``'s path for sequences of equal length (every batch, unless packed with varying
    lengths); the same arithmetic as ``lstm_step`` T times, in one node.
    """
    if b_hh is None:
        return run("lstm_layer", input_gates, h0, c0, w_hh)
    return run("lstm_layer", input_gates, h0, c0, w_hh, b_hh)


@kernel("gru_cell", "GruCellBackward0")
class GRUCell(Op):
    @staticmethod
    def forward(ctx, input_gates, h, w_hh, b_hh=None):
        xp = ctx.xp
        hidden_gates = h @ w_hh.T
        if b_hh is not None:
            hidden_gates += b_hh
        size = h.shape[-1]
        reset_update = _sigmoid(xp, input_gates[..., :2 * size] + hidden_gates[..., :2 * size])
        reset, update = reset_update[..., :size], reset_update[..., size:]
        hidden_new = hidden_gates[..., 2 * size:]
        new = xp.tanh(input_gates[..., 2 * size:] + reset * hidden_new)
        ctx.save_for_backward(h, w_hh, reset_update, new, hidden_new)
        ctx.has_bias = b_hh is not None
        return new + update * (h - new)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        h, w_hh, reset_update, new, hidden_new = ctx.saved
        size = h.shape[-1]
        reset, update = reset_update[..., :size], reset_update[..., size:]
        grad_new = grad * (1 - update) * (1 - new * new)  # through tanh
        grad_input_gates = xp.zeros(reset_update.shape[:-1] + (3 * size,), dtype=grad.dtype)
        grad_input_gates[..., :size] = grad_new * hidden_new * reset * (1 - reset)
        grad_input_gates[..., size:2 * size] = grad * (h - new) * update * (1 - update)
        grad_input_gates[..., 2 * size:] = grad_new
        # The hidden product's gradient: the same for reset and update, the reset-scaled one for new.
        grad_hidden_gates = grad_input_gates.copy()
        grad_hidden_gates[..., 2 * size:] *= reset
        need_gates, need_h, need_w, *need_b = ctx.needs_input_grad
        grad_w = None
        if need_w:
            grad_w = grad_hidden_gates.T @ h if h.ndim == 2 else xp.outer(grad_hidden_gates, h)
        grad_b = None
        if ctx.has_bias and need_b[0]:
            grad_b = grad_hidden_gates.sum(axis=0) if grad_hidden_gates.ndim == 2 else grad_hidden_gates
        return (grad_input_gates if need_gates else None,
                grad * update + grad_hidden_gates @ w_hh if need_h else None,
                grad_w,
                *((grad_b,) if ctx.has_bias else ()))


def lstm_step(input_gates, h, c, w_hh, b_hh=None):
    """One LSTM step, ``(h_next, c_next)``, from the input's gate pre-activations (``x @ w_ih.T + b_ih``).

    The building block of ``nn.LSTM`` and ``nn.LSTMCell``, which compute the input's gates of
    every time step in one product first. Tensors of one float dtype: ``input_gates`` (N, 4H),
    ``h`` (N, H'), ``c`` (N, H), ``w_hh`` (4H, H'), ``b_hh`` (4H,) or None.
    """
    if b_hh is None:
        return run("lstm_cell", input_gates, h, c, w_hh)
    return run("lstm_cell", input_gates, h, c, w_hh, b_hh)


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step from the input itself, ``(h_next, c_next)`` (``torch.lstm_cell``).

        >>> h, c = corenn.lstm_cell(corenn.randn(3, 5), (corenn.zeros(3, 4), corenn.zeros(3, 4)),
        ...                         corenn.randn(16, 5), corenn.randn(16, 4))
        >>> h.shape
        corenn.Size([3, 4])
    """
    from corenn.nn import functional as F
    if not isinstance(hx, (tuple, list)) or len(hx) != 2:
        raise TypeError(f"lstm_cell(): argument 'hx' must be a tuple of two tensors (h, c), got {type(hx).__name__}")
    h, c = hx
    _check_cell("lstm_cell", 4, input, {"hx[0]": h, "hx[1]": c}, w_ih, w_hh, b_ih, b_hh)
    return lstm_step(F.linear(input, w_ih, b_ih), h, c, w_hh, b_hh)


def gru_step(input_gates, h, w_hh, b_hh=None):
    """One GRU step, ``h_next``, from the input's gate pre-activations (``x @ w_ih.T + b_ih``).

    The building block of ``nn.GRU`` and ``nn.GRUCell``: ``input_gates`` (N, 3H), ``h`` (N, H),
    ``w_hh`` (3H, H), ``b_hh`` (3H,) or None, of one float dtype.
    """
    if b_hh is None:
        return run("gru_cell", input_gates, h, w_hh)
    return run("gru_cell", input_gates, h, w_hh, b_hh)


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    """One GRU step from the input itself, ``h_next`` (``torch.gru_cell``).

        >>> corenn.gru_cell(corenn.randn(3, 5), corenn.zeros(3, 4), corenn.randn(12, 5), corenn.randn(12, 4)).shape
        corenn.Size([3, 4])
    """
    from corenn.nn import functional as F
    _check_cell("gru_cell", 3, input, {"hx": hx}, w_ih, w_hh, b_ih, b_hh)
    return gru_step(F.linear(input, w_ih, b_ih), hx, w_hh, b_hh)


def _check_cell(function: str, gates: int, input, states: dict, w_ih, w_hh, b_ih, b_hh) -> None:
    """The argument checks of ``torch.lstm_cell`` / ``gru_cell``, with errors naming the function and argument."""
    check_tensor(input, "input", function)
    for name, state in states.items():
        check_tensor(state, name, function)
    check_tensor(w_ih, "w_ih", function)
    check_tensor(w_hh, "w_hh", function)
    biases = {name: b for name, b in (("b_ih", b_ih), ("b_hh", b_hh)) if b is not None}
    for name, bias in biases.items():
        check_tensor(bias, name, function)
    tensors = {"input": input, **states, "w_ih": w_ih, "w_hh": w_hh, **biases}
    if not input.dtype.is_floating_point or any(t.dtype != input.dtype for t in tensors.values()):
        raise RuntimeError(f"{function}(): expected input, hx and the weights to have one floating-point dtype, "
                           f"got {', '.join(f'{name} {t.dtype}' for name, t in tensors.items())}")
    if input.ndim not in (1, 2):
        raise ValueError(f"{function}(): expected 'input' to be 1D or 2D, got {input.ndim}D instead")
    hidden = next(iter(states.values())).shape[-1] if next(iter(states.values())).ndim else 0
    for name, state in states.items():
        if state.shape != input.shape[:-1] + (hidden,) or hidden == 0:
            raise RuntimeError(f"{function}(): argument '{name}' must have shape "
                               f"{tuple(input.shape[:-1]) + (hidden or 'hidden_size',)}, got {tuple(state.shape)}")
    expected = {"w_ih": (gates * hidden, input.shape[-1]), "w_hh": (gates * hidden, hidden),
                "b_ih": (gates * hidden,), "b_hh": (gates * hidden,)}
    for name, t in (("w_ih", w_ih), ("w_hh", w_hh), *biases.items()):
        if tuple(t.shape) != expected[name]:
            raise RuntimeError(f"{function}(): argument '{name}' must have shape {expected[name]} for input "
                               f"{tuple(input.shape)} and hidden size {hidden}, got {tuple(t.shape)}")
