"""``torch.linalg`` for corenn: norms, decompositions, inverses and solvers on batches of matrices.

Each function is PyTorch's, over corenn's differentiable linear-algebra ops (``corenn.det``,
``corenn.svd``, ...); ``LinAlgError`` is raised, as in PyTorch, for singular or not
positive-definite input.

    >>> import corenn
    >>> corenn.linalg.vector_norm(corenn.tensor([3.0, 4.0]))
    tensor(5.)
"""
from __future__ import annotations

import collections
import math

import corenn
from corenn._argcheck import named, not_tensors
from corenn.ops import linalg as _ops
from corenn.ops.linalg import LinAlgError

__all__ = ["LinAlgError", "norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "pinv", "solve", "svd",
           "svdvals", "qr", "eigh", "eigvalsh", "cholesky", "matrix_exp", "matrix_power", "matrix_rank", "cross",
           "multi_dot", "vecdot", "diagonal", "matmul"]

SlogdetResult = collections.namedtuple("slogdet", ["sign", "logabsdet"])
SvdResult = collections.namedtuple("svd", ["U", "S", "Vh"])
QrResult = collections.namedtuple("qr", ["Q", "R"])
EighResult = collections.namedtuple("eigh", ["eigenvalues", "eigenvectors"])


def _tensor(value, name):
    if not isinstance(value, corenn.Tensor):
        raise not_tensors(**{name: value})
    return value


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The ``ord``-norm of ``x`` over ``dim`` (all elements by default), as a vector norm."""
    _tensor(x, "x")
    if dim is None and not keepdim:
        x, dim = x.reshape(-1), 0
    return corenn.norm(x, p=ord, dim=dim, keepdim=keepdim, dtype=dtype)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """Frobenius, nuclear, 1, -1, inf, -inf, 2 or -2 norm of the matrices over ``dim``."""
    _tensor(A, "A")
    if A.ndim < 2:
        raise RuntimeError(named(f"linalg.matrix_norm: The input tensor A must have at least 2 dimensions."))
    if dtype is not None:
        A = A.to(dtype)
    rows, columns = (d % A.ndim for d in dim)
    if ord == "fro":
        return corenn.norm(A, p="fro", dim=(rows, columns), keepdim=keepdim)
    if ord == "nuc" or ord in (2, -2):
        moved = A.movedim((rows, columns), (-2, -1))
        singular = svdvals(moved)
        value = singular.sum(-1) if ord == "nuc" else singular.amax(-1) if ord == 2 else singular.amin(-1)
        return _keep(value, (rows, columns)) if keepdim else value
    if ord in (1, -1, math.inf, -math.inf):
        # 1: largest absolute column sum (sum over rows); inf: largest absolute row sum.
        summed_dim, reduced_dim = (rows, columns) if ord in (1, -1) else (columns, rows)
        sums = A.abs().sum(dim=summed_dim, keepdim=True)
        value = sums.amax(dim=reduced_dim, keepdim=True) if ord > 0 else sums.amin(dim=reduced_dim, keepdim=True)
        return value if keepdim else value.squeeze((rows, columns))
    raise RuntimeError(named(f"linalg.matrix_norm: Order {ord} not supported."))


def _keep(value, dims):
    for d in sorted(dims):
        value = value.unsqueeze(d)
    return value


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """``vector_norm`` or ``matrix_norm``, chosen as PyTorch chooses: by ``dim`` (one or two dims) and ``ord``."""
    _tensor(A, "A")
    if dim is not None and not isinstance(dim, int) and len(dim) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    if dim is None and ord is not None:
        if A.ndim == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
        if A.ndim != 1:
            raise RuntimeError(named("linalg.norm: If dim is not specified but ord is, the input must be 1D or "
                                     f"2D. Got {A.ndim}D."))
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def det(A):
    """Determinant of square matrices."""
    return corenn.det(A)


def slogdet(A):
    """``(sign, logabsdet)`` of the determinant of square matrices."""
    sign, logabsdet = corenn.slogdet(A)
    return SlogdetResult(sign, logabsdet)


def inv(A):
    """Inverse of square matrices; ``LinAlgError`` if one is singular."""
    return corenn.inverse(A)


def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """Moore-Penrose pseudo-inverse; singular values below ``rtol`` times the largest count as zero."""
    if atol is not None or hermitian:
        raise NotImplementedError(named("linalg.pinv: atol= and hermitian=True are not implemented in corenn "
                                        "(use rtol=)"))
    return corenn.pinverse(A, rcond=1e-15 if rtol is None else rtol)


def solve(A, B, *, left=True):
    """The solution ``X`` of ``A X = B`` (``X A = B`` with ``left=False``); ``LinAlgError`` if ``A`` is singular."""
    return _ops._linalg_solve(A, B, left=left)


def svd(A, full_matrices=True, *, driver=None):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``; ``full_matrices=False`` gives the reduced factors."""
    if driver is not None:
        raise NotImplementedError(named("linalg.svd: driver= is a cuSOLVER option; corenn has none"))
    U, S, V = corenn.svd(A, some=not full_matrices)
    return SvdResult(U, S, V.mT)


def svdvals(A, *, driver=None):
    """The singular values of ``A``, largest first."""
    if driver is not None:
        raise NotImplementedError(named("linalg.svdvals: driver= is a cuSOLVER option; corenn has none"))
    return corenn.svd(A, some=True)[1]


def qr(A, mode="reduced"):
    """``(Q, R)`` with orthonormal ``Q`` and upper-triangular ``R``; ``mode`` "reduced" or "r"."""
    _tensor(A, "A")
    if mode not in ("reduced", "r", "complete"):
        raise RuntimeError(named(f"linalg.qr: qr received unrecognized mode '{mode}' but expected one of "
                                 "'reduced' (default), 'r', or 'complete'"))
    if mode == "complete" and A.shape[-2] > A.shape[-1]:
        raise NotImplementedError(named("linalg.qr: mode='complete' of a tall matrix is not implemented in corenn"))
    Q, R = _ops.run("qr", A)
    return QrResult(corenn.empty(0, dtype=A.dtype) if mode == "r" else Q, R)


def eigh(A, UPLO="L"):
    """Eigenvalues (ascending) and orthonormal eigenvectors of symmetric matrices, read from the ``UPLO``
    triangle; the gradient is PyTorch's (symmetric)."""
    _ops._square(A, "linalg.eigh")
    if UPLO not in ("L", "U"):
        raise RuntimeError(named(f"linalg.eigh: Expected UPLO argument to be 'L' or 'U', but got {UPLO}"))
    values, vectors = _ops.run("eigh", A, UPLO=UPLO)
    return EighResult(values, vectors)


def eigvalsh(A, UPLO="L"):
    """The eigenvalues of symmetric matrices, ascending."""
    return eigh(A, UPLO).eigenvalues


def cholesky(A, *, upper=False):
    """The Cholesky factor of symmetric positive-definite matrices; ``LinAlgError`` otherwise."""
    return corenn.cholesky(A, upper=upper)


def matrix_exp(A):
    return corenn.matrix_exp(A)


def matrix_power(A, n):
    return corenn.matrix_power(A, n)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False):
    """How many singular values exceed ``max(atol, rtol * largest)`` (PyTorch's default rtol: eps * max(m, n))."""
    if hermitian:
        raise NotImplementedError(named("linalg.matrix_rank: hermitian=True is not implemented in corenn"))
    _tensor(A, "A")
    with corenn.no_grad():
        singular = svdvals(A)
        largest = singular.amax(-1, keepdim=True)
        eps = corenn.finfo(A.dtype).eps
        relative = eps * max(A.shape[-2:]) if rtol is None and (atol is None or atol == 0) else (rtol or 0.0)
        tolerance = (largest * relative).clamp_min(atol or 0.0)
        return (singular > tolerance).sum(-1)


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim`` (the last one by default)."""
    return corenn.cross(input, other, dim=dim)


def multi_dot(tensors):
    """The product of a chain of matrices (the first may be a vector, the last too), left to right."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) < 2:
        raise RuntimeError(named("linalg.multi_dot(): expected at least 2 tensors but got "
                                 f"{len(tensors) if isinstance(tensors, (list, tuple)) else tensors!r}"))
    result = tensors[0]
    for tensor in tensors[1:]:
        result = corenn.matmul(result, tensor)
    return result


def vecdot(x, y, *, dim=-1):
    """The dot product of vectors along ``dim``."""
    return (x * y).sum(dim)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    return corenn.diagonal(A, offset=offset, dim1=dim1, dim2=dim2)


def matmul(input, other):
    return corenn.matmul(input, other)
