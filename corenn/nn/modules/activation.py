"""Activation layers and MultiheadAttention."""
from __future__ import annotations

import corenn
from corenn.module.module import Module
from corenn.module.parameter import Parameter
from corenn.nn import functional as F, init
from corenn.nn.modules.linear import Linear


def _inplace_repr(inplace):
    return "inplace=True" if inplace else ""


class ReLU(Module):
    """``max(x, 0)``.

        >>> nn.ReLU()
        ReLU()
    """

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class LeakyReLU(Module):
    """``x`` if positive else ``negative_slope * x``.

        >>> nn.LeakyReLU(0.2)
        LeakyReLU(negative_slope=0.2)
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` if positive else ``alpha * (exp(x) - 1)``.

        >>> nn.ELU()
        ELU(alpha=1.0)
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(Module):
    """Continuously differentiable ELU.

        >>> nn.CELU()
        CELU(alpha=1.0)
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class SELU(Module):
    """Self-normalising ELU.

        >>> nn.SELU()
        SELU()
    """

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.selu(input, self.inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class GELU(Module):
    """Gaussian error linear unit (``approximate='tanh'`` for the tanh form).

        >>> nn.GELU()
        GELU(approximate='none')
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)``.

        >>> nn.SiLU()
        SiLU()
    """

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        out = F.silu(input)
        return input._inplace_from(out) if self.inplace else out

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class Hardtanh(Module):
    """Clamp to ``[min_val, max_val]``.

        >>> nn.Hardtanh()
        Hardtanh(min_val=-1.0, max_val=1.0)
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``.

        >>> nn.ReLU6()
        ReLU6()
    """

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return _inplace_repr(self.inplace)


class Softmax(Module):
    """Softmax along ``dim``.

        >>> nn.Softmax(dim=1)
        Softmax(dim=1)
    """

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """Log-softmax along ``dim``.

        >>> nn.LogSoftmax(dim=1)
        LogSoftmax(dim=1)
    """

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softplus(Module):
    """``log(1 + exp(beta x)) / beta``, linear above ``threshold``.

        >>> nn.Softplus()
        Softplus(beta=1.0, threshold=20.0)
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


def _simple(name, function, doc):
    def forward(self, input):
        return function(input)

    cls = type(name, (Module,), {"forward": forward, "__doc__": doc, "__module__": __name__})
    return cls


Sigmoid = _simple("Sigmoid", F.sigmoid, "``1 / (1 + exp(-x))``.\n\n        >>> nn.Sigmoid()\n        Sigmoid()\n")
Tanh = _simple("Tanh", F.tanh, "Hyperbolic tangent.\n\n        >>> nn.Tanh()\n        Tanh()\n")
Mish = _simple("Mish", F.mish, "``x * tanh(softplus(x))``.\n\n        >>> nn.Mish()\n        Mish()\n")
Hardswish = _simple("Hardswish", F.hardswish, "``x * relu6(x + 3) / 6``.\n\n        >>> nn.Hardswish()\n"
                                              "        Hardswish()\n")
Hardsigmoid = _simple("Hardsigmoid", F.hardsigmoid, "``relu6(x + 3) / 6``.\n\n        >>> nn.Hardsigmoid()\n"
                                                    "        Hardsigmoid()\n")
LogSigmoid = _simple("LogSigmoid", F.logsigmoid, "``log(sigmoid(x))``.\n\n        >>> nn.LogSigmoid()\n"
                                                 "        LogSigmoid()\n")
Softsign = _simple("Softsign", F.softsign, "``x / (1 + |x|)``.\n\n        >>> nn.Softsign()\n        Softsign()\n")
Tanhshrink = _simple("Tanhshrink", F.tanhshrink, "``x - tanh(x)``.\n\n        >>> nn.Tanhshrink()\n"
                                                 "        Tanhshrink()\n")


class PReLU(Module):
    """``max(0, x) + a * min(0, x)`` with a learned slope ``a``: one, or one per channel (dim 1).

        >>> nn.PReLU(num_parameters=3, init=0.1)
        PReLU(num_parameters=3)
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(corenn.empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


# ---------------------------------------------------------------------------------------------------------
# MultiheadAttention
# ---------------------------------------------------------------------------------------------------------

class NonDynamicallyQuantizableLinear(Linear):
    """The output projection of MultiheadAttention (PyTorch's name, kept so reprs and state dicts match)."""


class MultiheadAttention(Module):
    """Multi-head scaled dot-product attention with input and output projections (PyTorch's parameters).

    Inputs are (L, N, E) or, with ``batch_first=True``, (N, L, E). Masks follow
    PyTorch: in ``attn_mask`` and ``key_padding_mask`` a bool True means *not*
    allowed; float masks are added to the scores.

        >>> mha = nn.MultiheadAttention(16, 4, batch_first=True)
        >>> x = corenn.randn(2, 5, 16)
        >>> out, weights = mha(x, x, x)
        >>> out.shape, weights.shape
        (corenn.Size([2, 5, 16]), corenn.Size([2, 5, 5]))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads != 0:
            raise AssertionError("embed_dim must be divisible by num_heads")
        factory = dict(device=device, dtype=dtype)
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(corenn.empty((3 * embed_dim, embed_dim), **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:  # keys/values of other widths get their own projections (PyTorch's names)
            self.q_proj_weight = Parameter(corenn.empty((embed_dim, embed_dim), **factory))
            self.k_proj_weight = Parameter(corenn.empty((embed_dim, self.kdim), **factory))
            self.v_proj_weight = Parameter(corenn.empty((embed_dim, self.vdim), **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(corenn.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **factory)
        if add_bias_kv:  # one learned key and value appended to every sequence
            self.bias_k = Parameter(corenn.empty((1, 1, embed_dim), **factory))
            self.bias_v = Parameter(corenn.empty((1, 1, embed_dim), **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise AssertionError(f"query, key and value should all be 2-D (unbatched) or 3-D (batched), got "
                                 f"{query.ndim}-D, {key.ndim}-D and {value.ndim}-D")
        if batched and self.batch_first:  # (L, N, E) for the functional form
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise AssertionError(f"MultiheadAttention: expected key and value of widths kdim={self.kdim} and "
                                 f"vdim={self.vdim}, got {key.shape[-1]} and {value.shape[-1]}")
        if is_causal and attn_mask is None:
            length, source = query.shape[0], key.shape[0]
            attn_mask = corenn.ones(length, source, dtype=corenn.bool, device=query.device).triu(1)
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        return out, weights


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``.

        >>> nn.Threshold(0.1, 20.)
        Threshold(threshold=0.1, value=20.0)
    """

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class GLU(Module):
    """Gated linear unit along ``dim``: first half times sigmoid of the second.

        >>> nn.GLU()(corenn.ones(2, 4)).shape
        corenn.Size([2, 2])
    """

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Hardshrink(Module):
    """``x`` where ``|x| > lambd``, else 0.

        >>> nn.Hardshrink()
        Hardshrink(0.5)
    """

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    """Shrink towards zero by ``lambd`` (0 inside ``[-lambd, lambd]``).

        >>> nn.Softshrink(1.)(corenn.tensor([-3., 0.5, 2.])).tolist()
        [-2.0, 0.0, 1.0]
    """

    def forward(self, input):
        return F.softshrink(input, self.lambd)


class RReLU(Module):
    """Randomized leaky ReLU: slopes drawn from U(lower, upper) in training, their mean in eval.

        >>> nn.RReLU(0.1, 0.3)
        RReLU(lower=0.1, upper=0.3)
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class Softmin(Module):
    """``softmax(-x)`` along ``dim``.

        >>> nn.Softmin(dim=1)
        Softmin(dim=1)
    """

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of (N, C, H, W) or (C, H, W) input, at every position.

        >>> nn.Softmax2d()(corenn.zeros(1, 2, 1, 1)).flatten().tolist()
        [0.5, 0.5]
    """

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3, _stacklevel=5)
