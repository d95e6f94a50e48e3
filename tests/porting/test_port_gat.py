"""Port of pytorch/examples ``gat/main.py``: a graph attention network (Velickovic et al.) classifying the
nodes of a citation graph with multi-head attention over each node's neighbours.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on a generated graph
(Cora is a download). It keeps the example's ``GraphAttentionLayer`` (``nn.Parameter(torch.empty(size=(
in_features, n_hidden * n_heads)))`` and ``a`` initialized with ``nn.init.xavier_normal_(..., gain=1.414)``,
``torch.mm``, ``h_transformed.view(n_nodes, n_heads, n_hidden).permute(1, 0, 2)``, ``_get_attention_scores``
with ``torch.matmul`` of the source and target halves of ``a`` and ``mT``, ``F.leaky_relu`` with slope 0.2,
the mask ``torch.where(adj_mat > 0, e, -9e15 * torch.ones_like(e))``, ``F.softmax(dim=-1)``,
``attention`` dropout, ``torch.matmul(attention, h_transformed)``, heads concatenated with
``permute(1, 0, 2).contiguous().view(n_nodes, -1)`` or averaged with ``mean(dim=0)``), the ``GAT`` with
``F.elu`` and ``F.log_softmax``, ``optim.Adam(lr=0.005, weight_decay=5e-4)``, ``nn.NLLLoss`` over
``output[idx_train]``, and ``output.argmax(dim=1)`` accuracy under ``torch.no_grad()``. Dropout is 0.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

NODES, FEATURES, CLASSES = 20, 12, 3


def build(lib, dropout=0.0):
    nn, F = lib.nn, lib.nn.functional

    class GraphAttentionLayer(nn.Module):
        def __init__(self, in_features, out_features, n_heads, concat=False, dropout=0.4, leaky_relu_slope=0.2):
            super().__init__()
            self.n_heads = n_heads
            self.concat = concat
            self.dropout = dropout
            if concat:
                self.out_features = out_features
                assert out_features % n_heads == 0  # the output dimension must split evenly over the heads
                self.n_hidden = out_features // n_heads
            else:
                self.n_hidden = out_features
            self.W = nn.Parameter(lib.empty(size=(in_features, self.n_hidden * n_heads)))
            self.a = nn.Parameter(lib.empty(size=(n_heads, 2 * self.n_hidden, 1)))
            self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)
            self.softmax = nn.Softmax(dim=1)
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.xavier_normal_(self.W, gain=1.414)
            nn.init.xavier_normal_(self.a, gain=1.414)

        def _get_attention_scores(self, h_transformed):
            source_scores = lib.matmul(h_transformed, self.a[:, :self.n_hidden, :])
            target_scores = lib.matmul(h_transformed, self.a[:, self.n_hidden:, :])
            e = source_scores + target_scores.mT
            return self.leakyrelu(e)

        def forward(self, h, adj_mat):
            n_nodes = h.shape[0]
            h_transformed = lib.mm(h, self.W)
            h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)
            h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
            e = self._get_attention_scores(h_transformed)
            connectivity_mask = -9e16 * lib.ones_like(e)
            e = lib.where(adj_mat > 0, e, connectivity_mask)  # masked attention scores
            attention = F.softmax(e, dim=-1)
            attention = F.dropout(attention, self.dropout, training=self.training)
            h_prime = lib.matmul(attention, h_transformed)
            if self.concat:
                h_prime = h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
            else:
                h_prime = h_prime.mean(dim=0)
            return h_prime

    class GAT(nn.Module):
        def __init__(self, in_features, n_hidden, n_heads, num_classes, concat=False, dropout=0.4,
                     leaky_relu_slope=0.2):
            super().__init__()
            self.gat1 = GraphAttentionLayer(in_features=in_features, out_features=n_hidden, n_heads=n_heads,
                                            concat=concat, dropout=dropout, leaky_relu_slope=leaky_relu_slope)
            self.gat2 = GraphAttentionLayer(in_features=n_hidden, out_features=num_classes, n_heads=1,
                                            concat=False, dropout=dropout, leaky_relu_slope=leaky_relu_slope)

        def forward(self, input_tensor, adj_mat):
            x = self.gat1(input_tensor, adj_mat)
            x = F.elu(x)
            x = self.gat2(x, adj_mat)
            return F.log_softmax(x, dim=1)

    return GAT(FEATURES, 16, 4, CLASSES, concat=True, dropout=dropout)


def run(lib, model, features, adjacency, labels, epochs=5):
    features, adj_mat, labels = (lib.from_numpy(a) for a in (features, adjacency, labels))
    idx = lib.arange(NODES)
    idx_train, idx_val = idx[:12], idx[12:]
    optimizer = lib.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    criterion = lib.nn.NLLLoss()
    history = []
    for epoch in range(epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj_mat)
        loss = criterion(output[idx_train], labels[idx_train])
        loss.backward()
        optimizer.step()
        model.eval()
        with lib.no_grad():
            output = model(features, adj_mat)
            val_loss = criterion(output[idx_val], labels[idx_val])
            val_acc = (output[idx_val].argmax(dim=1) == labels[idx_val]).float().mean()
        history.append([loss.item(), val_loss.item(), val_acc.item()])
    return history


def test_gat_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    upper = np.triu((rng.uniform(0, 1, (NODES, NODES)) < 0.25).astype(np.float32), 1)
    adjacency = upper + upper.T + np.eye(NODES, dtype=np.float32)  # self loops, as the example adds
    features = rng.standard_normal((NODES, FEATURES)).astype(np.float32)
    labels = rng.integers(0, CLASSES, NODES).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_history = run(torch, theirs, features, adjacency, labels)
    our_history = run(corenn, ours, features, adjacency, labels)
    assert_same_run(our_history, their_history)
    assert_same_state(ours, theirs, moved_from=start)
