"""Port of pytorch/examples ``snli`` (``model.py`` and ``train.py``): natural-language inference, a
premise and a hypothesis encoded by a shared bidirectional LSTM, then an MLP over their combination.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
token batches (torchtext and SNLI are not available here). It keeps the example's ``Bottle`` mixin
(``input.view(size[0] * size[1], -1)`` through a layer and back), ``nn.Embedding`` with a frozen copy
(``embed.weight.requires_grad = False`` under ``fix_emb``), ``Linear`` projection and ``ReLU``,
the encoder's ``inputs.size()[1]``-batched initial ``new_zeros`` states and ``ht[-2:].transpose(0, 1)
.contiguous().view(batch_size, -1)``, the classifier's ``torch.cat([premise, hypothesis], 1)`` into
``nn.Sequential`` of ``Linear``/``ReLU``/``Dropout``, ``nn.CrossEntropyLoss``,
``optim.Adam`` over ``filter(lambda p: p.requires_grad, ...)`` and the accuracy count
``(torch.max(answer, 1)[1].view(label.size()) == label).sum().item()``. Where the example feeds
whole padded batches, this version also packs them (``pack_padded_sequence`` with
``enforce_sorted=False``), as text classifiers usually do, so that padding does not reach the
final states. Dropout is 0 in training (different masks per framework).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

N_EMBED, D_EMBED, D_PROJ, D_HIDDEN, D_OUT = 30, 8, 8, 8, 3


def build(lib, dp_ratio=0.0, fix_emb=True):
    nn = lib.nn
    pack_padded_sequence = lib.nn.utils.rnn.pack_padded_sequence

    class Bottle(nn.Module):
        def forward(self, input):
            if len(input.size()) <= 2:
                return super().forward(input)
            size = input.size()[:2]
            out = super().forward(input.view(size[0] * size[1], -1))
            return out.view(size[0], size[1], -1)

    class Linear(Bottle, nn.Linear):
        pass

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(input_size=D_PROJ, hidden_size=D_HIDDEN, num_layers=1, dropout=dp_ratio,
                               bidirectional=True)

        def forward(self, inputs, lengths):
            batch_size = inputs.size()[1]
            state_shape = 2, batch_size, D_HIDDEN
            h0 = c0 = inputs.new_zeros(state_shape)
            packed = pack_padded_sequence(inputs, lengths, enforce_sorted=False)
            _outputs, (ht, _ct) = self.rnn(packed, (h0, c0))
            return ht[-2:].transpose(0, 1).contiguous().view(batch_size, -1)

    class SNLIClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(N_EMBED, D_EMBED, padding_idx=0)
            self.projection = Linear(D_EMBED, D_PROJ)
            self.encoder = Encoder()
            self.dropout = nn.Dropout(p=dp_ratio)
            self.relu = nn.ReLU()
            seq_in_size = 2 * D_HIDDEN * 2
            lin_config = [seq_in_size] * 2
            self.out = nn.Sequential(
                Linear(*lin_config), self.relu, self.dropout,
                Linear(*lin_config), self.relu, self.dropout,
                Linear(*lin_config), self.relu, self.dropout,
                Linear(seq_in_size, D_OUT))
            if fix_emb:
                self.embed.weight.requires_grad = False

        def forward(self, premise, premise_lengths, hypothesis, hypothesis_lengths):
            prem_embed = self.embed(premise)
            hypo_embed = self.embed(hypothesis)
            prem_embed = self.relu(self.projection(prem_embed))
            hypo_embed = self.relu(self.projection(hypo_embed))
            premise = self.encoder(prem_embed, premise_lengths)
            hypothesis = self.encoder(hypo_embed, hypothesis_lengths)
            scores = self.out(lib.cat([premise, hypothesis], 1))
            return scores

    return SNLIClassifier()


def train(lib, model, batches):
    criterion = lib.nn.CrossEntropyLoss()
    opt = lib.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=0.01)
    losses = []
    n_correct, n_total = 0, 0
    for premise, premise_lengths, hypothesis, hypothesis_lengths, label in batches:
        model.train()
        opt.zero_grad()
        label = lib.from_numpy(label)
        answer = model(lib.from_numpy(premise), lib.from_numpy(premise_lengths),
                       lib.from_numpy(hypothesis), lib.from_numpy(hypothesis_lengths))
        n_correct += (lib.max(answer, 1)[1].view(label.size()) == label).sum().item()
        n_total += len(label)
        loss = criterion(answer, label)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with lib.no_grad():
        premise, premise_lengths, hypothesis, hypothesis_lengths, label = batches[0]
        answer = model(lib.from_numpy(premise), lib.from_numpy(premise_lengths),
                       lib.from_numpy(hypothesis), lib.from_numpy(hypothesis_lengths))
    return losses, n_correct, n_total, answer


def _batches(n=4, batch=6, seq=7, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        sides = []
        for _side in range(2):
            lengths = rng.integers(2, seq + 1, batch)
            tokens = rng.integers(1, N_EMBED, (seq, batch))
            tokens[np.arange(seq)[:, None] >= lengths[None, :]] = 0  # padding after each sentence
            sides += [tokens.astype(np.int64), lengths.astype(np.int64)]
        batches.append((*sides, rng.integers(0, D_OUT, batch).astype(np.int64)))
    return batches


def test_snli_classifier_trains_the_same_in_both_frameworks(torch):
    batches = _batches()
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    assert not ours.embed.weight.requires_grad
    their_losses, their_correct, their_total, their_answer = train(torch, theirs, batches)
    our_losses, our_correct, our_total, our_answer = train(corenn, ours, batches)
    assert_same_run(our_losses, their_losses)
    assert (our_correct, our_total) == (their_correct, their_total)
    assert_same_run([our_answer], [their_answer])
    assert_same_state(ours, theirs, moved_from=start)
    np.testing.assert_array_equal(numpy_state(ours)["embed.weight"], start["embed.weight"])  # frozen
