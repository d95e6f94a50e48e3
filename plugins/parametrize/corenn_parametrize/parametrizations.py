"""``corenn.nn.utils.parametrizations``: orthogonal, spectral_norm and weight_norm (mirrors ``torch.nn.utils.parametrizations``).

Each registers a parametrization module with
:func:`corenn_parametrize.parametrize.register_parametrization`, with PyTorch's
state-dict layout, so checkpoints move between corenn and PyTorch:

- ``orthogonal``: ``parametrizations.weight.original`` and, with the dynamic
  trivialization (default), ``parametrizations.weight.0.base``;
- ``spectral_norm``: ``parametrizations.weight.original``, ``parametrizations.weight.0._u``
  and ``._v``;
- ``weight_norm``: ``parametrizations.weight.original0`` (g) and ``original1`` (v); the
  old ``weight_g`` / ``weight_v`` keys load too.

Example::

    >>> from corenn import nn
    >>> from corenn.nn.utils import parametrizations
    >>> layer = parametrizations.orthogonal(nn.Linear(4, 4))
    >>> W = layer.weight
    >>> bool(corenn.allclose(W.mT @ W, corenn.eye(4), atol=1e-5))
    True
"""
from __future__ import annotations

from enum import Enum, auto

import corenn
import corenn.nn.functional as F
from corenn.nn import Module

from corenn_parametrize import linalg
from corenn_parametrize import parametrize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    """The orthogonal parametrization: ``forward(X)`` maps any tensor of the weight's shape to an orthogonal one."""

    def __init__(self, weight, orthogonal_map: _OrthMaps, *, use_trivialization: bool = True) -> None:
        super().__init__()
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        # X is tall from here on: n >= k.
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            # n*k - k*(k-1)/2 free numbers: the lower triangle, embedded in an n x n skew-symmetric matrix.
            X = X.tril()
            if n != k:
                X = corenn.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = linalg.matrix_exp(A)
            else:
                # The Cayley retraction (I + A/2)(I - A/2)^-1, computed as a solve.
                identity = corenn.eye(n, dtype=A.dtype, device=A.device)
                Q = linalg.solve(identity - 0.5 * A, identity + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = linalg.householder_product(A, tau)
            # X's diagonal holds the signs (+-1) of Q's columns; cast so that no gradient flows into it.
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q):
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {Q.shape}.")
        with corenn.no_grad():
            Q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if not hasattr(self, "base"):
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                              "parametrizations when use_trivialization=False.")
                # Householder: the reflectors of Q's QR decomposition, with diag(R) > 0 written as signs.
                reflectors, tau = linalg.geqrf(Q)
                diagonal = reflectors.diagonal(dim1=-2, dim2=-1).sign()
                # LAPACK skips a reflection (tau == 0) where none is needed; flip that sign, as PyTorch does.
                diagonal = corenn.where(tau == 0.0, -diagonal, diagonal)
                eye = corenn.eye(n, k, dtype=Q.dtype, device=Q.device)
                A = reflectors * (1 - eye) + diagonal.unsqueeze(-2) * eye
                return A.mT if transpose else A
            if n == k:
                Q = Q.clone() if linalg.is_orthogonal(Q) else linalg.make_orthogonal(Q)
            else:
                # Complete Q to a full n x n orthogonal matrix.
                N = corenn.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype, device=Q.device)
                Q = linalg.make_orthogonal(corenn.cat([Q, N], dim=-1))
            self.base = Q
            # -Id: then householder(zeros) is eye(n, k) and the weight equals base's first columns.
            return -corenn.eye(Q_init.shape[-2], Q_init.shape[-1], dtype=Q_init.dtype,
                               device=Q_init.device).expand(Q_init.shape).clone()


def _check_tensor_attribute(function: str, module, name):
    if not isinstance(module, Module):
        raise TypeError(f"{function}(): argument 'module' must be corenn.nn.Module, not {type(module).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"{function}(): argument 'name' must be str, not {type(name).__name__}")
    weight = getattr(module, name, None)
    if not isinstance(weight, corenn.Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    return weight


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Constrain ``module.<name>`` to orthogonal matrices: ``Q^T Q = I`` (tall or square) or ``Q Q^T = I`` (wide).

    A tensor with more than two dimensions is a batch of matrices. ``orthogonal_map``:
    ``"matrix_exp"`` or ``"cayley"`` (of a skew-symmetric matrix) or ``"householder"``
    (a product of reflectors); default ``"matrix_exp"`` for square matrices and
    ``"householder"`` otherwise. ``use_trivialization=True`` (default) keeps an extra
    orthogonal matrix ``parametrizations.<name>[0].base`` that the map is applied from
    (the dynamic trivialization), and lets you assign ``module.weight = Q``. The initial
    weight is the current one if it is orthogonal, else the Q of its QR decomposition.

    Example::

        >>> layer = parametrizations.orthogonal(nn.Linear(3, 5))
        >>> layer.weight.shape
        corenn.Size([5, 3])
        >>> bool(corenn.allclose(layer.weight.mT @ layer.weight, corenn.eye(3), atol=1e-5))
        True
    """
    weight = _check_tensor_attribute("orthogonal", module, name)
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if not weight.dtype.is_floating_point:
        raise ValueError(f"orthogonal(): the tensor '{name}' must be floating point, got {weight.dtype}")
    if orthogonal_map is None:
        orthogonal_map = ("matrix_exp" if weight.shape[-2] == weight.shape[-1] or weight.is_complex()
                          else "householder")
    map_enum = getattr(_OrthMaps, orthogonal_map, None) if isinstance(orthogonal_map, str) else None
    if map_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    parametrization = _Orthogonal(weight, map_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, parametrization, unsafe=True)
    return module


class _WeightNorm(Module):
    """``weight = g * v / ||v||``, the norm taken over every dimension but ``dim`` (all of them for ``dim=-1``)."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        if dim is None:
            dim = -1
        self.dim = dim

    def forward(self, weight_g, weight_v):
        return weight_v * (weight_g / norm_except_dim(weight_v, 2, self.dim))

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def norm_except_dim(v, pow: float = 2, dim: int = 0):
    """The ``pow``-norm of ``v`` over every dimension but ``dim``, shaped to broadcast against ``v`` (``torch.norm_except_dim``).

    ``dim=-1`` means "no dimension kept": the norm of the whole tensor, a 0-d tensor.

    Example::

        >>> norm_except_dim(corenn.tensor([[3.0, 4.0], [0.0, 1.0]]), 2, 0)
        tensor([[5.],
                [1.]])
    """
    if dim == -1:
        return corenn.norm(v, pow)
    kept = dim % v.ndim
    others = tuple(d for d in range(v.ndim) if d != kept)
    if not others:
        return v.abs()
    return corenn.norm(v, pow, dim=others, keepdim=True)


class WeightNormStateDictCompat:
    """Load-state-dict pre-hook: ``<name>_g`` / ``<name>_v`` (the old ``weight_norm``) load as ``original0`` / ``original1``.

    Registered on ``module.parametrizations[name]`` by :func:`weight_norm`, so it goes
    away with the parametrization and is copied and pickled with the module.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, parametrization_list, state_dict, prefix, *rest) -> None:
        suffix = f"parametrizations.{self.name}."
        if not prefix.endswith(suffix):
            return
        owner_prefix = prefix[:-len(suffix)]
        g_key, v_key = f"{owner_prefix}{self.name}_g", f"{owner_prefix}{self.name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[prefix + "original0"] = state_dict.pop(g_key)
            state_dict[prefix + "original1"] = state_dict.pop(v_key)


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization: ``weight = g * v / ||v||`` with ``g`` (``original0``) and ``v`` (``original1``) trained.

    The norm is taken per slice along ``dim`` (per output unit for ``dim=0``) or over the
    whole tensor for ``dim=None``. State dicts of the old ``weight_norm`` (keys
    ``weight_g``, ``weight_v``) load into a module parametrized by this one.

    Example::

        >>> layer = parametrizations.weight_norm(nn.Linear(20, 40))
        >>> layer.parametrizations.weight.original0.shape
        corenn.Size([40, 1])
        >>> layer.parametrizations.weight.original1.shape
        corenn.Size([40, 20])
    """
    weight = _check_tensor_attribute("weight_norm", module, name)
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"weight_norm(): argument 'dim' must be int or None, not {type(dim).__name__}")
    if dim is not None and dim != -1 and not -weight.ndim <= dim < weight.ndim:
        raise IndexError(f"weight_norm(): Dimension out of range (expected to be in range of [-{weight.ndim}, "
                         f"{weight.ndim - 1}] but got {dim})")
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    module.parametrizations[name].register_load_state_dict_pre_hook(WeightNormStateDictCompat(name))
    return module


class _SpectralNorm(Module):
    """``weight / sigma(weight)``, sigma the largest singular value, estimated by power iteration on ``_u`` and ``_v``."""

    def __init__(self, weight, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            # A vector needs no estimate (forward normalises it exactly).
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight.detach())
            h, w = weight_mat.shape
            u = weight_mat.new_empty(h).normal_(0, 1)
            v = weight_mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            # Start from good estimates of the singular vectors.
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations: int) -> None:
        # _u and _v are updated in place: a module copy sharing the buffers (and a state dict
        # taken with keep_vars) sees the new estimates.
        with corenn.no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(corenn.mv(weight_mat, self._v), dim=0, eps=self.eps))
                self._v.copy_(F.normalize(corenn.mv(weight_mat.mT, self._u), dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat.detach(), self.n_power_iterations)
        # Clones: a second forward's in-place update must not change what the first one's backward uses.
        u = self._u.clone()
        v = self._v.clone()
        sigma = corenn.dot(u, corenn.mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
                  dim: int | None = None) -> Module:
    """Spectral normalization: ``weight / sigma(weight)``, sigma estimated by ``n_power_iterations`` of the power method.

    The singular-vector estimates ``_u`` and ``_v`` are buffers of
    ``parametrizations.<name>[0]``; they are refined at every read of the weight in
    training mode and frozen in eval mode (reads are then deterministic). ``dim`` is the
    output dimension: 0, or 1 for transposed convolutions.

    Example::

        >>> layer = parametrizations.spectral_norm(nn.Linear(20, 40))
        >>> sorted(layer.state_dict())
        ['bias', 'parametrizations.weight.0._u', 'parametrizations.weight.0._v', 'parametrizations.weight.original']
    """
    weight = _check_tensor_attribute("spectral_norm", module, name)
    if not isinstance(n_power_iterations, int) or isinstance(n_power_iterations, bool):
        raise TypeError("spectral_norm(): argument 'n_power_iterations' must be int, not "
                        f"{type(n_power_iterations).__name__}")
    if dim is None:
        transposed = tuple(getattr(corenn.nn, kind) for kind in ("ConvTranspose1d", "ConvTranspose2d",
                                                                 "ConvTranspose3d") if hasattr(corenn.nn, kind))
        dim = 1 if transposed and isinstance(module, transposed) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
