"""``gradcheck``: analytical gradients against float64 central finite differences, on any device.

Every array the check makes (the one-hot ``grad_outputs`` of the analytical
Jacobian, the perturbed inputs of the numerical one) is made on the host and
moved to the inputs' device through the tensor API, and results come back through
the backend's ``to_host``: a device whose arrays are not numpy arrays (cupy, the
strict test device) is checked the same way as ``cpu``.
"""
from __future__ import annotations

import numpy as np


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck`` when analytical and numerical Jacobians differ."""


def _flat_outputs(func, inputs):
    from corenn.tensor.tensor import Tensor
    out = func(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor)]


def _on_device_of(host_array, like):
    """``host_array`` as a tensor on ``like``'s device (an explicit transfer through the backend)."""
    from corenn.tensor.tensor import tensor
    return tensor(host_array, device=like.device)


def _host64(t) -> np.ndarray:
    """A float64 host copy of tensor ``t`` (through its backend's ``to_host``)."""
    return np.array(t.detach()._host(), dtype=np.float64).reshape(-1)


def _evaluate(func, inputs, position, replacement, checked, no_grad):
    """The host values of outputs ``checked`` with input ``position`` replaced (no graph recorded)."""
    perturbed = list(inputs)
    perturbed[position] = replacement
    with no_grad():
        results = _flat_outputs(func, perturbed)
    return {out_index: _host64(results[out_index]) for out_index in checked}


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, raise_exception=True,
              nondet_tol: float = 0.0, check_undefined_grad=True, fast_mode=False) -> bool:
    """Compare ``func``'s autograd Jacobian with central differences, one input element at a time.

    Inputs that require grad should be float64 (a float32 check is too coarse to
    mean anything; it warns). Inputs may live on any device: perturbed copies and
    ``grad_outputs`` are made on the inputs' device, and the inputs themselves are
    never modified. Returns True, or raises ``GradcheckError`` naming the output,
    input and element that disagree and the largest error
    (``raise_exception=False`` returns False).

    Example::

        >>> x = corenn.randn(3, dtype=corenn.float64, requires_grad=True)
        >>> corenn.autograd.gradcheck(lambda t: (t * t).sum(), (x,))
        True
    """
    from corenn import autograd
    from corenn.autograd.grad_mode import no_grad
    from corenn.tensor.tensor import Tensor

    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    positions = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not positions:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    differentiable = [inputs[i] for i in positions]
    for t in differentiable:
        if t.dtype.name != "float64":
            import warnings
            warnings.warn(f"gradcheck: input of dtype {t.dtype} is not double precision; the check may fail "
                          "spuriously", UserWarning, stacklevel=2)

    outputs = _flat_outputs(func, inputs)
    checked = [j for j, out in enumerate(outputs) if out.requires_grad]

    # Analytical: one vector-Jacobian product per output element, seeded with a one-hot on the output's device.
    analytical = {}
    for out_index in checked:
        out = outputs[out_index]
        n_out = out.numel()
        columns = [np.zeros((t.numel(), n_out)) for t in differentiable]
        seed_dtype = np.dtype(out.dtype.name)
        for j in range(n_out):
            seed = np.zeros(n_out, dtype=seed_dtype)
            seed[j] = 1
            grads = autograd.grad(out, differentiable, _on_device_of(seed.reshape(tuple(out.shape)), out),
                                  retain_graph=True, allow_unused=True)
            for k, g in enumerate(grads):
                if g is not None:
                    columns[k][:, j] = _host64(g)
        analytical[out_index] = columns

    # Numerical: each input element moved by +-eps in a perturbed copy on the input's device.
    for k, (position, t) in enumerate(zip(positions, differentiable)):
        host = np.array(t.detach()._host(), copy=True)
        flat = host.reshape(-1)
        numerical = {out_index: np.zeros((t.numel(), outputs[out_index].numel())) for out_index in checked}

        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            plus = _evaluate(func, inputs, position, _on_device_of(host, t), checked, no_grad)
            flat[i] = original - eps
            minus = _evaluate(func, inputs, position, _on_device_of(host, t), checked, no_grad)
            flat[i] = original
            for out_index in checked:
                numerical[out_index][i] = (plus[out_index] - minus[out_index]) / (2 * eps)

        for out_index in checked:
            a, n = analytical[out_index][k], numerical[out_index]
            error = np.abs(a - n)
            close = error <= atol + rtol * np.abs(n)
            if not close.all():
                i, j = np.argwhere(~close)[0]
                message = (f"Jacobian mismatch for output {out_index} with respect to input {position},\n"
                           f"numerical:{n}\nanalytical:{a}\n"
                           f"first mismatch at input element {i}, output element {j}: "
                           f"numerical {n[i, j]:.8g} vs analytical {a[i, j]:.8g}; "
                           f"max abs error {error.max():.3g} (atol {atol:g}, rtol {rtol:g})")
                if raise_exception:
                    raise GradcheckError(message)
                return False
    return True
