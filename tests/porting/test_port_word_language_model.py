"""Port of pytorch/examples ``word_language_model`` (``model.py`` and ``main.py``): a language model over
a token stream, as an LSTM, a GRU, a tanh RNN or a Transformer encoder.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on a generated
corpus. It keeps the example's pieces: ``getattr(nn, rnn_type)``, the ``RNN_TANH`` branch,
``decoder.weight = encoder.weight`` (tied weights), ``init_weights`` with ``nn.init.uniform_``/
``zeros_``, ``weight.new_zeros`` hidden states, ``batchify``/``get_batch`` with ``narrow``/``view``/
``t().contiguous()``, ``repackage_hidden`` (``detach`` through tuples), the Transformer model's
``PositionalEncoding`` buffer and ``nn.Transformer.generate_square_subsequent_mask``,
``clip_grad_norm_(model.parameters(), 0.25)`` and the hand-written SGD ``p.data.add_(p.grad, alpha=-lr)``.
Dropout is 0 in training because the two frameworks draw different masks.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

NTOKENS = 17


def build(lib, rnn_type, ntoken=NTOKENS, ninp=12, nhid=12, nlayers=2, dropout=0.0, tie_weights=True):
    nn, F = lib.nn, lib.nn.functional

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            if rnn_type in ["LSTM", "GRU"]:
                self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            else:
                nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
                self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            if tie_weights:
                if nhid != ninp:
                    raise ValueError("When using the tied flag, nhid must be equal to emsize")
                self.decoder.weight = self.encoder.weight
            self.init_weights()
            self.rnn_type = rnn_type
            self.nhid = nhid
            self.nlayers = nlayers

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            decoded = decoded.view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if self.rnn_type == "LSTM":
                return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                        weight.new_zeros(self.nlayers, bsz, self.nhid))
            return weight.new_zeros(self.nlayers, bsz, self.nhid)

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=64):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = lib.zeros(max_len, d_model)
            position = lib.arange(0, max_len, dtype=lib.float).unsqueeze(1)
            div_term = lib.exp(lib.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
            pe[:, 0::2] = lib.sin(position * div_term)
            pe[:, 1::2] = lib.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer("pe", pe)

        def forward(self, x):
            x = x + self.pe[:x.size(0), :]
            return self.dropout(x)

    class TransformerModel(nn.Transformer):
        def __init__(self, nhead=2):
            super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers,
                             dropout=dropout)
            self.model_type = "Transformer"
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(ninp, dropout)
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)
            self.init_weights()

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, src, has_mask=True):
            if has_mask:
                if self.src_mask is None or self.src_mask.size(0) != len(src):
                    self.src_mask = nn.Transformer.generate_square_subsequent_mask(len(src))
            else:
                self.src_mask = None
            src = self.input_emb(src) * math.sqrt(self.ninp)
            src = self.pos_encoder(src)
            output = self.encoder(src, mask=self.src_mask)
            output = self.decoder(output)
            return F.log_softmax(output, dim=-1)

    return TransformerModel() if rnn_type == "Transformer" else RNNModel()


def batchify(lib, data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(lib, h):
    if isinstance(h, lib.Tensor):
        return h.detach()
    return tuple(repackage_hidden(lib, v) for v in h)


def train(lib, model, tokens, rnn_type, batch_size=4, bptt=6, lr=5.0, clip=0.25):
    nn = lib.nn
    criterion = nn.NLLLoss()
    train_data = batchify(lib, lib.from_numpy(tokens), batch_size)
    model.train()
    if rnn_type != "Transformer":
        hidden = model.init_hidden(batch_size)
    losses = []
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i, bptt)
        model.zero_grad()
        if rnn_type == "Transformer":
            output = model(data)
            output = output.view(-1, NTOKENS)
        else:
            hidden = repackage_hidden(lib, hidden)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
    return losses


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # PyTorch's note on its own fast path
@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU", "RNN_TANH", "Transformer"])
def test_word_language_model_trains_the_same_in_both_frameworks(torch, rnn_type):
    tokens = np.random.default_rng(0).integers(0, NTOKENS, 4 * 25).astype(np.int64)
    theirs, ours = same_weights(torch, build, rnn_type)
    if rnn_type != "Transformer":
        assert ours.decoder.weight is ours.encoder.weight
    start = numpy_state(theirs)
    their_losses = train(torch, theirs, tokens, rnn_type)
    our_losses = train(corenn, ours, tokens, rnn_type)
    assert len(our_losses) == 4
    assert_same_run(our_losses, their_losses)
    assert_same_state(ours, theirs, moved_from=start)
