"""Sampling an input at arbitrary points: ``grid_sample`` (bilinear / nearest / bicubic, 4-D and 5-D) and
``affine_grid`` (the sampling grid of an affine transform), as PyTorch's ``F.grid_sample`` / ``F.affine_grid``.

Each output point reads a few taps per spatial dim (nearest 1, linear 2, cubic 4); the value is the sum
over every combination of taps of the input there times the product of the taps' weights. Backward
scatters the gradient back to the same taps, and differentiates the weights for the grid.
"""
from __future__ import annotations

import itertools
import math
import warnings

from corenn.ops._kernel import Op, check_tensor, kernel, run

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDING_MODES = {"zeros": 0, "border": 1, "reflection": 2}
_CUBIC_A = -0.75  # PyTorch's cubic convolution constant


def _clip(xp, coord, size, volumetric):
    """Clamp to [0, size - 1]; the derivative is 0 where clamped (PyTorch: ``clip_coordinates_set_grad``).

    A NaN coordinate (a NaN grid point, or an infinite one after reflection) goes where PyTorch's CPU
    kernels send it: to 0 in 2-d (vectorized min/max), to ``size - 1`` in 3-d (``std::min(size - 1,
    std::max(x, 0))``, where comparisons with NaN are false).
    """
    nan = xp.isnan(coord)
    grad = xp.where((coord <= 0) | (coord >= size - 1) | nan, 0.0, 1.0)
    return xp.where(nan, size - 1.0 if volumetric else 0.0, xp.clip(coord, 0, size - 1)), grad


def _reflect(xp, coord, twice_low, twice_high):
    """Reflect into [twice_low / 2, twice_high / 2], with the sign of the derivative (``reflect_coordinates``)."""
    if twice_low == twice_high:
        return xp.zeros_like(coord), xp.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    coord = coord - low
    sign = xp.where(coord < 0, -1.0, 1.0)
    coord = xp.abs(coord)
    extra = xp.fmod(coord, span)
    even = xp.fmod(xp.floor(coord / span), 2) == 0
    return xp.where(even, extra + low, span - extra + low), xp.where(even, sign, -sign)


def _padded_coordinates(xp, coord, size, padding_mode, align_corners, volumetric):
    """PyTorch's ``compute_coordinates``: the source coordinate after the padding mode, and its derivative."""
    if padding_mode == "border":
        return _clip(xp, coord, size, volumetric)
    if padding_mode == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        coord, grad_reflect = _reflect(xp, coord, *twice)
        coord, grad_clip = _clip(xp, coord, size, volumetric)
        return coord, grad_reflect * grad_clip
    return coord, xp.ones_like(coord)


def _cubic_weights(xp, t):
    """The four cubic-convolution weights of taps -1, 0, 1, 2 at fraction ``t``, and their derivatives."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    def near_grad(x):
        return (3 * (a + 2) * x - 2 * (a + 3)) * x

    def far_grad(x):
        return (3 * a * x - 10 * a) * x + 8 * a

    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    grads = [far_grad(t + 1), near_grad(t), -near_grad(1 - t), -far_grad(2 - t)]
    return weights, grads


def _taps(xp, coord, size, mode, padding_mode, align_corners, volumetric):
    """Per tap of one spatial dim: (integer index, in-bounds mask, weight, d weight / d grid coordinate)."""
    scale = (size - 1) / 2 if align_corners else size / 2
    source = ((coord + 1) / 2) * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    if mode == "bicubic":
        # the padding mode applies to each integer tap, not to the continuous coordinate
        base = xp.floor(source)
        weights, grads = _cubic_weights(xp, source - base)
        taps = []
        for offset, weight, grad in zip((-1, 0, 1, 2), weights, grads):
            index, _ = _padded_coordinates(xp, base + offset, size, padding_mode, align_corners, volumetric)
            index = index.astype(xp.int64) if padding_mode != "zeros" else (base + offset).astype(xp.int64)
            taps.append((index, (index >= 0) & (index < size), weight, grad * scale))
        return taps
    source, grad_pad = _padded_coordinates(xp, source, size, padding_mode, align_corners, volumetric)
    if mode == "nearest":
        index = xp.round(source)  # half to even, as PyTorch's nearest (nearbyint)
        inside = (index >= 0) & (index < size)
        return [(xp.where(inside, index, 0).astype(xp.int64), inside, xp.ones_like(source), xp.zeros_like(source))]
    low = xp.floor(source)
    fraction = source - low
    taps = []
    for offset, weight, sign in ((0, 1 - fraction, -1.0), (1, fraction, 1.0)):
        index = low + offset
        inside = (index >= 0) & (index < size)
        taps.append((xp.where(inside, index, 0).astype(xp.int64), inside, weight, sign * grad_pad * scale))
    return taps


def _combinations(xp, x, grid, mode, padding_mode, align_corners):
    """Every combination of taps: (flat index into a plane, in-bounds mask, weights per dim, d weights per dim)."""
    sizes = x.shape[2:]
    dims = len(sizes)
    coords = grid.reshape(grid.shape[0], -1, dims)  # (N, P, dims), x first
    per_dim = [_taps(xp, coords[..., dims - 1 - k], sizes[k], mode, padding_mode, align_corners, dims == 3)
               for k in range(dims)]
    strides = [math.prod(sizes[k + 1:]) for k in range(dims)]
    for combo in itertools.product(*per_dim):
        flat = sum(index * stride for (index, _, _, _), stride in zip(combo, strides))
        inside = combo[0][1]
        for tap in combo[1:]:
            inside = inside & tap[1]
        yield flat * inside, inside, [tap[2] for tap in combo], [tap[3] for tap in combo]


def _masked(xp, weight, inside, ndim):
    """Out-of-bounds taps weigh nothing: PyTorch's 2-d CPU kernel multiplies by the mask (a NaN weight, from a
    NaN grid point, stays NaN), its 3-d kernel skips them."""
    return weight * inside if ndim == 4 else xp.where(inside, weight, 0.0)


@kernel("grid_sample", "GridSampler2DBackward0")
class GridSample(Op):
    """Samples (N, C, *S) input at the (N, *O, dims) grid's points; the output is (N, C, *O)."""

    @staticmethod
    def forward(ctx, x, grid, mode, padding_mode, align_corners):
        with ctx.xp.errstate(invalid="ignore"):  # non-finite grid points: handled as PyTorch does, silently
            return GridSample._forward(ctx, x, grid, mode, padding_mode, align_corners)

    @staticmethod
    def _forward(ctx, x, grid, mode, padding_mode, align_corners):
        xp = ctx.xp
        N, C = x.shape[:2]
        planes = x.reshape(N, C, -1)
        out = xp.zeros((N, C, math.prod(grid.shape[1:-1])), dtype=x.dtype)
        for flat, inside, weights, _ in _combinations(xp, x, grid, mode, padding_mode, align_corners):
            weight = _masked(xp, math.prod(weights), inside, x.ndim)
            values = xp.take_along_axis(planes, xp.broadcast_to(flat[:, None, :], out.shape), axis=2)
            out += (values * weight[:, None, :]).astype(x.dtype, copy=False)
        ctx.save_for_backward(x, grid)
        ctx.options = (mode, padding_mode, align_corners)
        ctx.grad_fn_name = f"GridSampler{len(x.shape) - 2}DBackward0"
        return out.reshape((N, C) + grid.shape[1:-1])

    @staticmethod
    def backward(ctx, grad):
        with ctx.xp.errstate(invalid="ignore"):
            return GridSample._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        xp = ctx.xp
        x, grid = ctx.saved
        N, C = x.shape[:2]
        plane = math.prod(x.shape[2:])
        planes = x.reshape(N, C, plane)
        grad = grad.reshape(N, C, -1)
        dims = len(x.shape) - 2
        # bincount accumulates the taps that land on one input element (in float64, whatever the dtype)
        grad_x = xp.zeros(N * C * plane, dtype=xp.float64) if ctx.needs_input_grad[0] else None
        grad_coords = [xp.zeros(grad.shape[::2], dtype=grad.dtype) for _ in range(dims)]  # (N, P) each
        base = (xp.arange(N * C) * plane).reshape(N, C, 1)
        for flat, inside, weights, weight_grads in _combinations(xp, x, grid, *ctx.options):
            if grad_x is not None:
                weight = _masked(xp, math.prod(weights), inside, x.ndim)
                grad_x += xp.bincount((flat[:, None, :] + base).reshape(-1),
                                      weights=xp.broadcast_to(grad * weight[:, None, :], grad.shape).reshape(-1),
                                      minlength=grad_x.size)
            if ctx.needs_input_grad[1]:
                values = xp.take_along_axis(planes, xp.broadcast_to(flat[:, None, :], grad.shape), axis=2)
                through = (grad * values).sum(axis=1) * inside  # (N, P)
                for k in range(dims):
                    others = math.prod(w for j, w in enumerate(weights) if j != k) if dims > 1 else 1.0
                    grad_coords[k] += (through * others * weight_grads[k]).astype(grad.dtype, copy=False)
        grad_grid = None
        if ctx.needs_input_grad[1]:
            # spatial dim k is grid coordinate dims - 1 - k (the grid lists x, y, z)
            grad_grid = xp.stack(grad_coords[::-1], axis=-1).reshape(grid.shape).astype(grid.dtype, copy=False)
        if grad_x is not None:
            grad_x = grad_x.reshape(x.shape).astype(x.dtype, copy=False)
        return grad_x, grad_grid


def _align_corners_default(align_corners):
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to align_corners=False since "
                      "1.3.0. Please specify align_corners=True if the old behavior is desired. See the "
                      "documentation of grid_sample for details.", stacklevel=3)
        return False
    return bool(align_corners)


def _grid_sample(input, grid, mode, padding_mode, align_corners, op):
    check_tensor(input, "input", op)
    check_tensor(grid, "grid", op)
    if input.ndim not in (4, 5) or grid.ndim != input.ndim:
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but "
                           f"got input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != input.ndim - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.ndim - 2} in last dimension, but got "
                           f"grid with sizes {list(grid.shape)}")
    if any(size == 0 for size in input.shape[2:]):
        raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                           f"sizes {list(input.shape)} with dimension {2 + list(input.shape[2:]).index(0)} being "
                           f"empty")
    if input.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have the same dtype, but input has "
                           f"{input.dtype} and grid has {grid.dtype}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"grid_sampler\" not implemented for '{input.dtype}'")
    if mode == "bicubic" and input.ndim != 4:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    return run("grid_sample", input, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` (N, C, H, W) or (N, C, D, H, W) at ``grid``'s points (N, H_out, W_out, 2) or
    (N, D_out, H_out, W_out, 3), in [-1, 1] coordinates listed x (width) first.

        >>> image = corenn.arange(4.).reshape(1, 1, 2, 2)
        >>> F.grid_sample(image, corenn.zeros(1, 1, 1, 2), align_corners=True).item()
        1.5
    """
    if not isinstance(mode, str) or mode not in _MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         f"but got: '{mode}'")
    if not isinstance(padding_mode, str) or padding_mode not in _PADDING_MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    return _grid_sample(input, grid, mode, padding_mode, _align_corners_default(align_corners), "grid_sample")


def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):
    """``torch.grid_sampler``: :func:`grid_sample` with the modes as ints (bilinear 0, nearest 1, bicubic 2;
    zeros 0, border 1, reflection 2).

        >>> corenn.grid_sampler(corenn.ones(1, 1, 2, 2), corenn.zeros(1, 1, 1, 2), 0, 0, False).item()
        1.0
    """
    check_tensor(input, "input", "grid_sampler")
    check_tensor(grid, "grid", "grid_sampler")
    modes = {v: k for k, v in _MODES.items()}
    paddings = {v: k for k, v in _PADDING_MODES.items()}
    if not (isinstance(interpolation_mode, int) and isinstance(padding_mode, int)) \
            or interpolation_mode not in modes or padding_mode not in paddings:
        raise RuntimeError(f"grid_sampler(): interpolation_mode must be 0, 1 or 2 and padding_mode 0, 1 or 2, got "
                           f"{interpolation_mode} and {padding_mode}")
    return _grid_sample(input, grid, modes[interpolation_mode], paddings[padding_mode], bool(align_corners),
                        "grid_sampler")


def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """:func:`grid_sampler` for 4-D input only.

        >>> corenn.grid_sampler_2d(corenn.ones(1, 1, 2, 2), corenn.zeros(1, 3, 1, 2), 1, 0, False).shape
        corenn.Size([1, 1, 3, 1])
    """
    if check_tensor(input, "input", "grid_sampler_2d").ndim != 4:
        raise RuntimeError(f"grid_sampler_2d(): expected 4D input, got {input.ndim}D")
    return grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


def grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners):
    """:func:`grid_sampler` for 5-D input only.

        >>> corenn.grid_sampler_3d(corenn.ones(1, 1, 2, 2, 2), corenn.zeros(1, 1, 1, 1, 3), 0, 0, False).item()
        1.0
    """
    if check_tensor(input, "input", "grid_sampler_3d").ndim != 5:
        raise RuntimeError(f"grid_sampler_3d(): expected 5D input, got {input.ndim}D")
    return grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


def _linspace_from_neg_one(theta, steps, align_corners):
    import corenn
    if steps <= 1:
        return corenn.zeros(1, dtype=theta.dtype, device=theta.device)
    points = corenn.linspace(-1, 1, steps, dtype=theta.dtype, device=theta.device)
    return points if align_corners else points * ((steps - 1) / steps)


def affine_grid_generator(theta, size, align_corners):
    """``torch.affine_grid_generator``: the (N, *spatial, dims) grid of ``theta`` (N, dims, dims + 1) over
    ``size``; differentiable in ``theta``.

        >>> corenn.affine_grid_generator(corenn.tensor([[[1., 0, 0], [0, 1, 0]]]), [1, 1, 2, 2], True).tolist()
        [[[[-1.0, -1.0], [1.0, -1.0]], [[-1.0, 1.0], [1.0, 1.0]]]]
    """
    import corenn
    from corenn._argcheck import check_ints
    check_tensor(theta, "theta", "affine_grid_generator")
    size = list(check_ints(size, "size"))
    if len(size) not in (4, 5) or theta.ndim != 3 or tuple(theta.shape[1:]) != (len(size) - 2, len(size) - 1):
        raise RuntimeError(f"affine_grid_generator(): expected theta of shape (N, {max(len(size) - 2, 0)}, "
                           f"{max(len(size) - 1, 0)}) for a size of 4 or 5 ints, got theta of shape "
                           f"{list(theta.shape)} and size {size}")
    if not theta.dtype.is_floating_point:
        raise RuntimeError(f"affine_grid_generator(): expected a floating point theta, got {theta.dtype}")
    spatial = list(size[2:])
    dims = len(spatial)
    # base grid (*spatial, dims + 1): x, y(, z) then 1, x varying along the last spatial dim
    axes = [_linspace_from_neg_one(theta, steps, align_corners) for steps in spatial]
    mesh = corenn.meshgrid(*axes, indexing="ij") if dims > 1 else axes
    columns = [mesh[dims - 1 - k] for k in range(dims)] + [corenn.ones(spatial, dtype=theta.dtype,
                                                                          device=theta.device)]
    base = corenn.stack(columns, dim=-1).reshape(1, -1, dims + 1)
    grid = base @ theta.transpose(1, 2)  # (N, points, dims)
    return grid.reshape([size[0]] + spatial + [dims])


def affine_grid(theta, size, align_corners=None):
    """The sampling grid of the affine maps ``theta`` (N, 2, 3) for a 4-D ``size`` or (N, 3, 4) for a 5-D one,
    for :func:`grid_sample`.

        >>> F.affine_grid(corenn.tensor([[[1., 0, 0], [0, 1, 0]]]), [1, 3, 4, 5], align_corners=False).shape
        corenn.Size([1, 4, 5, 2])
    """
    check_tensor(theta, "theta", "affine_grid")
    align_corners = _align_corners_default(align_corners)
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    from corenn._argcheck import check_ints
    given, size = size, list(check_ints(size, "size"))
    if len(size) == 4:
        if theta.ndim != 3 or theta.shape[-2] != 2 or theta.shape[-1] != 3:
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {given}. "
                             f"Got {theta.shape}.")
        spatial = size[-2:]
    elif len(size) == 5:
        if theta.ndim != 3 or theta.shape[-2] != 3 or theta.shape[-1] != 4:
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {given}. "
                             f"Got {theta.shape}.")
        spatial = size[-3:]
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {given}.")
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation "
                      "of affine_grid for details.", stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {given}")
    return affine_grid_generator(theta, size, align_corners)


# torch.grid_sampler, grid_sampler_2d / 3d and affine_grid_generator are torch-level names; grid_sample and
# affine_grid are nn.functional's.
__all__ = ["grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "affine_grid_generator"]
