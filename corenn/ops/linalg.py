"""Matrix products: matmul in all of PyTorch's 1-D/2-D/batched cases, mm, bmm, mv, dot, outer, einsum."""
from __future__ import annotations

import string

from corenn._argcheck import check_number, named, not_tensors, type_name
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
        raise RuntimeError(named(f"mat1 and mat2 shapes cannot be multiplied "
                                 f"({_shape_str(a.shape if a.ndim > 1 else (1, inner_a))} and "
                                 f"{_shape_str(b.shape if b.ndim > 1 else (inner_b, 1))})"))


@_autocast.autocast_op(_autocast.LOWER)
def matmul(input, other):
    """Matrix product with PyTorch's rules for 1-D, 2-D, batched and broadcast operands (``torch.matmul``)."""
    _check_matmul(input, other)
    try:
        result = run("matmul", input, other)
    except ValueError:
        raise RuntimeError(named(f"batch dimensions of {list(input.shape)} and {list(other.shape)} cannot be "
                                 "broadcast together")) from None
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


# The public op functions of this file (what ``from corenn.ops import *`` re-exports as ``corenn.X``).
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and callable(value) and not isinstance(value, type)
           and getattr(value, "__module__", None) == __name__]
