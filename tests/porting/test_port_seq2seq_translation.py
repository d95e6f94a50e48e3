"""Port of the PyTorch tutorial "NLP From Scratch: Translation with a Sequence to Sequence Network and
Attention" (``intermediate/seq2seq_translation_tutorial``): a GRU encoder and a GRU decoder with
Bahdanau attention, trained with teacher forcing, decoding greedily with ``topk``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
token pairs (the tutorial's English-French pairs are a download). It keeps the tutorial's
``EncoderRNN`` (``nn.Embedding``, ``nn.GRU(batch_first=True)``), ``BahdanauAttention``
(``Va(torch.tanh(Wa(query) + Ua(keys)))``, ``squeeze(2).unsqueeze(1)``, ``F.softmax(dim=-1)``,
``torch.bmm``), ``AttnDecoderRNN`` (``torch.empty(..., dtype=torch.long).fill_(SOS_token)``,
``hidden.permute(1, 0, 2)``, ``torch.cat((embedded, context), dim=2)``, teacher forcing with
``target_tensor[:, i].unsqueeze(1)``, ``decoder_output.topk(1)`` and ``topi.squeeze(-1).detach()``
otherwise, ``F.log_softmax`` over the concatenated outputs), ``train_epoch`` with two ``optim.Adam``
and ``nn.NLLLoss`` over ``decoder_outputs.view(-1, decoder_outputs.size(-1))``, and ``evaluate``
under ``torch.no_grad()`` turning ``topi.squeeze()`` ids into words until EOS.
Dropout is 0 in training (different masks per framework).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

SOS_token, EOS_token = 0, 1
MAX_LENGTH = 6
INPUT_WORDS, OUTPUT_WORDS, HIDDEN = 14, 12, 10


def build(lib, dropout_p=0.0):
    nn, F = lib.nn, lib.nn.functional

    class EncoderRNN(nn.Module):
        def __init__(self, input_size, hidden_size):
            super().__init__()
            self.hidden_size = hidden_size
            self.embedding = nn.Embedding(input_size, hidden_size)
            self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, input):
            embedded = self.dropout(self.embedding(input))
            output, hidden = self.gru(embedded)
            return output, hidden

    class BahdanauAttention(nn.Module):
        def __init__(self, hidden_size):
            super().__init__()
            self.Wa = nn.Linear(hidden_size, hidden_size)
            self.Ua = nn.Linear(hidden_size, hidden_size)
            self.Va = nn.Linear(hidden_size, 1)

        def forward(self, query, keys):
            scores = self.Va(lib.tanh(self.Wa(query) + self.Ua(keys)))
            scores = scores.squeeze(2).unsqueeze(1)
            weights = F.softmax(scores, dim=-1)
            context = lib.bmm(weights, keys)
            return context, weights

    class AttnDecoderRNN(nn.Module):
        def __init__(self, hidden_size, output_size):
            super().__init__()
            self.embedding = nn.Embedding(output_size, hidden_size)
            self.attention = BahdanauAttention(hidden_size)
            self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
            self.out = nn.Linear(hidden_size, output_size)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
            batch_size = encoder_outputs.size(0)
            decoder_input = lib.empty(batch_size, 1, dtype=lib.long).fill_(SOS_token)
            decoder_hidden = encoder_hidden
            decoder_outputs = []
            attentions = []
            for i in range(MAX_LENGTH):
                decoder_output, decoder_hidden, attn_weights = self.forward_step(
                    decoder_input, decoder_hidden, encoder_outputs)
                decoder_outputs.append(decoder_output)
                attentions.append(attn_weights)
                if target_tensor is not None:
                    decoder_input = target_tensor[:, i].unsqueeze(1)  # teacher forcing
                else:
                    _, topi = decoder_output.topk(1)
                    decoder_input = topi.squeeze(-1).detach()  # its own prediction is the next input
            decoder_outputs = lib.cat(decoder_outputs, dim=1)
            decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
            attentions = lib.cat(attentions, dim=1)
            return decoder_outputs, decoder_hidden, attentions

        def forward_step(self, input, hidden, encoder_outputs):
            embedded = self.dropout(self.embedding(input))
            query = hidden.permute(1, 0, 2)
            context, attn_weights = self.attention(query, encoder_outputs)
            input_gru = lib.cat((embedded, context), dim=2)
            output, hidden = self.gru(input_gru, hidden)
            output = self.out(output)
            return output, hidden, attn_weights

    class Seq2Seq(nn.Module):
        """Both halves in one module, so that one state dict carries both."""

        def __init__(self):
            super().__init__()
            self.encoder = EncoderRNN(INPUT_WORDS, HIDDEN)
            self.decoder = AttnDecoderRNN(HIDDEN, OUTPUT_WORDS)

    return Seq2Seq()


def train_epoch(lib, dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion, losses):
    total_loss = 0
    for data in dataloader:
        input_tensor, target_tensor = data
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        total_loss += loss.item()
        losses.append(loss.item())
    return total_loss / len(dataloader)


def evaluate(lib, encoder, decoder, input_tensor, index2word):
    with lib.no_grad():
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, decoder_hidden, decoder_attn = decoder(encoder_outputs, encoder_hidden)
        _, topi = decoder_outputs.topk(1)
        decoded_ids = topi.squeeze()
        decoded_words = []
        for idx in decoded_ids:
            if idx.item() == EOS_token:
                decoded_words.append("<EOS>")
                break
            decoded_words.append(index2word[idx.item()])
    return decoded_words, decoder_attn


def train(lib, model, inputs, targets, n_epochs=2, learning_rate=0.01):
    dataset = lib.utils.data.TensorDataset(lib.from_numpy(inputs), lib.from_numpy(targets))
    train_dataloader = lib.utils.data.DataLoader(dataset, batch_size=4)
    encoder, decoder = model.encoder, model.decoder
    encoder_optimizer = lib.optim.Adam(encoder.parameters(), lr=learning_rate)
    decoder_optimizer = lib.optim.Adam(decoder.parameters(), lr=learning_rate)
    criterion = lib.nn.NLLLoss()
    losses, epoch_losses = [], []
    for epoch in range(n_epochs):
        epoch_losses.append(train_epoch(lib, train_dataloader, encoder, decoder, encoder_optimizer,
                                        decoder_optimizer, criterion, losses))
    index2word = {i: f"w{i}" for i in range(OUTPUT_WORDS)}
    words, attention = evaluate(lib, encoder, decoder, lib.from_numpy(inputs[:1]), index2word)
    return losses, epoch_losses, words, attention


def _pairs(n=8, seed=0):
    rng = np.random.default_rng(seed)
    inputs = np.zeros((n, MAX_LENGTH), np.int64)
    targets = np.zeros((n, MAX_LENGTH), np.int64)
    for row in range(n):
        length = rng.integers(2, MAX_LENGTH)
        inputs[row, :length] = rng.integers(2, INPUT_WORDS, length)
        inputs[row, length] = EOS_token
        targets[row, :length] = rng.integers(2, OUTPUT_WORDS, length)
        targets[row, length] = EOS_token
    return inputs, targets


def test_seq2seq_translation_trains_the_same_in_both_frameworks(torch):
    inputs, targets = _pairs()
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_epochs, their_words, their_attention = train(torch, theirs, inputs, targets)
    our_losses, our_epochs, our_words, our_attention = train(corenn, ours, inputs, targets)
    assert len(our_losses) == 4
    assert_same_run(our_losses, their_losses)
    assert_same_run(our_epochs, their_epochs)
    assert our_words == their_words
    assert tuple(our_attention.shape) == (1, MAX_LENGTH, MAX_LENGTH)
    assert_same_run([our_attention], [their_attention])
    # Va's bias shifts every attention score alike, and softmax ignores a shift: its gradient is zero up to
    # rounding, which Adam's step (about lr * sign(gradient) at first) turns into moves of up to lr either way.
    assert_same_state(ours, theirs, moved_from=start, except_for=("decoder.attention.Va.bias",))
    for model in (ours, theirs):
        moved = numpy_state(model)["decoder.attention.Va.bias"] - start["decoder.attention.Va.bias"]
        assert np.all(np.abs(moved) <= 0.01 * len(our_losses) + 1e-6)
