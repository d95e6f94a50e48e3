"""The linear algebra the parametrizations need and the core does not have (yet).

``matrix_exp`` and ``householder_product`` are built from core ops (matmul, elementwise
arithmetic), so autograd differentiates them, and they run wherever those ops run.
``solve`` and the QR helpers call numpy's LAPACK on the host: a tensor on another
device makes one round trip per call. The QR helpers are used without autograd only
(initialising an orthogonal weight, assigning to one).

Example::

    >>> A = corenn.tensor([[0.0, 1.0], [-1.0, 0.0]])
    >>> Q = matrix_exp(A)                     # a rotation: Q.T @ Q is the identity
    >>> bool(corenn.allclose(Q.mT @ Q, corenn.eye(2), atol=1e-6))
    True
"""
from __future__ import annotations

import math

import numpy as np

import corenn

__all__ = ["matrix_exp", "solve", "householder_product", "geqrf", "make_orthogonal", "is_orthogonal"]

_MAX_TAYLOR_DEGREE = 18
# Half the machine epsilon of each floating dtype: where a Taylor series may stop.
_UNIT_ROUNDOFF = {corenn.float16: 2.0 ** -11, corenn.float32: 2.0 ** -24, corenn.float64: 2.0 ** -53}


def _host(tensor):
    """A numpy array holding ``tensor``'s values (the tensor's own array on the CPU: do not write to it)."""
    return tensor.detach().numpy(force=True)


def _to_tensor(array, like):
    return corenn.from_numpy(np.ascontiguousarray(array)).to(like.device)


def _check_square(function: str, argument: str, tensor) -> None:
    if not isinstance(tensor, corenn.Tensor):
        raise TypeError(f"{function}(): argument '{argument}' must be Tensor, not {type(tensor).__name__}")
    if tensor.ndim < 2 or tensor.shape[-1] != tensor.shape[-2]:
        raise RuntimeError(f"{function}(): argument '{argument}' must be a square matrix or a batch of square "
                           f"matrices, but got a tensor of shape {tuple(tensor.shape)}")
    if not tensor.dtype.is_floating_point:
        raise RuntimeError(f"{function}(): argument '{argument}' must be a floating point tensor, got {tensor.dtype}")


def _taylor_degree(norm: float, unit_roundoff: float) -> int:
    """The smallest Taylor degree whose first omitted term, norm**(m+1) / (m+1)!, is below the rounding error."""
    term = 1.0
    for degree in range(1, _MAX_TAYLOR_DEGREE + 1):
        term *= norm / (degree + 1)
        if term <= unit_roundoff:
            return degree
    return _MAX_TAYLOR_DEGREE


def _taylor(B, degree: int, identity):
    """sum_{j<=degree} B**j / j!, by Paterson-Stockmeyer: about 2*sqrt(degree) matmuls instead of degree."""
    block_size = math.isqrt(degree)
    if block_size * block_size < degree:
        block_size += 1
    powers = [identity, B]
    for _ in range(2, block_size + 1):
        powers.append(powers[-1] @ B)
    coefficients = [1.0 / math.factorial(j) for j in range(degree + 1)]
    result = None
    # Horner's rule in B**block_size over blocks of block_size terms each.
    for start in reversed(range(0, degree + 1, block_size)):
        block = None
        for i in range(min(block_size, degree + 1 - start)):
            term = powers[i] * coefficients[start + i]
            block = term if block is None else block + term
        result = block if result is None else result @ powers[block_size] + block
    return result


def matrix_exp(A):
    """The matrix exponential of a square matrix or a batch of them (``torch.matrix_exp``), differentiable.

    Scaling and squaring: ``A / 2**s`` has 1-norm at most 1, its Taylor series is summed to
    the dtype's rounding error (degree 18 at most) and squared ``s`` times.

    Example::

        >>> matrix_exp(corenn.zeros(2, 2))
        tensor([[1., 0.],
                [0., 1.]])
    """
    _check_square("matrix_exp", "A", A)
    n = A.shape[-1]
    identity = corenn.eye(n, dtype=A.dtype, device=A.device)
    norm = A.detach().abs().sum(-2).amax().item() if A.numel() else 0.0
    if not math.isfinite(norm):
        raise RuntimeError("matrix_exp(): argument 'A' contains inf or nan")
    squarings = max(0, math.ceil(math.log2(norm))) if norm > 1.0 else 0
    B = A / float(2 ** squarings) if squarings else A
    unit_roundoff = _UNIT_ROUNDOFF.get(A.dtype, _UNIT_ROUNDOFF[corenn.float64])
    result = _taylor(B, _taylor_degree(norm / 2 ** squarings, unit_roundoff), identity)
    for _ in range(squarings):
        result = result @ result
    return result


class _Solve(corenn.autograd.Function):
    """X with A @ X = B; forward on the host through LAPACK, backward from the same solve."""

    @staticmethod
    def forward(ctx, A, B):
        try:
            X = np.linalg.solve(_host(A), _host(B))
        except np.linalg.LinAlgError:
            raise RuntimeError("solve(): The solver failed because the input matrix 'A' is singular.") from None
        X = _to_tensor(X.astype(_host(B).dtype, copy=False), B)
        ctx.save_for_backward(A, X)
        return X

    @staticmethod
    def backward(ctx, grad_output):
        A, X = ctx.saved_tensors
        grad_B = _Solve.apply(A.mT, grad_output)
        return -(grad_B @ X.mT), grad_B


def solve(A, B):
    """The solution X of ``A @ X = B`` (``torch.linalg.solve`` with ``B`` a matrix or batch of matrices).

    Example::

        >>> solve(2 * corenn.eye(2), corenn.ones(2, 1))
        tensor([[0.5000],
                [0.5000]])
    """
    _check_square("solve", "A", A)
    if not isinstance(B, corenn.Tensor):
        raise TypeError(f"solve(): argument 'B' must be Tensor, not {type(B).__name__}")
    if B.ndim < 2 or B.shape[-2] != A.shape[-1]:
        raise RuntimeError(f"solve(): argument 'B' must be a matrix (or batch) with {A.shape[-1]} rows to match "
                           f"'A' of shape {tuple(A.shape)}, got shape {tuple(B.shape)}")
    if A.dtype != B.dtype:
        raise RuntimeError(f"solve(): expected 'A' and 'B' to have the same dtype, got {A.dtype} and {B.dtype}")
    return _Solve.apply(A, B)


def householder_product(A, tau):
    """The first ``k`` columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^T`` (``torch.linalg.householder_product``).

    ``v_i`` is column ``i`` of ``A`` below the diagonal with a 1 on it. Computed in one
    piece through the compact WY form ``I - V T V^T``, with ``T^-1 = triu(V^T V, 1) +
    diag(1 / tau)`` (Joffrain et al., "Accumulating Householder transformations,
    revisited"), so it differentiates through a handful of ops rather than a loop of k.

    Example::

        >>> householder_product(corenn.zeros(3, 2), corenn.zeros(2))   # no reflection at all
        tensor([[1., 0.],
                [0., 1.],
                [0., 0.]])
    """
    n, k = A.shape[-2], A.shape[-1]
    if k > n:
        raise RuntimeError(f"householder_product(): argument 'A' must have at least as many rows as columns, got "
                           f"shape {tuple(A.shape)}")
    if tau.shape[-1] != k:
        raise RuntimeError(f"householder_product(): argument 'tau' must have {k} elements in its last dimension, got "
                           f"shape {tuple(tau.shape)}")
    V = A.tril(-1) + corenn.eye(n, k, dtype=A.dtype, device=A.device)
    Vt = V.mT
    T_inverse = (Vt @ V).triu(1) + (1.0 / tau).unsqueeze(-1) * corenn.eye(k, dtype=A.dtype, device=A.device)
    return corenn.eye(n, k, dtype=A.dtype, device=A.device) - V @ solve(T_inverse, Vt[..., :k])


def geqrf(A):
    """``(reflectors, tau)`` of A's QR decomposition in LAPACK's compact form (``torch.geqrf``); no autograd.

    Example::

        >>> reflectors, tau = geqrf(corenn.eye(2))
    """
    array = _host(A)
    raw, tau = np.linalg.qr(array, mode="raw")
    return _to_tensor(np.swapaxes(raw, -1, -2).astype(array.dtype), A), _to_tensor(tau.astype(array.dtype), A)


def make_orthogonal(A):
    """Q of ``A = QR`` with ``diag(R) >= 0``, for a tall matrix (or batch) ``A``; no autograd.

    Example::

        >>> make_orthogonal(corenn.tensor([[2.0, 0.0], [0.0, -3.0]]))
        tensor([[ 1.,  0.],
                [ 0., -1.]])
    """
    array = _host(A)
    Q, R = np.linalg.qr(array)
    # QR is unique once diag(R) is made non-negative: flip the columns where it is negative.
    signs = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    return _to_tensor((Q * signs[..., None, :]).astype(array.dtype), A)


def is_orthogonal(Q) -> bool:
    """Whether ``Q^T Q`` is the identity to within ``10 * rows * eps`` (the test PyTorch's orthogonal uses).

    Example::

        >>> is_orthogonal(corenn.eye(3))
        True
    """
    n, k = Q.shape[-2], Q.shape[-1]
    array = _host(Q)
    tolerance = 10.0 * n * float(np.finfo(array.dtype).eps)
    gram = np.swapaxes(array, -1, -2) @ array
    return bool(np.allclose(gram, np.eye(k, dtype=array.dtype), atol=tolerance))
