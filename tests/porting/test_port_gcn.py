"""Port of pytorch/examples ``gcn/main.py``: a two-layer graph convolutional network (Kipf and Welling)
classifying the nodes of a citation graph.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on a generated
graph (Cora is a download). It keeps the example's ``GraphConv`` (``nn.Parameter(torch.Tensor(input_dim,
output_dim))`` filled by ``nn.init.xavier_normal_``, an optional ``zeros_`` bias, ``torch.mm`` of features
and kernel, then the adjacency product), the ``GCN`` with ``F.relu``, ``nn.Dropout`` and
``torch.log_softmax``, the symmetric normalization of ``A + I`` (``torch.eye``, ``torch.sum(dim=1)``,
``pow(-0.5)``, ``torch.diag``), ``optim.Adam(lr=0.01, weight_decay=5e-4)``, ``F.nll_loss`` over
``output[idx_train]`` and the accuracy ``output[idx].max(1)[1].eq(labels[idx]).double().sum() / len(idx)``.
The example multiplies by a sparse adjacency with ``torch.spmm``; corenn has no sparse tensors (by
design), so this version keeps the normalized adjacency dense and uses ``torch.mm``. Dropout is 0.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

NODES, FEATURES, HIDDEN, CLASSES = 24, 10, 8, 3


def build(lib, dropout_p=0.0, use_bias=True):
    nn = lib.nn

    class GraphConv(nn.Module):
        def __init__(self, input_dim, output_dim, use_bias=False):
            super().__init__()
            self.kernel = nn.Parameter(lib.Tensor(input_dim, output_dim))
            nn.init.xavier_normal_(self.kernel)
            self.bias = None
            if use_bias:
                self.bias = nn.Parameter(lib.Tensor(output_dim))
                nn.init.zeros_(self.bias)

        def forward(self, input_tensor, adj_mat):
            support = lib.mm(input_tensor, self.kernel)
            output = lib.mm(adj_mat, support)
            if self.bias is not None:
                output = output + self.bias
            return output

    class GCN(nn.Module):
        def __init__(self, input_dim, hidden_dim, output_dim):
            super().__init__()
            self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
            self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, input_tensor, adj_mat):
            x = self.gc1(input_tensor, adj_mat)
            x = lib.nn.functional.relu(x)
            x = self.dropout(x)
            x = self.gc2(x, adj_mat)
            return lib.log_softmax(x, dim=1)

    return GCN(FEATURES, HIDDEN, CLASSES)


def normalize_adjacency(lib, adj_mat):
    adj_mat = adj_mat + lib.eye(adj_mat.size(0))
    degree = lib.sum(adj_mat, dim=1)
    d_inv_sqrt = lib.diag(degree.pow(-0.5))
    return lib.mm(lib.mm(d_inv_sqrt, adj_mat), d_inv_sqrt)


def run(lib, model, features, adjacency, labels, epochs=6):
    F = lib.nn.functional
    features, labels = lib.from_numpy(features), lib.from_numpy(labels)
    adj_mat = normalize_adjacency(lib, lib.from_numpy(adjacency))
    idx = lib.arange(NODES)
    idx_train, idx_val, idx_test = idx[:12], idx[12:18], idx[18:]
    optimizer = lib.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def accuracy(output, idx):
        return output[idx].max(1)[1].eq(labels[idx]).double().sum() / len(idx)

    history = []
    for epoch in range(epochs):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj_mat)
        loss = F.nll_loss(output[idx_train], labels[idx_train])
        loss.backward()
        optimizer.step()
        model.eval()
        with lib.no_grad():
            output = model(features, adj_mat)
            val_loss = F.nll_loss(output[idx_val], labels[idx_val])
            history.append([loss.item(), val_loss.item(), accuracy(output, idx_val).item()])
    with lib.no_grad():
        test_acc = accuracy(model(features, adj_mat), idx_test).item()
    return history, test_acc


def test_gcn_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    upper = np.triu((rng.uniform(0, 1, (NODES, NODES)) < 0.2).astype(np.float32), 1)
    adjacency = upper + upper.T
    features = rng.standard_normal((NODES, FEATURES)).astype(np.float32)
    labels = rng.integers(0, CLASSES, NODES).astype(np.int64)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_history, their_test = run(torch, theirs, features, adjacency, labels)
    our_history, our_test = run(corenn, ours, features, adjacency, labels)
    assert_same_run(our_history, their_history)
    assert our_test == their_test
    assert_same_state(ours, theirs, moved_from=start)
