"""Upsampling (``F.interpolate``): nearest, nearest-exact, linear (1-3 spatial dims) and bicubic resampling.

Every mode is separable: along one spatial axis an output element is a weighted sum of a few input
elements ("taps": 1 for nearest, 2 for linear, 4 for cubic). The kernel builds, per axis, a table of tap
indices and weights ``(out, taps)`` with PyTorch's source-index formulas (in PyTorch's precision: float32
arithmetic for float32, so a nearest index on a boundary lands where PyTorch's does), then gathers
``sum_t take(x, index[:, t]) * weight[:, t]``. Axes are resampled last first, which nests the sums exactly
as PyTorch's bilinear, trilinear and bicubic loops do. Backward is the adjoint, axis by axis in reverse:
each tap's weighted gradient is scatter-added (``add.at``: neighbouring outputs share inputs).
"""
from __future__ import annotations

from corenn.ops._kernel import Op, kernel

#: mode -> the word PyTorch's grad_fn names use (``UpsampleBilinear2DBackward0``)
_GRAD_FN_WORD = {"nearest": "Nearest", "nearest-exact": "NearestExact", "linear": "Linear", "cubic": "Bicubic"}
_LINEAR_WORD = {1: "Linear", 2: "Bilinear", 3: "Trilinear"}
_CUBIC_A = -0.75  # PyTorch's (and OpenCV's) cubic convolution constant


def _nearest_taps(xp, mode, in_size, out_size, scale_factor, shortcuts):
    """(out, 1) source indices of nearest / nearest-exact, computed in float32 as PyTorch's CPU kernel does.

    PyTorch's 2-d nearest kernel (only it) takes two shortcuts that ignore a given scale factor: an axis whose
    size is kept is copied, one whose size doubles repeats each element twice. ``shortcuts`` reproduces them.
    """
    i = xp.arange(out_size)
    if shortcuts and out_size == in_size:
        return i[:, None]
    if shortcuts and out_size == 2 * in_size:
        return (i // 2)[:, None]
    scale = (xp.float32(1.0 / scale_factor) if scale_factor is not None and scale_factor > 0
             else xp.float32(in_size) / xp.float32(out_size))
    if mode == "nearest":
        source = xp.floor(i.astype(xp.float32) * scale)
    else:  # nearest-exact: (i + 0.5) in double times the float scale, rounded to float by floorf
        source = xp.floor(((i + 0.5) * float(scale)).astype(xp.float32))
    return xp.minimum(source.astype(xp.int64), in_size - 1)[:, None]


def _interpolating_taps(xp, mode, in_size, out_size, scale_factor, align_corners, opmath):
    """(out, taps) source indices and weights of linear (2 taps) or cubic (4 taps) interpolation."""
    i = xp.arange(out_size).astype(opmath)
    if align_corners:
        scale = opmath((in_size - 1) / (out_size - 1)) if out_size > 1 else opmath(0)
        source = scale * i
    else:
        scale = (opmath(1.0 / scale_factor) if scale_factor is not None and scale_factor > 0
                 else opmath(in_size) / opmath(out_size))
        source = scale * (i + opmath(0.5)) - opmath(0.5)
        if mode == "linear":
            source = xp.maximum(source, opmath(0))  # cubic keeps a negative source: its taps clamp instead
    first = xp.minimum(xp.floor(source).astype(xp.int64), in_size - 1)
    t = xp.clip(source - first.astype(opmath), opmath(0), opmath(1))
    if mode == "linear":
        index = xp.stack([first, first + (first < in_size - 1)], axis=1)
        weight = xp.stack([opmath(1) - t, t], axis=1)
        return index, weight
    a = opmath(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weight = xp.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1).astype(opmath)
    index = xp.clip(first[:, None] + xp.arange(-1, 3)[None, :], 0, in_size - 1)
    return index, weight


def _along(weight, axis, ndim):
    return weight.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))


def _resample(xp, x, axis, index, weight):
    if weight is None:
        return xp.take(x, index[:, 0], axis=axis)
    out = None
    for tap in range(index.shape[1]):
        term = xp.take(x, index[:, tap], axis=axis) * _along(weight[:, tap], axis, x.ndim)
        out = term if out is None else out + term
    return out


def _resample_adjoint(xp, grad, axis, in_size, index, weight):
    """The transpose of ``_resample``: each output's gradient goes back to its taps, weighted, accumulated."""
    moved = xp.moveaxis(grad, axis, 0)                      # (out, ...)
    result = xp.zeros((in_size,) + moved.shape[1:], dtype=grad.dtype)
    for tap in range(index.shape[1]):
        share = moved if weight is None else moved * _along(weight[:, tap], 0, moved.ndim)
        xp.add.at(result, index[:, tap], share)             # add.at: repeated indices accumulate
    return xp.moveaxis(result, 0, axis)


@kernel("upsample", "UpsampleNearest2DBackward0")
class Upsample(Op):
    """``x`` (N, C, *S) resampled to ``output_size``; ``mode`` is nearest, nearest-exact, linear or cubic.

    ``scale_factors`` (one float or None per spatial dim) set the source-index scale as PyTorch's kernels use it
    (``1 / scale_factor``) when given; otherwise ``in / out``. ``align_corners`` is for linear and cubic.
    """

    @staticmethod
    def forward(ctx, x, mode, output_size, scale_factors, align_corners):
        xp = ctx.xp
        n = len(output_size)
        word = _LINEAR_WORD[n] if mode == "linear" else _GRAD_FN_WORD[mode]
        ctx.grad_fn_name = f"Upsample{word}{n}DBackward0"
        nearest = mode in ("nearest", "nearest-exact")
        # PyTorch computes in the dtype's "opmath": float64 for float64, float32 for float32, float16, bfloat16.
        opmath = xp.float64 if x.dtype == xp.float64 else xp.float32
        work = x if nearest or x.dtype == opmath else x.astype(opmath)
        tables, arrays = [], []
        for dim in reversed(range(n)):
            axis, in_size = 2 + dim, x.shape[2 + dim]
            if nearest:
                index = _nearest_taps(xp, mode, in_size, output_size[dim], scale_factors[dim],
                                      shortcuts=mode == "nearest" and n == 2)
                weight = None
            elif mode == "linear" and in_size == output_size[dim]:
                # PyTorch's linear kernels copy an axis whose size is kept, whatever the scale factor says.
                index, weight = xp.arange(in_size)[:, None], None
            else:
                index, weight = _interpolating_taps(xp, mode, in_size, output_size[dim], scale_factors[dim],
                                                    align_corners, opmath)
            work = _resample(xp, work, axis, index, weight)
            tables.append((axis, in_size))
            arrays += [index, weight]
        # The tap tables go through save_for_backward, which frees them once backward has run.
        ctx.save_for_backward(*arrays)
        ctx.params = (tables, opmath)
        return work.astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        tables, opmath = ctx.params
        work = grad if grad.dtype.kind == "f" and grad.dtype.itemsize >= 4 else grad.astype(opmath)
        saved = ctx.saved
        for number, (axis, in_size) in reversed(list(enumerate(tables))):
            index, weight = saved[2 * number], saved[2 * number + 1]
            work = _resample_adjoint(xp, work, axis, in_size, index, weight)
        return work.astype(grad.dtype, copy=False)


__all__: list[str] = []  # the front end is ``corenn.nn.functional.interpolate``, not a ``corenn.*`` function


# ---------------------------------------------------------------------------------------------------------
# Front end: ``torch.nn.functional.interpolate``
# ---------------------------------------------------------------------------------------------------------

_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"
#: mode -> the number of spatial dims it needs (PyTorch's linear modes are tied to a rank)
_MODE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def _is_integer(value) -> bool:
    import numbers
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) or (
        hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0 and not value.dtype.is_floating_point)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resample (N, C, *S) to ``size`` or by ``scale_factor``, as ``torch.nn.functional.interpolate``.

    Modes: nearest, nearest-exact, linear (3-d input), bilinear and bicubic (4-d), trilinear (5-d), and area
    (adaptive average pooling). ``antialias=True`` and ``mode='lanczos'`` are not implemented and raise.

        >>> F.interpolate(corenn.tensor([[[1., 2.]]]), scale_factor=2, mode="linear").tolist()
        [[[1.0, 1.25, 1.75, 2.0]]]
    """
    import math
    from corenn.ops._kernel import check_tensor, run
    from corenn.ops import pooling
    check_tensor(input, "input", "interpolate")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scale_factors = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input "
                                 f"with spatial dimensions of {list(input.shape[2:])} and output size of {size}. "
                                 "Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                                 "(o1, o2, ...,oK) format.")
            output_size = list(size)
        else:
            output_size = [size] * dim
        if not all(_is_integer(s) for s in output_size):
            raise TypeError(f"interpolate(): argument 'size' must be int or tuple of ints, but got "
                            f"{[type(s).__name__ for s in output_size]}")
        output_size = [int(s) for s in output_size]
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got "
                                 f"input with spatial dimensions of {list(input.shape[2:])} and scale_factor of "
                                 f"shape {scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) "
                                 "format and scale_factor in (s1, s2, ...,sK) format.")
            scale_factors = [float(s) for s in scale_factor]
        else:
            scale_factors = [float(scale_factor)] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if output_size is None or recompute_scale_factor:
        # The output size from the scale factors; with recompute_scale_factor the kernel then forgets them
        # and derives its scale from the sizes (in / out), as PyTorch does.
        output_size = [math.floor(float(input.shape[i + 2]) * scale_factors[i]) for i in range(dim)]
        if recompute_scale_factor:
            scale_factors = None
    if antialias:
        if not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
            raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires "
                             "a 4-D tensor as input")
        raise NotImplementedError("interpolate(): antialias=True is not implemented in corenn yet")
    if mode == "lanczos":
        raise NotImplementedError("interpolate(): mode='lanczos' is not implemented in corenn yet")
    if input.ndim in (3, 4, 5) and mode in _MODE_DIMS and _MODE_DIMS[mode] != dim:
        needed = _MODE_DIMS[mode] + 2
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {needed}D input")
    if input.ndim not in (3, 4, 5) or mode not in ("nearest", "nearest-exact", "area") + tuple(_MODE_DIMS):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
                                  f"the modes: {_MODES} (got {mode})")
    if any(s <= 0 for s in output_size) or any(s <= 0 for s in input.shape[2:]):
        names = ("D", "H", "W")[3 - dim:]
        shown = ", ".join(f"{name}: {s}" for name, s in zip(names, input.shape[2:]))
        wanted = ", ".join(f"{name}: {s}" for name, s in zip(names, output_size))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({shown}) output "
                           f"({wanted})")
    if mode == "area":
        return pooling._adaptive_avg_poolnd(input, tuple(output_size), dim)
    dtype = input.dtype
    nearest = mode in ("nearest", "nearest-exact")
    if not (dtype.is_floating_point or (nearest and str(dtype) == "corenn.uint8")):
        kernel_name = {"nearest": "upsample_nearest", "nearest-exact": "_upsample_nearest_exact"}.get(
            mode, f"upsample_{mode}")
        raise NotImplementedError(f"\"{kernel_name}{dim}d\" not implemented for '{_torch_type_name(dtype)}'")
    kernel_mode = "cubic" if mode == "bicubic" else ("linear" if mode in _MODE_DIMS else mode)
    return run("upsample", input, mode=kernel_mode, output_size=tuple(output_size),
               scale_factors=tuple(scale_factors) if scale_factors is not None else (None,) * dim,
               align_corners=bool(align_corners))


def _torch_type_name(dtype) -> str:
    """PyTorch's scalar type name of a dtype (``Long`` for int64), as its dispatch errors print it."""
    names = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
             "complex64": "ComplexFloat", "complex128": "ComplexDouble"}
    short = str(dtype).rsplit(".", 1)[-1]
    return names.get(short, short)
