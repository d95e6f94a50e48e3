"""Port of AssemblyAI's "Building an end-to-end Speech Recognition model in PyTorch" (Michael Nguyen's
DeepSpeech2-like model): residual CNN blocks with ``CNNLayerNorm``, bidirectional GRUs, a CTC loss
and a greedy CTC decoder, trained with AdamW and ``OneCycleLR``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
"spectrograms" and transcripts (LibriSpeech and torchaudio are downloads; the model is cut to one
residual block and one GRU layer). It keeps the program's ``CNNLayerNorm`` (``x.transpose(2, 3)
.contiguous()`` around ``nn.LayerNorm``), ``ResidualCNN`` (``F.gelu``, ``nn.Dropout``, residual add),
``BidirectionalGRU`` (``nn.GRU(batch_first=True, bidirectional=True)``), ``SpeechRecognitionModel``
(``x.view(sizes[0], sizes[1] * sizes[2], sizes[3])``, ``x.transpose(1, 2)``, ``nn.Sequential``
classifier with ``nn.GELU``), the training step (``F.log_softmax(output, dim=2)``,
``output.transpose(0, 1)`` to (time, batch, class), ``nn.CTCLoss(blank=28)``, ``optim.AdamW``,
``lr_scheduler.OneCycleLR(max_lr, steps_per_epoch, epochs, anneal_strategy='linear')`` stepped per
batch), and ``GreedyDecoder`` (``torch.argmax(output, dim=2)``, collapsing repeats and blanks).
Dropout is 0 (different masks per framework).
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

N_FEATS, N_CLASS, BLANK = 16, 29, 28


def build(lib, dropout=0.0):
    nn, F = lib.nn, lib.nn.functional

    class CNNLayerNorm(nn.Module):
        """Layer normalization built for cnns input"""

        def __init__(self, n_feats):
            super().__init__()
            self.layer_norm = nn.LayerNorm(n_feats)

        def forward(self, x):
            # x (batch, channel, feature, time)
            x = x.transpose(2, 3).contiguous()  # (batch, channel, time, feature)
            x = self.layer_norm(x)
            return x.transpose(2, 3).contiguous()  # (batch, channel, feature, time)

    class ResidualCNN(nn.Module):
        def __init__(self, in_channels, out_channels, kernel, stride, dropout, n_feats):
            super().__init__()
            self.cnn1 = nn.Conv2d(in_channels, out_channels, kernel, stride, padding=kernel // 2)
            self.cnn2 = nn.Conv2d(out_channels, out_channels, kernel, stride, padding=kernel // 2)
            self.dropout1 = nn.Dropout(dropout)
            self.dropout2 = nn.Dropout(dropout)
            self.layer_norm1 = CNNLayerNorm(n_feats)
            self.layer_norm2 = CNNLayerNorm(n_feats)

        def forward(self, x):
            residual = x  # (batch, channel, feature, time)
            x = self.layer_norm1(x)
            x = F.gelu(x)
            x = self.dropout1(x)
            x = self.cnn1(x)
            x = self.layer_norm2(x)
            x = F.gelu(x)
            x = self.dropout2(x)
            x = self.cnn2(x)
            x += residual
            return x  # (batch, channel, feature, time)

    class BidirectionalGRU(nn.Module):
        def __init__(self, rnn_dim, hidden_size, dropout, batch_first):
            super().__init__()
            self.BiGRU = nn.GRU(input_size=rnn_dim, hidden_size=hidden_size, num_layers=1,
                                batch_first=batch_first, bidirectional=True)
            self.layer_norm = nn.LayerNorm(rnn_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            x = self.layer_norm(x)
            x = F.gelu(x)
            x, _ = self.BiGRU(x)
            x = self.dropout(x)
            return x

    class SpeechRecognitionModel(nn.Module):
        def __init__(self, n_cnn_layers, n_rnn_layers, rnn_dim, n_class, n_feats, stride=2, dropout=0.1):
            super().__init__()
            n_feats = n_feats // 2
            self.cnn = nn.Conv2d(1, 8, 3, stride=stride, padding=3 // 2)  # cnn for extracting hierarchical features
            self.rescnn_layers = nn.Sequential(*[
                ResidualCNN(8, 8, kernel=3, stride=1, dropout=dropout, n_feats=n_feats)
                for _ in range(n_cnn_layers)
            ])
            self.fully_connected = nn.Linear(n_feats * 8, rnn_dim)
            self.birnn_layers = nn.Sequential(*[
                BidirectionalGRU(rnn_dim=rnn_dim if i == 0 else rnn_dim * 2, hidden_size=rnn_dim,
                                 dropout=dropout, batch_first=True)
                for i in range(n_rnn_layers)
            ])
            self.classifier = nn.Sequential(
                nn.Linear(rnn_dim * 2, rnn_dim),  # birnn returns rnn_dim*2
                nn.GELU(),
                nn.Dropout(dropout),
                nn.Linear(rnn_dim, n_class),
            )

        def forward(self, x):
            x = self.cnn(x)
            x = self.rescnn_layers(x)
            sizes = x.size()
            x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # (batch, feature, time)
            x = x.transpose(1, 2)  # (batch, time, feature)
            x = self.fully_connected(x)
            x = self.birnn_layers(x)
            x = self.classifier(x)
            return x

    return SpeechRecognitionModel(1, 1, 16, N_CLASS, N_FEATS, dropout=dropout)


def GreedyDecoder(lib, output, blank_label=BLANK, collapse_repeated=True):
    arg_maxes = lib.argmax(output, dim=2)
    decodes = []
    for i, args in enumerate(arg_maxes):
        decode = []
        for j, index in enumerate(args):
            if index != blank_label:
                if collapse_repeated and j != 0 and index == args[j - 1]:
                    continue
                decode.append(index.item())
        decodes.append(decode)
    return decodes


def train(lib, model, batches, epochs=2):
    F = lib.nn.functional
    optimizer = lib.optim.AdamW(model.parameters(), 5e-4)
    criterion = lib.nn.CTCLoss(blank=BLANK)
    scheduler = lib.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=5e-4, steps_per_epoch=len(batches),
                                                  epochs=epochs, anneal_strategy="linear")
    model.train()
    losses, lrs = [], []
    for epoch in range(epochs):
        for spectrograms, labels, input_lengths, label_lengths in batches:
            spectrograms, labels = lib.from_numpy(spectrograms), lib.from_numpy(labels)
            optimizer.zero_grad()
            output = model(spectrograms)  # (batch, time, n_class)
            output = F.log_softmax(output, dim=2)
            output = output.transpose(0, 1)  # (time, batch, n_class)
            loss = criterion(output, labels, input_lengths, label_lengths)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            lrs.append(scheduler.get_last_lr()[0])
    model.eval()
    with lib.no_grad():
        output = F.log_softmax(model(lib.from_numpy(batches[0][0])), dim=2)
    return losses, lrs, GreedyDecoder(lib, output)


def _batches(n=3, batch=2, frames=24, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        spectrograms = rng.standard_normal((batch, 1, N_FEATS, frames)).astype(np.float32)
        label_lengths = [int(k) for k in rng.integers(2, 5, batch)]
        labels = np.zeros((batch, max(label_lengths)), np.int64)
        for row, length in enumerate(label_lengths):
            labels[row, :length] = rng.integers(0, BLANK, length)
        input_lengths = [frames // 2] * batch  # the stride-2 front convolution halves time
        batches.append((spectrograms, labels, input_lengths, label_lengths))
    return batches


def test_speech_recognition_trains_the_same_in_both_frameworks(torch):
    batches = _batches()
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_lrs, their_decodes = train(torch, theirs, batches)
    our_losses, our_lrs, our_decodes = train(corenn, ours, batches)
    assert_same_run(our_losses, their_losses)
    assert our_lrs == pytest.approx(their_lrs)
    assert our_decodes == their_decodes
    # cnn1's bias adds one number per channel to every feature, and the CNNLayerNorm after it takes each
    # channel's mean over the features away: its gradient is rounding noise, which AdamW's steps (about lr
    # each at first) move either way. Every other entry is compared.
    noise_only = "rescnn_layers.0.cnn1.bias"
    assert_same_state(ours, theirs, moved_from=start, except_for=(noise_only,))
    for model in (ours, theirs):
        moved = numpy_state(model)[noise_only] - start[noise_only]
        assert np.all(np.abs(moved) <= 5e-4 * len(our_losses))
