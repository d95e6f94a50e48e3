"""AdaptiveLogSoftmaxWithLoss: the efficient softmax approximation of Grave et al. (2016) for large vocabularies.

Frequent classes (the shortlist, below ``cutoffs[0]``) get a full logit in the head; the others are grouped into
clusters, each with one logit in the head and its own smaller projection for the classes inside it.
"""
from __future__ import annotations

from collections import namedtuple

import corenn
from corenn.module.container import ModuleList, Sequential
from corenn.module.module import Module
from corenn.nn import functional as F
from corenn.nn.modules.linear import Linear

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """Log-probabilities of the targets (``output``) and their mean negative (``loss``) through a head over the
    shortlist and the clusters, and one two-layer tail per cluster (widths divided by ``div_value ** (i + 1)``).

        >>> asm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs=[4, 8])
        >>> out = asm(corenn.randn(3, 8), corenn.tensor([0, 5, 9]))
        >>> out.output.shape, out.loss.shape
        (corenn.Size([3]), corenn.Size([]))
    """

    def __init__(self, in_features: int, n_classes: int, cutoffs, div_value: float = 4.0, head_bias: bool = False,
                 device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in an increasing "
                             "order, where each value is between 1 and n_classes-1")
        factory = dict(device=device, dtype=dtype)
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **factory)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False, **factory),
                                        Linear(hidden, size, bias=False, **factory)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        if target_.ndim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch dimension.")
            if input_.ndim != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with size "
                                   f"{input_.size()}")
        elif target_.ndim == 0:
            if input_.ndim != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with size "
                                   f"{input_.size()}")
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.ndim > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        batch = target.shape[0]
        output = corenn.zeros(batch, dtype=input.dtype, device=input.device)
        head_index = target.clone()  # the head logit each row reads: its class, or its cluster's
        used_rows = 0
        bounds = [0] + self.cutoffs
        for i in range(len(bounds) - 1):
            rows = ((target >= bounds[i]) & (target < bounds[i + 1])).nonzero().reshape(-1)
            if rows.numel() == 0:
                continue
            if i > 0:
                relative = target.index_select(0, rows) - bounds[i]
                cluster_logprob = F.log_softmax(self.tail[i - 1](input.index_select(0, rows)), dim=1)
                output = output.index_add(0, rows, cluster_logprob.gather(1, relative.unsqueeze(1)).squeeze(1))
                head_index = head_index.index_fill(0, rows, self.shortlist_size + i - 1)
            used_rows += rows.numel()
        if used_rows != batch:
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but values in range "
                               f"[{target.min().item()}, {target.max().item()}] were found. ")
        head_logprob = F.log_softmax(self.head(input), dim=1)
        output = output + head_logprob.gather(1, head_index.unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _get_full_log_prob(self, input, head_output):
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return corenn.cat(parts, dim=1)

    def log_prob(self, input):
        """Log-probabilities of every class, (N, n_classes).

            >>> nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4]).log_prob(corenn.randn(2, 8)).exp().sum(1).round().tolist()
            [1.0, 1.0]
        """
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most likely class of each row (the full distribution is computed only for rows whose head picks
        a cluster).

            >>> nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4]).predict(corenn.randn(3, 8)).shape
            corenn.Size([3])
        """
        head_output = self.head(input)
        output = corenn.argmax(head_output, dim=1)
        not_in_shortlist = output >= self.shortlist_size
        if not not_in_shortlist.any():
            return output
        if not_in_shortlist.all():
            return corenn.argmax(self._get_full_log_prob(input, head_output), dim=1)
        log_prob = self._get_full_log_prob(input[not_in_shortlist], head_output[not_in_shortlist])
        output[not_in_shortlist] = corenn.argmax(log_prob, dim=1)
        return output
