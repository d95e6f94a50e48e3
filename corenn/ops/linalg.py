"""Matrix products: matmul in all of PyTorch's 1-D/2-D/batched cases, mm, bmm, mv, dot, outer, einsum."""
from __future__ import annotations

import string

from corenn._argcheck import check_int, check_ints, check_number, named, not_tensors, type_name
from corenn.ops._kernel import Op, kernel, run, sum_to_shape
from corenn.tensor.tensor import Tensor
from corenn import _autocast


def _shape_str(shape):
    return "x".join(str(s) for s in shape)


@kernel("matmul", "MmBackward0")
class Matmul(Op):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        if a.dtype.kind == "V":  # bfloat16 (ml_dtypes): BLAS in float32, rounded once, as PyTorch's CPU kernels
            return ctx.xp.matmul(a.astype("float32"), b.astype("float32")).astype(a.dtype)
        return ctx.xp.matmul(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        if a.dtype.kind == "V":  # bfloat16: gradients in float32, each rounded once
            ctx.saved = (a.astype("float32"), b.astype("float32"))
            return tuple(g.astype(a.dtype) for g in Matmul.backward(ctx, grad.astype("float32")))
        xp = ctx.xp
        if a.ndim == 1 and b.ndim == 1:
            return grad * b, grad * a
        # Treat vectors as matrices (a: 1 x n, b: n x 1), then undo it on the gradients.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = grad
        if a.ndim == 1:
            g2 = xp.expand_dims(g2, -2)
        if b.ndim == 1:
            g2 = xp.expand_dims(g2, -1)
        grad_a = xp.matmul(g2, xp.swapaxes(b2, -1, -2))
        grad_b = xp.matmul(xp.swapaxes(a2, -1, -2), g2)
        grad_a = sum_to_shape(grad_a, a2.shape).reshape(a.shape)
        grad_b = sum_to_shape(grad_b, b2.shape).reshape(b.shape)
        return grad_a, grad_b


def _check_matmul(a, b, op="matmul"):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise not_tensors(input=a, other=b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(named(f"both arguments to {op} need to be at least 1D, but they are {a.ndim}D and "
                                 f"{b.ndim}D"))
    if a.dtype is not b.dtype:
        raise RuntimeError(named(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}"))
    inner_a = a.shape[-1]
    inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if inner_a != inner_b:
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError(named(f"inconsistent tensor size, expected tensor [{inner_a}] and src [{inner_b}] to "
                                     f"have the same number of elements, but got {inner_a} and {inner_b} elements "
                                     "respectively"))
        raise RuntimeError(named("mat1 and mat2 shapes cannot be multiplied "
                                 f"({_shape_str(a.shape if a.ndim > 1 else (1, inner_a))} and "
                                 f"{_shape_str(b.shape if b.ndim > 1 else (inner_b, 1))})"))


@_autocast.autocast_op(_autocast.LOWER)
def matmul(input, other):
    """Matrix product with PyTorch's rules for 1-D, 2-D, batched and broadcast operands (``torch.matmul``)."""
    _check_matmul(input, other)
    try:
        result = run("matmul", input, other)
    except ValueError:
        raise RuntimeError(named(f"batch dimensions of {list(input.shape)} and {list(other.shape)} cannot be broadcast "
                                 "together")) from None
    fn = result._grad_fn
    if fn is not None:
        if input.ndim == 1 and other.ndim == 1:
            fn.grad_fn_name = "DotBackward0"
        elif input.ndim == 2 and other.ndim == 1:
            fn.grad_fn_name = "MvBackward0"
        elif input.ndim > 2 or other.ndim > 2:
            fn.grad_fn_name = "BmmBackward0" if input.ndim == other.ndim == 3 else "UnsafeViewBackward0"
    return result


@_autocast.autocast_op(_autocast.LOWER)
def mm(input, mat2):
    """Product of two matrices (2-D only; ``torch.mm``)."""
    if not (isinstance(input, Tensor) and isinstance(mat2, Tensor)):
        raise not_tensors(input=input, mat2=mat2)
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(named(f"expected 2D tensors, got {input.ndim}D and {mat2.ndim}D", "mm"))
    return matmul(input, mat2)


@_autocast.autocast_op(_autocast.LOWER)
def bmm(input, mat2):
    """Batched product of 3-D tensors with equal batch sizes (``torch.bmm``)."""
    if not (isinstance(input, Tensor) and isinstance(mat2, Tensor)):
        raise not_tensors(input=input, mat2=mat2)
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(named(f"batch1 must be a 3D tensor, got {input.ndim}D and {mat2.ndim}D"))
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise RuntimeError(named(f"Expected size for first two dimensions of batch2 tensor to be: [{input.shape[0]}, "
                                 f"{input.shape[2]}] but got: [{mat2.shape[0]}, {mat2.shape[1]}]."))
    return matmul(input, mat2)


def mv(input, vec):
    if not (isinstance(input, Tensor) and isinstance(vec, Tensor)):
        raise not_tensors(input=input, vec=vec)
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(named(f"vector + matrix @ vector expected, got {input.ndim}, {vec.ndim}"))
    return matmul(input, vec)


def dot(input, other):
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(named(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors"))
    return matmul(input, other)


inner = dot


def outer(input, vec2):
    """``input[:, None] * vec2[None, :]``."""
    if not (isinstance(input, Tensor) and isinstance(vec2, Tensor)):
        raise not_tensors(input=input, vec2=vec2)
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


ger = outer


@_autocast.autocast_op(_autocast.LOWER)
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    if not (isinstance(input, Tensor) and isinstance(mat1, Tensor) and isinstance(mat2, Tensor)):
        raise not_tensors(input=input, mat1=mat1, mat2=mat2)
    alpha, beta = check_number(alpha, "alpha"), check_number(beta, "beta")
    product = mm(mat1, mat2)
    if alpha != 1:
        product = product * alpha
    return product + (input if beta == 1 else input * beta)


@_autocast.autocast_op(_autocast.LOWER)
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    if not (isinstance(input, Tensor) and isinstance(batch1, Tensor) and isinstance(batch2, Tensor)):
        raise not_tensors(input=input, batch1=batch1, batch2=batch2)
    alpha, beta = check_number(alpha, "alpha"), check_number(beta, "beta")
    product = bmm(batch1, batch2)
    if alpha != 1:
        product = product * alpha
    return product + (input if beta == 1 else input * beta)


# ---------------------------------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------------------------------

def _expand_ellipsis(equation, shapes):
    """Rewrite '...' into explicit letters so that backward can build its own equations."""
    if "->" in equation:
        inputs, output = equation.split("->")
    else:
        inputs, output = equation, None
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise RuntimeError(f"einsum(): {len(terms)} subscripts for {len(shapes)} operands in {equation!r}")
    used = set(equation)
    spare = [c for c in string.ascii_letters if c not in used]
    widest = 0
    for term, shape in zip(terms, shapes):
        if "..." in term:
            widest = max(widest, len(shape) - (len(term) - 3))
    ellipsis_letters = "".join(spare[:widest])
    expanded = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            n = len(shape) - (len(term) - 3)
            term = term.replace("...", ellipsis_letters[widest - n:])
        expanded.append(term)
    if output is None:
        counts = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        output = ellipsis_letters + "".join(sorted(c for c, n in counts.items()
                                                   if n == 1 and c not in ellipsis_letters))
    else:
        output = output.replace("...", ellipsis_letters)
    return expanded, output


@kernel("einsum", "EinsumBackward0")
class Einsum(Op):
    @staticmethod
    def forward(ctx, *operands, terms, output):
        low_precision = operands[0].dtype if operands and operands[0].dtype.kind == "V" else None
        if low_precision is not None:  # bfloat16: numpy's einsum has no loop for it; float32, rounded once
            operands = tuple(o.astype("float32") for o in operands)
        ctx.save_for_backward(*operands)
        ctx.terms, ctx.output, ctx.low_precision = terms, output, low_precision
        out = ctx.xp.einsum(",".join(terms) + "->" + output, *operands)
        return out if low_precision is None else out.astype(low_precision)

    @staticmethod
    def backward(ctx, grad):
        if ctx.low_precision is not None:
            low_precision, ctx.low_precision = ctx.low_precision, None
            grads = Einsum.backward(ctx, grad.astype("float32"))
            return tuple(None if g is None else g.astype(low_precision) for g in grads)
        operands = ctx.saved
        xp = ctx.xp
        grads = []
        for i, (term, operand) in enumerate(zip(ctx.terms, operands)):
            # A repeated letter ('ii') reads a diagonal: take the gradient of the distinct
            # letters first, then place it back on that diagonal.
            unique = "".join(dict.fromkeys(term))
            unique_shape = tuple(operand.shape[term.index(c)] for c in unique)
            others = [(t, o) for j, (t, o) in enumerate(zip(ctx.terms, operands)) if j != i]
            available = set(ctx.output).union(*[set(t) for t, _ in others])
            kept = "".join(c for c in unique if c in available)
            equation = ",".join([ctx.output] + [t for t, _ in others]) + "->" + kept
            g = xp.einsum(equation, grad, *[o for _, o in others])
            if kept != unique:  # letters summed inside this operand alone: broadcast back
                shape = [unique_shape[unique.index(c)] if c in kept else 1 for c in unique]
                g = xp.broadcast_to(g.reshape(shape), unique_shape)
            if unique != term:
                g = _onto_diagonals(xp, g, unique, term, operand)
            grads.append(g)
        return tuple(grads)


def _onto_diagonals(xp, grad, unique, term, operand):
    """Spread ``grad`` (subscripts ``unique``) onto the diagonals of an operand with subscripts ``term``."""
    spare = iter(c for c in string.ascii_letters if c not in term)
    renamed, deltas, seen = "", [], set()
    for c, size in zip(term, operand.shape):
        if c in seen:  # a later occurrence: a fresh letter tied to the first by an identity matrix
            fresh = next(spare)
            deltas.append((c + fresh, xp.eye(size, dtype=grad.dtype)))
            renamed += fresh
        else:
            seen.add(c)
            renamed += c
    equation = ",".join([unique] + [t for t, _ in deltas]) + "->" + renamed
    return xp.einsum(equation, grad, *[d for _, d in deltas])


@_autocast.autocast_op(_autocast.LOWER)
def einsum(equation, *operands):
    """Einstein summation, e.g. ``einsum('bij,bjk->bik', a, b)`` (``torch.einsum``)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise TypeError(named(f"argument 'equation' must be str, not {type_name(equation)}"))
    for i, operand in enumerate(operands):
        if not isinstance(operand, Tensor):
            raise TypeError(named(f"expected Tensor as element {i} in argument 'operands', but got "
                                  f"{type_name(operand)}"))
    equation = equation.replace(" ", "")
    terms, output = _expand_ellipsis(equation, [o.shape for o in operands])
    for term, operand in zip(terms, operands):
        if len(term) != operand.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(term)}) does not match the "
                               f"number of dimensions ({operand.ndim}) for operand {list(operands).index(operand)}")
    return run("einsum", *operands, terms=tuple(terms), output=output)


# ---------------------------------------------------------------------------------------------------------
# Decompositions, inverses and determinants (numpy.linalg through the backend; LU and the matrix exponential,
# which numpy lacks, are written here)
# ---------------------------------------------------------------------------------------------------------

class LinAlgError(RuntimeError):
    """A matrix the decomposition cannot handle (singular, not positive-definite), as ``torch.linalg.LinAlgError``."""


def _mT(xp, a):
    return xp.swapaxes(a, -1, -2)


def _square(input, op, argument="A"):
    """PyTorch's checks for ops on batches of square floating matrices."""
    if not isinstance(input, Tensor):
        raise not_tensors(**{argument: input})
    if input.ndim < 2:
        raise RuntimeError(named(f"{op}: The input tensor {argument} must have at least 2 dimensions."))
    if input.shape[-1] != input.shape[-2]:
        raise RuntimeError(named(f"{op}: {argument} must be batches of square matrices, but they are {input.shape[-2]} "
                                 f"by {input.shape[-1]} matrices"))
    _floating(input, op)
    return input


def _floating(input, op):
    if not input.dtype.is_floating_point:
        raise RuntimeError(named(f"{op}: Expected a floating point or complex tensor as input. Got "
                                 f"{_TYPE_NAMES.get(input.dtype.name, input.dtype.name)}"))


_TYPE_NAMES = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _singular_error(xp, a, op):
    """The LinAlgError naming the first zero pivot, as LAPACK reports it (1-based)."""
    _, pivots_info = _lu_factor(xp, a.astype("float64"))
    order = pivots_info.max().item() if pivots_info.size else 1
    return LinAlgError(f"{op}: The diagonal element {order} is zero, the inversion could not be completed because the "
                       "input matrix is singular.")


def _cofactor(xp, a):
    """det(A) * inv(A)^T, the derivative of det, through the SVD so that singular matrices work too."""
    u, s, vh = xp.linalg.svd(a)
    n = s.shape[-1]
    ones = xp.ones(s.shape[:-1] + (1,), dtype=s.dtype)
    prefix = xp.cumprod(xp.concatenate([ones, s[..., :n - 1]], axis=-1), axis=-1)
    suffix = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(s, -1)[..., :n - 1]], axis=-1), axis=-1), -1)
    signs = xp.linalg.det(u) * xp.linalg.det(vh)
    return xp.matmul(u * (prefix * suffix)[..., None, :], vh) * signs[..., None, None]


@kernel("det", "LinalgDetBackward0")  # the true derivative at singular matrices too (PyTorch's is 0 there)
class Det(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return ctx.xp.linalg.det(a).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved
        return grad[..., None, None] * _cofactor(ctx.xp, a).astype(a.dtype, copy=False)


def det(input):
    """Determinant of a square matrix or a batch of them (``torch.det``).

    Example::

        >>> corenn.det(corenn.tensor([[2.0, 1.0], [1.0, 3.0]]))
        tensor(5.)
    """
    return run("det", _square(input, "linalg.det"))


@kernel("slogdet", "LinalgSlogdetBackward0")
class Slogdet(Op):
    num_outputs = 2
    differentiable_outputs = (False, True)

    @staticmethod
    def forward(ctx, a):
        sign, logabsdet = ctx.xp.linalg.slogdet(a)
        ctx.save_for_backward(a)
        return sign.astype(a.dtype, copy=False), logabsdet.astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, grads):
        (a,) = ctx.saved
        grad = grads[1]
        # d log|det A| = inv(A)^T; PyTorch's backward needs A invertible too (a singular A gives inf/nan).
        return grad[..., None, None] * _mT(ctx.xp, ctx.xp.linalg.inv(a))


def slogdet(input):
    """``(sign, logabsdet)`` of the determinant (``torch.slogdet``); the sign carries no gradient."""
    from corenn.ops.reduce import return_types
    sign, logabsdet = run("slogdet", _square(input, "linalg.slogdet"))
    return return_types.slogdet(sign, logabsdet)


def logdet(input):
    """``log(det(input))``: nan for a negative determinant, -inf for zero (``torch.logdet``)."""
    from corenn.ops.elementwise import log
    sign, logabsdet = slogdet(_square(input, "logdet"))
    return logabsdet + log(sign)


@kernel("inverse", "LinalgInvExBackward0")
class Inverse(Op):
    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        try:
            out = xp.linalg.inv(a)
        except ValueError:  # numpy's (and cupy's) LinAlgError is a ValueError
            raise _singular_error(xp, a, "linalg.inv") from None
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (inverse_,) = ctx.saved
        xp = ctx.xp
        transposed = _mT(xp, inverse_)
        return -xp.matmul(xp.matmul(transposed, grad), transposed)


def inverse(input):
    """The inverse of a square matrix or a batch of them; LinAlgError (a RuntimeError) if singular.

    Example::

        >>> corenn.inverse(corenn.tensor([[2.0, 0.0], [0.0, 4.0]]))
        tensor([[0.5000, 0.0000],
                [0.0000, 0.2500]])
    """
    return run("inverse", _square(input, "linalg.inv"))


@kernel("linalg_solve", "LinalgSolveExBackward0")
class Solve(Op):
    """``X = A^-1 B`` for batches of square ``A`` and matrix right-hand sides ``B`` (batch dims broadcast)."""

    @staticmethod
    def forward(ctx, a, b):
        xp = ctx.xp
        batch = xp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        try:
            out = xp.linalg.solve(xp.broadcast_to(a, batch + a.shape[-2:]), xp.broadcast_to(b, batch + b.shape[-2:]))
        except ValueError:  # numpy's LinAlgError is a ValueError
            raise _singular_error(xp, a, "linalg.solve") from None
        ctx.save_for_backward(a, out)
        ctx.shapes = (a.shape, b.shape)
        return out

    @staticmethod
    def backward(ctx, grad):
        # gB = A^-T gX, gA = -gB X^T: PyTorch's linalg_solve_backward.
        a, out = ctx.saved
        xp = ctx.xp
        a_shape, b_shape = ctx.shapes
        batch = grad.shape[:-2]
        grad_b = xp.linalg.solve(xp.broadcast_to(_mT(xp, a), batch + a_shape[-2:]), grad)
        grad_a = -xp.matmul(grad_b, _mT(xp, out)) if ctx.needs_input_grad[0] else None
        return (None if grad_a is None else sum_to_shape(grad_a, a_shape), sum_to_shape(grad_b, b_shape))


def _linalg_solve(A, B, *, left=True):
    """The solution ``X`` of ``A X = B`` (``torch.linalg.solve``); ``B`` may be a batch of vectors.

    Example::

        >>> corenn.linalg.solve(corenn.tensor([[2.0, 0.0], [0.0, 4.0]]), corenn.tensor([1.0, 1.0]))
        tensor([0.5000, 0.2500])
    """
    _square(A, "linalg.solve")
    if not isinstance(B, Tensor):
        raise not_tensors(B=B)
    if B.dtype != A.dtype:
        raise RuntimeError(named(f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
                                 f"{A.dtype} and B of type {B.dtype} instead"))
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _linalg_solve(A.mT, B.mT).mT
    # PyTorch's rule: B is a batch of vectors when B.ndim == 1, or B.ndim == A.ndim - 1 and its shape is A's batch + n.
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    rhs = B.unsqueeze(-1) if vector else B
    if rhs.ndim < 2 or rhs.shape[-2] != A.shape[-1]:
        raise RuntimeError(named(f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
                                 f"({A.shape[-2]}x{A.shape[-1]} and {'x'.join(map(str, B.shape))})"))
    out = run("linalg_solve", A, rhs)
    return out.squeeze(-1) if vector else out


@kernel("pinverse", "LinalgPinvBackward0")
class Pinverse(Op):
    @staticmethod
    def forward(ctx, a, rcond):
        out = ctx.xp.linalg.pinv(a, rcond=rcond).astype(a.dtype, copy=False)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, p = ctx.saved
        xp = ctx.xp
        # d(A+) = -A+ dA A+ + A+ A+^T dA^T (I - A A+) + (I - A+ A) dA^T A+^T A+ (Golub & Pereyra), transposed.
        pt, gt = _mT(xp, p), _mT(xp, grad)
        residual_rows = xp.eye(a.shape[-2], dtype=a.dtype) - xp.matmul(a, p)
        residual_cols = xp.eye(a.shape[-1], dtype=a.dtype) - xp.matmul(p, a)
        return (-xp.matmul(xp.matmul(pt, grad), pt)
                + xp.matmul(xp.matmul(residual_rows, gt), xp.matmul(p, pt))
                + xp.matmul(xp.matmul(xp.matmul(pt, p), gt), residual_cols))


def pinverse(input, rcond=1e-15):
    """The Moore-Penrose pseudo-inverse, singular values below ``rcond * largest`` dropped (``torch.pinverse``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim < 2:
        raise RuntimeError(named("linalg.pinv(A): The input tensor A must have at least 2 dimensions."))
    _floating(input, "linalg.pinv")
    return run("pinverse", input, rcond=check_number(rcond, "rcond"))


@kernel("svd", "LinalgSvdBackward0")
class Svd(Op):
    num_outputs = 3

    @staticmethod
    def forward(ctx, a, full_matrices=False):
        xp = ctx.xp
        u, s, vh = xp.linalg.svd(a, full_matrices=full_matrices)
        ctx.save_for_backward(u, s, vh)
        return u, s, _mT(xp, vh)

    @staticmethod
    def backward(ctx, grads):
        # PyTorch's svd_backward (real case); full matrices keep only the first k columns, as PyTorch does.
        u, s, vh = ctx.saved
        xp = ctx.xp
        grad_u, grad_s, grad_v = grads
        k = s.shape[-1]
        u, vh = u[..., :k], vh[..., :k, :]
        grad_u = None if grad_u is None else grad_u[..., :k]
        grad_vh = None if grad_v is None else _mT(xp, grad_v[..., :k])
        m, n = u.shape[-2], vh.shape[-1]
        if grad_u is None and grad_vh is None:
            grad_s = xp.zeros_like(s) if grad_s is None else grad_s
            return xp.matmul(u * grad_s[..., None, :], vh)
        squared = s * s
        gaps = squared[..., None, :] - squared[..., :, None]
        diagonal = xp.arange(k)
        gaps[..., diagonal, diagonal] = 1
        grad_a = xp.zeros(s.shape + (k,), dtype=s.dtype)
        if grad_u is not None:
            uhgu = xp.matmul(_mT(xp, u), grad_u)
            grad_a = grad_a + (uhgu - _mT(xp, uhgu)) * s[..., None, :]
        if grad_vh is not None:
            vhgv = xp.matmul(vh, _mT(xp, grad_vh))
            grad_a = grad_a + s[..., :, None] * (vhgv - _mT(xp, vhgv))
        grad_a = grad_a / gaps
        if grad_s is not None:
            grad_a[..., diagonal, diagonal] += grad_s
        if m > k and grad_u is not None:
            grad_a = xp.matmul(u, grad_a)
            grad_u_s = grad_u / s[..., None, :]
            grad_a = grad_a + grad_u_s - xp.matmul(u, xp.matmul(_mT(xp, u), grad_u_s))
            grad_a = xp.matmul(grad_a, vh)
        elif n > k and grad_vh is not None:
            grad_a = xp.matmul(grad_a, vh)
            s_grad_vh = grad_vh / s[..., :, None]
            grad_a = grad_a + s_grad_vh - xp.matmul(xp.matmul(s_grad_vh, _mT(xp, vh)), vh)
            grad_a = xp.matmul(u, grad_a)
        else:
            grad_a = xp.matmul(u, xp.matmul(grad_a, vh))
        return grad_a


def svd(input, some=True, compute_uv=True):
    """``(U, S, V)`` with ``input = U diag(S) V^T`` (``torch.svd``; note V, not V^T).

    ``some=False`` gives square U and V; ``compute_uv=False`` gives zero-filled U and V and only S
    carries gradients, as in PyTorch.
    """
    from corenn.ops.reduce import return_types
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim < 2:
        raise RuntimeError(named("linalg.svd: The input tensor A must have at least 2 dimensions."))
    _floating(input, "linalg.svd")
    if not compute_uv:
        from corenn.tensor.creation import zeros
        _, s, _ = run("svd", input, full_matrices=False)
        m, n = input.shape[-2], input.shape[-1]
        shape = input.shape[:-2]
        u = zeros(shape + (m, m), dtype=input.dtype, device=input.device)  # square whatever ``some`` says
        v = zeros(shape + (n, n), dtype=input.dtype, device=input.device)
        return return_types.svd(u, s, v)
    u, s, v = run("svd", input, full_matrices=not some)
    return return_types.svd(u, s, v)


def _cholesky_error(xp, a, op):
    """PyTorch's error naming the first leading minor that is not positive-definite."""
    for order in range(1, a.shape[-1] + 1):
        try:
            xp.linalg.cholesky(a[..., :order, :order])
        except ValueError:  # numpy's (and cupy's) LinAlgError is a ValueError
            break
    return LinAlgError(f"{op}: The factorization could not be completed because the input is not positive-definite "
                       f"(the leading minor of order {order} is not positive-definite).")


@kernel("cholesky", "CholeskyBackward0")
class Cholesky(Op):
    @staticmethod
    def forward(ctx, a, upper=False):
        xp = ctx.xp
        try:
            lower = xp.linalg.cholesky(a)
        except ValueError:  # numpy's (and cupy's) LinAlgError is a ValueError
            raise _cholesky_error(xp, a, "cholesky") from None
        ctx.save_for_backward(lower)
        ctx.upper = upper
        return _mT(xp, lower).copy() if upper else lower

    @staticmethod
    def backward(ctx, grad):
        # PyTorch's cholesky_backward (Murray 2016): L^-T Phi(L^T gL) L^-1, symmetrised.
        (lower,) = ctx.saved
        xp = ctx.xp
        if ctx.upper:
            grad = _mT(xp, grad)
        grad_a = xp.tril(xp.matmul(_mT(xp, lower), grad))
        grad_a = 0.5 * (grad_a + _mT(xp, xp.tril(grad_a, -1)))
        inverse_ = xp.linalg.inv(lower)
        return xp.matmul(xp.matmul(_mT(xp, inverse_), grad_a), inverse_)


def cholesky(input, upper=False):
    """The Cholesky factor ``L`` (``L L^T = input``) of a symmetric positive-definite matrix, or ``U = L^T``."""
    return run("cholesky", _square(input, "cholesky", "input"), upper=bool(upper))


@kernel("triangular_solve", "TriangularSolveBackward0")
class TriangularSolve(Op):
    num_outputs = 2

    @staticmethod
    def forward(ctx, b, a, upper=True, transpose=False, unitriangular=False):
        xp = ctx.xp
        triangle = _triangle(xp, a, upper, unitriangular)
        matrix = _mT(xp, triangle) if transpose else triangle
        batch = xp.broadcast_shapes(b.shape[:-2], a.shape[:-2])
        solution = xp.linalg.solve(xp.broadcast_to(matrix, batch + matrix.shape[-2:]),
                                   xp.broadcast_to(b, batch + b.shape[-2:]))
        ctx.save_for_backward(matrix, solution)
        ctx.upper, ctx.transpose, ctx.unitriangular = upper, transpose, unitriangular
        ctx.shapes = (b.shape, a.shape)
        return solution, xp.broadcast_to(a, batch + a.shape[-2:]).copy()

    @staticmethod
    def backward(ctx, grads):
        matrix, solution = ctx.saved
        xp = ctx.xp
        grad_solution, grad_clone = grads
        b_shape, a_shape = ctx.shapes
        grad_b = grad_a = None
        if grad_solution is not None:
            grad_b = xp.linalg.solve(_mT(xp, xp.broadcast_to(matrix, solution.shape[:-2] + matrix.shape[-2:])),
                                     grad_solution)
            grad_a = -(xp.matmul(solution, _mT(xp, grad_b)) if ctx.transpose else
                       xp.matmul(grad_b, _mT(xp, solution)))
            grad_a = xp.triu(grad_a, 1 if ctx.unitriangular else 0) if ctx.upper else \
                xp.tril(grad_a, -1 if ctx.unitriangular else 0)
            grad_b = sum_to_shape(grad_b, b_shape)
        if grad_clone is not None:
            grad_a = grad_clone if grad_a is None else grad_a + grad_clone
        return grad_b, None if grad_a is None else sum_to_shape(grad_a, a_shape)


def _triangle(xp, a, upper, unitriangular):
    triangle = xp.triu(a) if upper else xp.tril(a)
    if unitriangular:
        n = a.shape[-1]
        triangle = triangle.copy()
        triangle[..., xp.arange(n), xp.arange(n)] = 1
    return triangle


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """``(X, A.clone())`` solving ``A X = b`` with ``A`` triangular (``torch.triangular_solve``).

    Only ``A``'s ``upper`` (or lower) triangle is read; ``transpose`` solves ``A^T X = b``;
    ``unitriangular`` takes its diagonal as ones. Batch dimensions broadcast.
    """
    from corenn.ops.reduce import return_types
    if not (isinstance(b, Tensor) and isinstance(A, Tensor)):
        raise not_tensors(b=b, A=A)
    if b.ndim < 2 or A.ndim < 2:
        raise RuntimeError(named(f"triangular_solve: The input tensor {'b' if b.ndim < 2 else 'A'} must have at least "
                                 "2 dimensions."))
    _square(A, "triangular_solve")
    if b.dtype is not A.dtype:
        raise RuntimeError(named(f"Expected b and A to have the same dtype, but got b.dtype = {b.dtype} and A.dtype = "
                                 f"{A.dtype} instead."))
    if b.shape[-2] != A.shape[-1]:
        raise RuntimeError(named(f"Incompatible matrix sizes for triangular_solve: each A matrix is {A.shape[-2]} by "
                                 f"{A.shape[-1]} but each b matrix is {b.shape[-2]} by {b.shape[-1]}"))
    solution, clone = run("triangular_solve", b, A, upper=bool(upper), transpose=bool(transpose),
                          unitriangular=bool(unitriangular))
    return return_types.triangular_solve(solution, clone)


def cholesky_solve(B, L, upper=False):
    """Solve ``A X = B`` given the Cholesky factor of ``A`` (``L``, or ``U`` with ``upper=True``).

    As in PyTorch, the factor's gradient is that of ``A = L L^T`` built from the whole matrix given.
    """
    if not (isinstance(B, Tensor) and isinstance(L, Tensor)):
        raise not_tensors(input=B, input2=L)
    _square(L, "cholesky_solve", "input2")
    if B.ndim < 2:
        raise RuntimeError(named(f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead"))
    if B.dtype is not L.dtype:
        raise RuntimeError(named(f"Expected b and A to have the same dtype, but got b.dtype = {B.dtype} and A.dtype = "
                                 f"{L.dtype} instead."))
    return matmul(cholesky_inverse(L, upper), B)


def cholesky_inverse(L, upper=False):
    """The inverse of ``A`` from its Cholesky factor: ``(L L^T)^-1``, or ``(U^T U)^-1`` (``torch.cholesky_inverse``)."""
    _square(L, "cholesky_inverse", "input")
    from corenn.ops.movement import transpose as transpose_
    product = matmul(transpose_(L, -2, -1), L) if upper else matmul(L, transpose_(L, -2, -1))
    return inverse(product)


def _lu_factor(xp, a):
    """Partial-pivoting LU of a batch of (m, n) matrices, LAPACK's getrf: packed LU, 1-based int32 pivots, info.

    ``info`` is 0, or the 1-based index of the first zero pivot (the factorization still completes).
    """
    lu = a.copy()
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    batch = a.shape[:-2]
    flat = lu.reshape((-1, m, n))
    pivots = xp.zeros((flat.shape[0], k), dtype=xp.int32)
    info = xp.zeros(flat.shape[0], dtype=xp.int32)
    rows = xp.arange(flat.shape[0])
    for j in range(k):
        pivot = j + xp.argmax(xp.abs(flat[:, j:, j]), axis=1)
        pivots[:, j] = pivot + 1
        swapped = flat[rows, pivot].copy()
        flat[rows, pivot] = flat[:, j]
        flat[:, j] = swapped
        head = flat[:, j, j]
        zero = head == 0
        info = xp.where(zero & (info == 0), j + 1, info).astype(xp.int32)
        safe = xp.where(zero, 1, head)
        flat[:, j + 1:, j] = xp.where(zero[:, None], flat[:, j + 1:, j], flat[:, j + 1:, j] / safe[:, None])
        flat[:, j + 1:, j + 1:] -= flat[:, j + 1:, j:j + 1] * flat[:, j:j + 1, j + 1:]
    return (flat.reshape(a.shape), pivots.reshape(batch + (k,))), info.reshape(batch)


def _permutation(xp, pivots, m, dtype):
    """The P of ``A = P L U`` from LAPACK's 1-based row swaps."""
    batch = pivots.shape[:-1]
    flat = pivots.reshape((-1, pivots.shape[-1])).astype(xp.int64) - 1
    order = xp.tile(xp.arange(m), (flat.shape[0], 1))
    rows = xp.arange(flat.shape[0])
    for j in range(flat.shape[-1]):
        target = flat[:, j]
        current = order[:, j].copy()
        order[:, j] = order[rows, target]
        order[rows, target] = current
    eye = xp.eye(m, dtype=dtype)
    return _mT(xp, eye[order]).reshape(batch + (m, m))


@kernel("lu", "LinalgLuFactorExBackward0")
class Lu(Op):
    num_outputs = 3
    differentiable_outputs = (True, False, False)

    @staticmethod
    def forward(ctx, a):
        xp = ctx.xp
        (lu, pivots), info = _lu_factor(xp, a)
        ctx.save_for_backward(lu, pivots)
        return lu, pivots, info

    @staticmethod
    def backward(ctx, grads):
        lu, pivots = ctx.saved
        xp = ctx.xp
        grad = grads[0]
        m, n = lu.shape[-2], lu.shape[-1]
        if m != n:
            raise NotImplementedError(named("lu: the backward of a non-square factorization is not implemented in "
                                            "corenn"))
        # PyTorch's linalg_lu_backward, square case: A_grad = P L^-T [tril(L^T gL, -1) + triu(gU U^T)] U^-T
        lower = xp.tril(lu, -1) + xp.eye(n, dtype=lu.dtype)
        upper = xp.triu(lu)
        inner_ = xp.tril(xp.matmul(_mT(xp, lower), xp.tril(grad, -1)), -1) + \
            xp.triu(xp.matmul(xp.triu(grad), _mT(xp, upper)))
        grad_a = xp.matmul(xp.linalg.inv(_mT(xp, lower)), inner_)
        grad_a = xp.matmul(grad_a, xp.linalg.inv(_mT(xp, upper)))
        return xp.matmul(_permutation(xp, pivots, n, lu.dtype), grad_a)


def lu(A, pivot=True, get_infos=False, out=None):
    """``(LU, pivots)`` (and ``infos`` with ``get_infos``): ``A = P L U`` packed as LAPACK does (``torch.lu``).

    ``pivots`` are 1-based int32 row swaps. Without ``get_infos`` a singular matrix raises, as in PyTorch.
    """
    if not isinstance(A, Tensor):
        raise not_tensors(A=A)
    if A.ndim < 2:
        raise RuntimeError(named("linalg.lu_factor: The input tensor A must have at least 2 dimensions."))
    _floating(A, "linalg.lu_factor")
    if not pivot:
        raise NotImplementedError(named("lu(): pivot=False (LU without pivoting) is not implemented in corenn; PyTorch "
                                        "supports it on CUDA only"))
    if out is not None:
        raise NotImplementedError(named("lu(): out= is not supported in corenn"))
    factors, pivots, infos = run("lu", A)
    if get_infos:
        return factors, pivots, infos
    order = infos._data.max().item() if infos.numel() else 0
    if order > 0:
        raise LinAlgError(named(f"torch.linalg.lu_factor: U[{order},{order}] is zero and using it on lu_solve would "
                                "result in a division by zero. If you still want to perform the factorization, "
                                "consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"))
    return factors, pivots


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` from ``lu``'s packed result (``torch.lu_unpack``); empty tensors for what is not unpacked."""
    from corenn.ops.movement import narrow, tril, triu
    from corenn.ops.reduce import return_types
    from corenn.tensor.creation import empty, eye
    if not (isinstance(LU_data, Tensor) and isinstance(LU_pivots, Tensor)):
        raise not_tensors(LU_data=LU_data, LU_pivots=LU_pivots)
    if LU_data.ndim < 2:
        raise RuntimeError(named("torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: "
                                 f"{list(LU_data.shape)} instead"))
    if LU_pivots.dtype.name != "int32":
        raise RuntimeError(named("torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 "
                                 "dtype. Note: this function is intended to be used with the output produced by "
                                 "torch.linalg.lu_factor"))
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    none = empty(0, dtype=LU_data.dtype, device=LU_data.device)
    lower = upper = permutation = none
    if unpack_data:
        lower = tril(narrow(LU_data, -1, 0, k), -1) + eye(m, k, dtype=LU_data.dtype, device=LU_data.device)
        upper = triu(narrow(LU_data, -2, 0, k))
    if unpack_pivots:
        xp = LU_data._device._xp
        permutation = Tensor._wrap(_permutation(xp, LU_pivots._data, m, LU_data.dtype.numpy), LU_data._device)
    return return_types.lu_unpack(permutation, lower, upper)


_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
           10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)


def _expm(xp, a):
    """exp of a batch of matrices: Pade 13 with scaling and squaring (Higham 2005), in float64."""
    dtype = a.dtype
    a = a.astype("float64")
    norm = xp.abs(a).sum(axis=-2).max(axis=-1) if a.size else xp.zeros(a.shape[:-2])
    squarings = xp.maximum(0, xp.ceil(xp.log2(xp.maximum(norm, 1e-300) / 5.371920351148152))).astype(int)
    scaled = a / (2.0 ** squarings)[..., None, None]
    eye = xp.eye(a.shape[-1])
    b = _PADE13
    a2 = xp.matmul(scaled, scaled)
    a4 = xp.matmul(a2, a2)
    a6 = xp.matmul(a4, a2)
    u = xp.matmul(scaled, xp.matmul(a6, b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2
                  + b[1] * eye)
    v = xp.matmul(a6, b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    result = xp.linalg.solve(v - u, v + u)
    for step in range(squarings.max().item() if squarings.size else 0):
        square = step < squarings
        result = xp.where(square[..., None, None], xp.matmul(result, result), result)
    return result.astype(dtype)


@kernel("matrix_exp", "LinalgMatrixExpBackward0")
class MatrixExp(Op):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return _expm(ctx.xp, a)

    @staticmethod
    def backward(ctx, grad):
        # The Frechet derivative's adjoint: the top-right block of exp([[A^T, G], [0, A^T]]), as PyTorch.
        (a,) = ctx.saved
        xp = ctx.xp
        n = a.shape[-1]
        at = _mT(xp, a)
        block = xp.zeros(a.shape[:-2] + (2 * n, 2 * n), dtype=a.dtype)
        block[..., :n, :n] = at
        block[..., n:, n:] = at
        block[..., :n, n:] = grad
        return _expm(xp, block)[..., :n, n:]


def matrix_exp(A):
    """The matrix exponential ``sum_k A^k / k!`` of a square matrix or a batch of them (``torch.matrix_exp``)."""
    return run("matrix_exp", _square(A, "linalg.matrix_exp"))


def matrix_power(input, n):
    """``input`` to the integer power ``n``; ``n < 0`` inverts first, ``n = 0`` is the identity.

    Example::

        >>> corenn.matrix_power(corenn.tensor([[1, 1], [0, 1]]), 3)
        tensor([[1, 3],
                [0, 1]])
    """
    from corenn.ops.movement import expand
    from corenn.tensor.creation import eye
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    n = check_int(n, "n")
    if input.ndim < 2:
        raise RuntimeError(named("linalg.matrix_power: The input tensor A must have at least 2 dimensions."))
    if input.shape[-1] != input.shape[-2]:
        raise RuntimeError(named(f"linalg.matrix_power: A must be batches of square matrices, but they are "
                                 f"{input.shape[-2]} by {input.shape[-1]} matrices"))
    if n == 0:  # the identity, still attached to the graph (a zero gradient), as in PyTorch
        from corenn.ops.elementwise import where
        identity = expand(eye(input.shape[-1], dtype=input.dtype, device=input.device), input.shape)
        return where(identity == identity, identity, input)
    if n < 0:
        input, n = inverse(input), -n
    result, power = None, input
    while True:  # binary powering: about log2(n) products
        if n & 1:
            result = power if result is None else matmul(result, power)
        n >>= 1
        if not n:
            break
        power = matmul(power, power)
    return result.clone() if result is input else result


# ---------------------------------------------------------------------------------------------------------
# Products built on matmul
# ---------------------------------------------------------------------------------------------------------

def kron(input, other):
    """The Kronecker product: blocks ``input[i, j] * other`` (``torch.kron``).

    Example::

        >>> corenn.kron(corenn.tensor([1, 2]), corenn.tensor([1, 10]))
        tensor([ 1, 10,  2, 20])
    """
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    ndim = max(input.ndim, other.ndim)
    a_shape = (1,) * (ndim - input.ndim) + tuple(input.shape)
    b_shape = (1,) * (ndim - other.ndim) + tuple(other.shape)
    a = input.reshape([s for size in a_shape for s in (size, 1)])
    b = other.reshape([s for size in b_shape for s in (1, size)])
    return (a * b).reshape([x * y for x, y in zip(a_shape, b_shape)])


def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (``torch.cross``); inputs broadcast.

    Without ``dim``, the first dimension of size 3 (PyTorch's deprecated default).

    Example::

        >>> corenn.cross(corenn.tensor([1.0, 0.0, 0.0]), corenn.tensor([0.0, 1.0, 0.0]), dim=0)
        tensor([0., 0., 1.])
    """
    from corenn.ops.movement import broadcast_tensors, select, stack
    from corenn.tensor.tensor import _normalize_dim
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    if input.ndim != other.ndim:
        raise RuntimeError(named("linalg.cross: inputs must have the same number of dimensions."))
    input, other = broadcast_tensors(input, other)
    if dim is None:
        import warnings
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                      "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        sizes = [i for i, s in enumerate(input.shape) if s == 3]
        if not sizes:
            raise RuntimeError(named("no dimension of size 3 in input"))
        axis = sizes[0]
    else:
        axis = _normalize_dim(dim, input.ndim)
    if input.shape[axis] != 3:
        raise RuntimeError(named(f"linalg.cross: inputs dimension {axis} must have length 3. Got {input.shape[axis]} "
                                 f"and {other.shape[axis]}"))
    a = [select(input, axis, i) for i in range(3)]
    b = [select(other, axis, i) for i in range(3)]
    return stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]], axis)


def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` dimensions: the last ``dims`` of ``a`` with the first of ``b``, or the listed pairs.

    Example::

        >>> corenn.tensordot(corenn.ones(2, 3), corenn.ones(3, 4), dims=1).shape
        corenn.Size([2, 4])
    """
    from corenn.ops.movement import permute
    from corenn.tensor.tensor import _normalize_dim
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        raise not_tensors(a=a, b=b)
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int) and not isinstance(dims, bool):
        if dims < 0:
            raise RuntimeError(named(f"tensordot expects dims >= 0, but got dims={dims}"))
        if dims > min(a.ndim, b.ndim):
            raise RuntimeError(named(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}"))
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    elif isinstance(dims, (list, tuple)) and len(dims) == 2:
        dims_a, dims_b = dims
        dims_a = [dims_a] if isinstance(dims_a, int) else list(dims_a)
        dims_b = [dims_b] if isinstance(dims_b, int) else list(dims_b)
    else:
        raise RuntimeError(named(f"tensordot expects dims to be an int or a pair of lists, got {dims!r}"))
    if len(dims_a) != len(dims_b):
        raise RuntimeError(named("both dimension lists should have same length"))
    dims_a = [_normalize_dim(d, a.ndim) for d in dims_a]
    dims_b = [_normalize_dim(d, b.ndim) for d in dims_b]
    for da, db in zip(dims_a, dims_b):
        if a.shape[da] != b.shape[db]:
            raise RuntimeError(named(f"contracted dimensions need to match, but first has size {a.shape[da]} in dim "
                                     f"{da} and second has size {b.shape[db]} in dim {db}"))
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    size = 1
    for d in dims_a:
        size *= a.shape[d]
    left = permute(a, free_a + dims_a).reshape(-1, size)
    right = permute(b, dims_b + free_b).reshape(size, -1)
    return matmul(left, right).reshape([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b])


def vdot(input, other):
    """The dot product of two 1-D tensors (``torch.vdot``; the first would be conjugated if complex)."""
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    return dot(input, other)


def dist(input, other, p=2):
    """``norm(input - other, p)`` over all elements (``torch.dist``); the inputs broadcast."""
    from corenn.ops.reduce import norm
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise not_tensors(input=input, other=other)
    return norm(input - other, p)


_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of ``x1`` (B, P, M) and of ``x2`` (B, R, M): shape (B, P, R).

    corenn computes every mode directly from the differences (the matrix-product shortcut of the
    ``use_mm`` modes only changes rounding).

    Example::

        >>> corenn.cdist(corenn.tensor([[0.0, 0.0]]), corenn.tensor([[3.0, 4.0], [1.0, 0.0]]))
        tensor([[5., 1.]])
    """
    from corenn.ops.reduce import norm
    if not (isinstance(x1, Tensor) and isinstance(x2, Tensor)):
        raise not_tensors(x1=x1, x2=x2)
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(named(f"cdist only supports at least 2D tensors, X{1 if x1.ndim < 2 else 2} got: "
                                 f"{x1.ndim}D"))
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(named(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: "
                                 f"{x2.shape[-1]}"))
    if not (x1.dtype.is_floating_point and x2.dtype.is_floating_point):
        raise RuntimeError(named(f"cdist only supports floating-point dtypes, X1 got: {x1.dtype}"))
    p = check_number(p, "p")
    if p < 0:
        raise RuntimeError(named("cdist only supports non-negative p values"))
    if compute_mode not in _CDIST_MODES:
        raise ValueError(named(f"{compute_mode} is not a valid value for compute_mode"))
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return norm(differences, p, -1)


def pdist(input, p=2):
    """p-norm distances between every pair of rows ``i < j`` of an (N, M) input, in row-major order."""
    from corenn.ops.movement import index_select
    from corenn.ops.reduce import norm
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim != 2:
        raise RuntimeError(named(f"pdist only supports 2D tensors, got: {input.ndim}D"))
    if not input.dtype.is_floating_point:
        raise RuntimeError(named("pdist only supports floating-point dtypes"))
    p = check_number(p, "p")
    if p < 0:
        raise RuntimeError(named("pdist only supports non-negative p values"))
    xp = input._device._xp
    first, second = xp.triu_indices(input.shape[0], 1)
    rows_i = Tensor._wrap(first.astype("int64"), input._device)
    rows_j = Tensor._wrap(second.astype("int64"), input._device)
    return norm(index_select(input, 0, rows_i) - index_select(input, 0, rows_j), p, -1)


def _check_beta_alpha(beta, alpha):
    return check_number(beta, "beta"), check_number(alpha, "alpha")


def _add_scaled(input, product, beta, alpha):
    """``beta * input + alpha * product``; ``beta = 0`` ignores input (its nan and inf too), as PyTorch."""
    from corenn.ops.movement import expand
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return expand(product, _broadcast(input.shape, product.shape)).clone() if input.shape != product.shape \
            else product
    return product + (input if beta == 1 else input * beta)


def _broadcast(a, b):
    from corenn.ops._kernel import broadcast_shapes
    return broadcast_shapes(tuple(a), tuple(b))


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat @ vec)`` (``torch.addmv``)."""
    if not (isinstance(input, Tensor) and isinstance(mat, Tensor) and isinstance(vec, Tensor)):
        raise not_tensors(input=input, mat=mat, vec=vec)
    beta, alpha = _check_beta_alpha(beta, alpha)
    return _add_scaled(input, mv(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * outer(vec1, vec2)`` (``torch.addr``)."""
    if not (isinstance(input, Tensor) and isinstance(vec1, Tensor) and isinstance(vec2, Tensor)):
        raise not_tensors(input=input, vec1=vec1, vec2=vec2)
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(named(f"addr: Expected 1-D argument vec1, but got {vec1.ndim}-D" if vec1.ndim != 1 else
                                 f"addr: Expected 1-D argument vec2, but got {vec2.ndim}-D"))
    beta, alpha = _check_beta_alpha(beta, alpha)
    return _add_scaled(input, outer(vec1, vec2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * sum_b batch1[b] @ batch2[b]`` (``torch.addbmm``)."""
    from corenn.ops.reduce import sum as sum_
    if not (isinstance(input, Tensor) and isinstance(batch1, Tensor) and isinstance(batch2, Tensor)):
        raise not_tensors(input=input, batch1=batch1, batch2=batch2)
    beta, alpha = _check_beta_alpha(beta, alpha)
    return _add_scaled(input, sum_(bmm(batch1, batch2), 0), beta, alpha)


def addmv_(input, mat, vec, *, beta=1, alpha=1):
    """In-place :func:`addmv` (``torch.addmv_``)."""
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    return input._inplace_from(addmv(input, mat, vec, beta=beta, alpha=alpha))


def frobenius_norm(input, dim, keepdim=False):
    """The 2-norm of the elements over ``dim`` (``torch.frobenius_norm``)."""
    from corenn.ops.reduce import norm
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    dim = check_ints(dim, "dim")
    if len(dim) > 2:
        raise RuntimeError(named(f"Expected at most 2 dimensions, but got {len(dim)} dimensions instead."))
    return norm(input, "fro", dim if dim else None, keepdim)


def nuclear_norm(input, dim=None, keepdim=False):
    """The sum of singular values of the matrices in ``dim`` (the last two by default), ``torch.nuclear_norm``."""
    from corenn.ops.movement import movedim
    from corenn.ops.reduce import sum as sum_
    from corenn.tensor.tensor import _normalize_dim
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if isinstance(dim, bool):  # nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    if dim is None:
        if input.ndim != 2:
            raise RuntimeError(named(f"Expected a tensor with 2 dimensions, but got a tensor with {input.ndim} "
                                     f"dimension{'' if input.ndim == 1 else 's'} instead."))
        dims = (0, 1)
    else:
        dims = check_ints(dim, "dim")
        if len(dims) != 2:
            raise RuntimeError(named(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dims))}"))
        dims = tuple(_normalize_dim(d, input.ndim) for d in dims)
    _floating(input, "linalg.matrix_norm")
    singular = svd(movedim(input, dims, (-2, -1)), compute_uv=False).S
    result = sum_(singular, -1)
    if keepdim:
        for d in sorted(dims):
            result = result.unsqueeze(d)
    return result


def geqrf(input):
    """``(a, tau)``: the QR factorization in LAPACK's form, R above the diagonal and Householder vectors below.

    Not differentiable, as in PyTorch.
    """
    from corenn.ops.reduce import return_types
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if input.ndim < 2:
        raise RuntimeError(named("torch.geqrf: input must have at least 2 dimensions."))
    _floating(input, "geqrf")
    xp = input._device._xp
    data = input._data
    flat = data.reshape((-1,) + data.shape[-2:])
    pairs = [xp.linalg.qr(flat[i], mode="raw") for i in range(flat.shape[0])]
    reflectors = xp.stack([h.T for h, _ in pairs]) if pairs else flat.copy()
    taus = xp.stack([tau for _, tau in pairs]) if pairs else xp.zeros((0, min(data.shape[-2:])), data.dtype)
    return return_types.geqrf(Tensor._wrap(reflectors.reshape(data.shape).astype(data.dtype), input._device),
                              Tensor._wrap(taus.reshape(data.shape[:-2] + (-1,)).astype(data.dtype), input._device))


def _householder_q(input, tau, columns):
    """``H_1 H_2 ... H_k`` with ``H_i = I - tau_i v_i v_i^T`` (v_i: column i of input below a unit diagonal)."""
    from corenn.ops.movement import narrow, tril
    from corenn.tensor.creation import eye
    m, n = input.shape[-2], input.shape[-1]
    vectors = tril(input, -1) + eye(m, n, dtype=input.dtype, device=input.device)
    q = eye(m, columns, dtype=input.dtype, device=input.device)
    for i in reversed(range(tau.shape[-1])):  # applied from the right: H_i (H_{i+1} ... Q)
        v = narrow(vectors, -1, i, 1)
        scale = narrow(tau, -1, i, 1).unsqueeze(-1)
        q = q - matmul(v * scale, matmul(v.transpose(-2, -1), q))
    return q


def _check_reflectors(input, tau, op):
    if not (isinstance(input, Tensor) and isinstance(tau, Tensor)):
        raise not_tensors(input=input, tau=tau)
    if input.ndim < 2:
        raise RuntimeError(named(f"{op}: input must have at least 2 dimensions."))
    if tau.ndim < 1:
        raise RuntimeError(named(f"{op}: tau must have at least 1 dimension."))
    if tau.shape[-1] > input.shape[-1]:
        raise RuntimeError(named(f"{op}: input.shape[-1] must be greater than or equal to tau.shape[-1]"))
    if tau.shape[:-1] != input.shape[:-2]:
        raise RuntimeError(named(f"{op}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
                                 f"{list(tau.shape[:-1])}"))
    if tau.dtype is not input.dtype:
        raise RuntimeError(named(f"{op}: tau dtype {tau.dtype} does not match input dtype {input.dtype}"))


def orgqr(input, tau):
    """The first ``n`` columns of ``Q`` from ``geqrf``'s Householder form (``torch.orgqr``)."""
    _check_reflectors(input, tau, "torch.linalg.householder_product")
    if input.shape[-2] < input.shape[-1]:
        raise RuntimeError(named("torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                                 "input.shape[-1]"))
    return _householder_q(input, tau, input.shape[-1])


def ormqr(input, tau, other, left=True, transpose=False):
    """``Q @ other`` (or ``other @ Q``, with ``Q^T`` if ``transpose``) for ``Q`` in ``geqrf``'s form."""
    _check_reflectors(input, tau, "torch.ormqr")
    if not isinstance(other, Tensor):
        raise not_tensors(other=other)
    m = input.shape[-2]
    if (other.shape[-2] if left else other.shape[-1]) != m:
        raise RuntimeError(named(f"torch.ormqr: other.shape[{-2 if left else -1}] must be equal to input.shape[-2]"))
    q = _householder_q(input, tau, m)
    if transpose:
        q = q.transpose(-2, -1)
    return matmul(q, other) if left else matmul(other, q)


@kernel("qr", "LinalgQrBackward0")
class Qr(Op):
    """Reduced QR of tall matrices (m >= n), the basis step of ``svd_lowrank``; PyTorch's backward."""

    num_outputs = 2

    @staticmethod
    def forward(ctx, a):
        q, r = ctx.xp.linalg.qr(a)
        ctx.save_for_backward(q, r)
        return q, r

    @staticmethod
    def backward(ctx, grads):
        # gA = [gQ + Q syminvadj(triu(gR R^T - Q^T gQ))] R^-T (PyTorch's linalg_qr_backward, m >= n)
        q, r = ctx.saved
        xp = ctx.xp
        if q.shape[-2] < r.shape[-1]:
            raise NotImplementedError(named("qr: the backward of a wide matrix's QR is not implemented in corenn"))
        grad_q, grad_r = grads
        inner_ = xp.zeros(r.shape, dtype=r.dtype)
        if grad_r is not None:
            inner_ = inner_ + xp.matmul(grad_r, _mT(xp, r))
        if grad_q is not None:
            inner_ = inner_ - xp.matmul(_mT(xp, q), grad_q)
        upper = xp.triu(inner_)
        symmetric = upper + _mT(xp, upper)
        n = r.shape[-1]
        symmetric[..., xp.arange(n), xp.arange(n)] *= 0.5
        grad_a = xp.matmul(q, symmetric)
        if grad_q is not None:
            grad_a = grad_a + grad_q
        return _mT(xp, xp.linalg.solve(r, _mT(xp, grad_a)))  # grad_a R^-T


def _orthonormal_basis(x):
    """Q of the reduced QR of a tall ``x``, differentiable."""
    q, _ = run("qr", x)
    return q


def _approximate_basis(a, q, niter):
    """An orthonormal basis of about ``a``'s range from ``q`` random directions (Halko et al. 2009, 4.4)."""
    from corenn.tensor.random import randn
    directions = randn(a.shape[-1], q, dtype=a.dtype, device=a.device)
    basis = _orthonormal_basis(matmul(a, directions))
    for _ in range(niter):  # power iterations sharpen the basis towards the largest singular values
        basis = _orthonormal_basis(matmul(a.mT, basis))
        basis = _orthonormal_basis(matmul(a, basis))
    return basis


def svd_lowrank(A, q=6, niter=2, M=None):
    """An approximate ``(U, S, V)`` of ``A - M`` of rank ``q`` by randomised subspace iteration (``torch.svd_lowrank``).

    PyTorch's algorithm (Halko et al. 2009, algorithm 5.1): exact for matrices of rank at most
    ``q``; the random directions come from corenn's generator, so other matrices get an
    approximation of the same quality, not PyTorch's digits.
    """
    if not isinstance(A, Tensor):
        raise not_tensors(A=A)
    if A.ndim < 2:
        raise RuntimeError(named("svd_lowrank: the input must have at least 2 dimensions"))
    _floating(A, "svd_lowrank")
    q = 6 if q is None else check_int(q, "q")
    niter = 2 if niter is None else check_int(niter, "niter")
    m, n = A.shape[-2], A.shape[-1]
    if M is not None:
        if not isinstance(M, Tensor):
            raise not_tensors(M=M)
        A = A - M.broadcast_to(A.shape)
    if m < n:  # work on the tall one
        A = A.mT
    if q > A.shape[-2]:
        raise NotImplementedError(named(f"svd_lowrank: q (={q}) above max(m, n) (={A.shape[-2]}) is not supported in "
                                        "corenn, whose QR step takes tall matrices"))
    basis = _approximate_basis(A, q, niter)
    u, s, v = svd(matmul(basis.mT, A))
    u = matmul(basis, u)
    return (v, s, u) if m < n else (u, s, v)


def pca_lowrank(A, q=None, center=True, niter=2):
    """The principal components of ``A``'s rows: ``svd_lowrank`` of ``A`` less its column means (``torch.pca_lowrank``).

    ``q`` defaults to ``min(6, m, n)``.
    """
    if not isinstance(A, Tensor):
        raise not_tensors(A=A)
    if A.ndim < 2:
        raise RuntimeError(named("pca_lowrank: the input must have at least 2 dimensions"))
    m, n = A.shape[-2], A.shape[-1]
    if q is None:
        q = min(6, m, n)
    elif not (check_int(q, "q") >= 0 and q <= min(m, n)):
        raise ValueError(named(f"q(={q}) must be non-negative integer and not greater than min(m, n)={min(m, n)}"))
    if not check_int(niter, "niter") >= 0:
        raise ValueError(named(f"niter(={niter}) must be non-negative integer"))
    if not center:
        return svd_lowrank(A, q, niter=niter)
    return svd_lowrank(A - A.mean(dim=-2, keepdim=True), q, niter=niter)


@kernel("eigh", "LinalgEighBackward0")
class Eigh(Op):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices, the solver behind ``lobpcg``."""

    num_outputs = 2

    @staticmethod
    def forward(ctx, a, UPLO="L"):
        values, vectors = ctx.xp.linalg.eigh(a, UPLO=UPLO)  # reads only that triangle, as LAPACK does
        ctx.save_for_backward(values, vectors)
        return values, vectors

    @staticmethod
    def backward(ctx, grads):
        # PyTorch's linalg_eig_backward for Hermitian input: V (diag(gL) + skew(V^T gV) / E) V^T, E_ij = L_j - L_i
        values, vectors = ctx.saved
        xp = ctx.xp
        grad_values, grad_vectors = grads
        n = values.shape[-1]
        diagonal = xp.arange(n)
        inner_ = xp.zeros(vectors.shape, dtype=vectors.dtype)
        if grad_vectors is not None:
            projected = xp.matmul(_mT(xp, vectors), grad_vectors)
            gaps = values[..., None, :] - values[..., :, None]
            gaps[..., diagonal, diagonal] = 1
            inner_ = 0.5 * (projected - _mT(xp, projected)) / gaps
        if grad_values is not None:
            inner_[..., diagonal, diagonal] = grad_values
        return xp.matmul(vectors, xp.matmul(inner_, _mT(xp, vectors)))


def lobpcg(A, k=None, B=None, X=None, n=None, iK=None, niter=None, tol=None, largest=None, method=None,
           tracker=None, ortho_iparams=None, ortho_fparams=None, ortho_bparams=None):
    """The ``k`` largest (or smallest) eigenpairs ``(E, X)`` of a symmetric ``A``, or of ``A x = e B x``.

    ``torch.lobpcg``'s problem, solved exactly: corenn takes a dense symmetric eigensolver (after a
    Cholesky change of variables for ``B``) where LOBPCG iterates, so ``X`` (the start),
    ``niter``, ``tol``, ``iK``, ``method`` and the ``ortho_*`` settings, which steer the
    iteration, leave the exact answer as it is; a ``tracker`` (called per iteration) raises
    NotImplementedError. Values and gradients are those of the converged eigenpairs, with
    ``A`` (and ``B``) symmetrised first, as PyTorch does.
    """
    from corenn.ops.movement import flip, narrow
    if not isinstance(A, Tensor):
        raise not_tensors(A=A)
    if A.ndim < 2 or A.shape[-2] != A.shape[-1]:
        raise ValueError(named(f"A must be square, got shape {list(A.shape)}"))
    _floating(A, "lobpcg")
    if tracker is not None:
        raise NotImplementedError(named("lobpcg(): tracker is not supported: corenn solves the problem directly, "
                                        "without iterations to track"))
    if B is not None:
        if not isinstance(B, Tensor):
            raise not_tensors(B=B)
        if B.shape != A.shape:
            raise ValueError(named(f"A and B must have same shape, got {list(A.shape)} vs {list(B.shape)}"))
    if X is not None and not isinstance(X, Tensor):
        raise not_tensors(X=X)
    m = A.shape[-1]
    k = (1 if X is None else X.shape[-1]) if k is None else check_int(k, "k")
    n = (k if n is None else check_int(n, "n")) if X is None else X.shape[-1]
    if m < 3 * n:
        raise ValueError(named(f"LOBPCG algorithm is not applicable when the number of A rows (={m}) is smaller "
                               f"than 3 x the number of requested eigenpairs (={n})"))
    if method not in (None, "basic", "ortho"):
        raise ValueError(named(f"lobpcg(): method must be 'basic' or 'ortho', got {method!r}"))
    symmetric = (A + A.mT) / 2
    if B is None:
        values, vectors = run("eigh", symmetric)
    else:
        factor = cholesky((B + B.mT) / 2)
        inverse_factor = inverse(factor)
        values, vectors = run("eigh", matmul(matmul(inverse_factor, symmetric), inverse_factor.mT))
        vectors = matmul(inverse_factor.mT, vectors)
    if largest is None or largest:
        values, vectors = flip(values, (-1,)), flip(vectors, (-1,))
    return narrow(values, -1, 0, k), narrow(vectors, -1, 0, k)


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
