"""Normalization layers: BatchNorm1d/2d (running statistics), LayerNorm, GroupNorm."""
from __future__ import annotations

import numbers
import warnings

import corenn
from corenn.module.module import Module
from corenn.module.parameter import Parameter
from corenn.nn import functional as F, init


def _register_affine(module, shape, affine: bool, bias: bool, device, dtype) -> None:
    """``weight`` (ones) and ``bias`` (zeros) of ``shape``, or None entries when not affine / no bias."""
    weight = Parameter(corenn.ones(shape, device=device, dtype=dtype)) if affine else None
    module.register_parameter("weight", weight)
    module.register_parameter("bias", Parameter(corenn.zeros(shape, device=device, dtype=dtype))
                              if affine and bias else None)


def _reset_affine(module) -> None:
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class _BatchNorm(Module):
    _expected_dims = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _register_affine(self, num_features, affine, bias, device, dtype)
        if track_running_stats:
            self.register_buffer("running_mean", corenn.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", corenn.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", corenn.tensor(0, dtype=corenn.long, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def _check_input_dim(self, input):
        if input.ndim not in self._expected_dims:
            wanted = " or ".join(f"{d}D" for d in self._expected_dims)
            raise ValueError(f"expected {wanted} input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with corenn.no_grad():
                self.num_batches_tracked.add_(1)
            # momentum=None: a cumulative moving average over all batches seen
            factor = 1.0 / int(self.num_batches_tracked) if self.momentum is None else self.momentum
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, batch_stats, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over (N, C) or (N, C, L), with running mean/var for eval.

        >>> nn.BatchNorm1d(16)
        BatchNorm1d(16, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    _expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over (N, C, H, W), per channel.

        >>> nn.BatchNorm2d(3)(corenn.randn(4, 3, 5, 5)).shape
        corenn.Size([4, 3, 5, 5])
    """

    _expected_dims = (4,)


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims, with elementwise affine.

        >>> nn.LayerNorm(64)
        LayerNorm((64,), eps=1e-05, elementwise_affine=True, bias=True)
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        _register_affine(self, self.normalized_shape, elementwise_affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalise each of ``num_groups`` channel groups per sample; per-channel affine.

        >>> nn.GroupNorm(2, 4)
        GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _register_affine(self, num_channels, affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _InstanceNorm(_BatchNorm):
    """Instance norm keeps _BatchNorm's parameters and buffers (PyTorch's _NormBase) with other defaults."""

    _spatial = 1

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def _check_input_dim(self, input):
        if input.ndim not in (self._spatial + 1, self._spatial + 2):
            raise ValueError(f"expected {self._spatial + 1}D or {self._spatial + 2}D input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        feature_dim = input.ndim - (self._spatial + 1)
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          "warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        unbatched = input.ndim == self._spatial + 1
        batched = input.unsqueeze(0) if unbatched else input
        out = F.instance_norm(batched, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats,
                              0.0 if self.momentum is None else self.momentum, self.eps)
        return out.squeeze(0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Normalise each channel of each sample over L: (N, C, L) or (C, L).

        >>> nn.InstanceNorm1d(3)
        InstanceNorm1d(3, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)
    """

    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """Normalise each channel of each sample over (H, W): (N, C, H, W) or (C, H, W).

        >>> nn.InstanceNorm2d(3, affine=True)(corenn.randn(2, 3, 4, 4)).shape
        corenn.Size([2, 3, 4, 4])
    """

    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """Normalise each channel of each sample over (D, H, W): (N, C, D, H, W) or (C, D, H, W).

        >>> nn.InstanceNorm3d(2)(corenn.randn(1, 2, 2, 2, 2)).shape
        corenn.Size([1, 2, 2, 2, 2])
    """

    _spatial = 3


class LocalResponseNorm(Module):
    """Divide by ``(k + alpha * mean of squares over `size` neighbouring channels) ** beta`` (AlexNet).

        >>> nn.LocalResponseNorm(2)
        LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dims, with elementwise scale.

        >>> nn.RMSNorm(4)
        RMSNorm((4,), eps=None, elementwise_affine=True)
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.register_parameter("weight", Parameter(corenn.ones(self.normalized_shape, device=device, dtype=dtype))
                                if elementwise_affine else None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over (N, C, D, H, W), per channel.

        >>> nn.BatchNorm3d(3)(corenn.randn(2, 3, 2, 2, 2)).shape
        corenn.Size([2, 3, 2, 2, 2])
    """

    _expected_dims = (5,)


class CrossMapLRN2d(Module):
    """Lua Torch's cross-channel local response norm of (N, C, H, W) input, as PyTorch's ``nn.CrossMapLRN2d``
    (its own window rule and backward: see ``corenn.ops.normalization.CrossMapLRN2d``).

        >>> nn.CrossMapLRN2d(3, alpha=1e-4, beta=0.75, k=1)
        CrossMapLRN2d(3, alpha=0.0001, beta=0.75, k=1)
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        from corenn.ops.normalization import _cross_map_lrn2d
        return _cross_map_lrn2d(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


def _distributed_initialized() -> bool:
    """Whether a process group is up (``corenn.distributed`` comes from the corenn-distributed plugin)."""
    try:
        from corenn import distributed
    except ImportError:
        return False
    return distributed.is_available() and distributed.is_initialized()


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose training statistics span every process of ``process_group`` (``torch.nn.SyncBatchNorm``).

    Without an initialized process group (or in eval mode) it is batch norm over (N, C, *) input, as in
    PyTorch; with one, PyTorch accepts only accelerator input (CPU input is its ValueError), and the
    statistics exchange across several processes is not implemented (NotImplementedError).

        >>> nn.SyncBatchNorm(3)(corenn.randn(4, 3, 2)).shape
        corenn.Size([4, 3, 2])
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if batch_stats and self.training and _distributed_initialized():
            from corenn import distributed
            if input.device.type == "cpu":
                raise ValueError("SyncBatchNorm expected input tensor to be on GPU or XPU or privateuseone")
            group = self.process_group if self.process_group else distributed.group.WORLD
            if distributed.get_world_size(group) > 1:
                raise NotImplementedError("SyncBatchNorm: synchronizing the batch statistics of several processes is "
                                          "not implemented")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm*d (recursively) replaced by a SyncBatchNorm holding the same parameters
        and buffers.

            >>> nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)))[1]
            SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
        """
        output = module
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNorm):  # PyTorch's _BatchNorm only
            output = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                         process_group, bias=module.bias is not None)
            if module.affine:
                with corenn.no_grad():
                    output.weight = module.weight
                    output.bias = module.bias
            output.running_mean = module.running_mean
            output.running_var = module.running_var
            output.num_batches_tracked = module.num_batches_tracked
            output.training = module.training
            if hasattr(module, "qconfig"):
                output.qconfig = module.qconfig
        for name, child in module.named_children():
            output.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return output
