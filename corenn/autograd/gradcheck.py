"""``gradcheck``: analytical gradients against float64 central finite differences."""
from __future__ import annotations

import numpy as np


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck`` when analytical and numerical Jacobians differ."""


def _tensors(inputs):
    from corenn.tensor.tensor import Tensor
    return [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]


def _flat_outputs(func, inputs):
    from corenn.tensor.tensor import Tensor
    out = func(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor)]


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, raise_exception=True,
              nondet_tol: float = 0.0, check_undefined_grad=True, fast_mode=False) -> bool:
    """Compare ``func``'s autograd Jacobian with central differences, one input element at a time.

    Inputs that require grad should be float64 (a warning-free float32 check is too
    coarse to mean anything). Returns True, or raises ``GradcheckError`` naming the
    output, input and element that disagree (``raise_exception=False`` returns False).
    """
    from corenn import autograd
    from corenn.autograd.grad_mode import no_grad
    from corenn.tensor.tensor import Tensor

    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    differentiable = _tensors(inputs)
    if not differentiable:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    for t in differentiable:
        if t.dtype.name != "float64":
            import warnings
            warnings.warn(f"gradcheck: input of dtype {t.dtype} is not double precision; the check may fail "
                          "spuriously", UserWarning, stacklevel=2)

    outputs = _flat_outputs(func, inputs)
    for out_index, out in enumerate(outputs):
        if not out.requires_grad:
            continue
        n_out = out.numel()
        # Analytical: one vector-Jacobian product per output element.
        analytical = [np.zeros((t.numel(), n_out)) for t in differentiable]
        for j in range(n_out):
            fresh = _flat_outputs(func, inputs)[out_index]
            seed = np.zeros(n_out, dtype=fresh._data.dtype)
            seed[j] = 1
            grads = autograd.grad(fresh, differentiable, Tensor._wrap(seed.reshape(fresh._data.shape)),
                                  allow_unused=True)
            for k, g in enumerate(grads):
                if g is not None:
                    analytical[k][:, j] = g._host().reshape(-1)
        # Numerical: perturb each input element in place (inputs are leaves).
        for k, t in enumerate(differentiable):
            data = t._data
            numerical = np.zeros((t.numel(), n_out))
            for i, position in enumerate(np.ndindex(data.shape)):
                original = data[position].item()
                with no_grad():
                    data[position] = original + eps
                    plus = _flat_outputs(func, inputs)[out_index]._host().astype(np.float64).reshape(-1)
                    data[position] = original - eps
                    minus = _flat_outputs(func, inputs)[out_index]._host().astype(np.float64).reshape(-1)
                    data[position] = original
                numerical[i] = (plus - minus) / (2 * eps)
            close = np.abs(analytical[k] - numerical) <= atol + rtol * np.abs(numerical)
            if not close.all():
                i, j = np.argwhere(~close)[0]
                message = (f"Jacobian mismatch for output {out_index} with respect to input {k},\n"
                           f"numerical:{numerical}\nanalytical:{analytical[k]}\n"
                           f"first mismatch at input element {i}, output element {j}: "
                           f"numerical {numerical[i, j]:.8g} vs analytical {analytical[k][i, j]:.8g}")
                if raise_exception:
                    raise GradcheckError(message)
                return False
    return True
