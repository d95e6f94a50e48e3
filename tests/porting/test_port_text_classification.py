"""Port of the PyTorch tutorial "Text classification with the torchtext library"
(``beginner/text_sentiment_ngrams_tutorial``): an ``nn.EmbeddingBag`` over variable-length texts
flattened into one tensor with offsets, then a linear classifier.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated token
texts (AG_NEWS and torchtext's tokenizer are downloads). It keeps the tutorial's
``TextClassificationModel`` (``nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)``,
``init_weights`` with ``uniform_(-initrange, initrange)`` and ``bias.data.zero_()``,
``forward(text, offsets)``), ``collate_batch`` (``torch.tensor(..., dtype=torch.int64)``,
``torch.tensor(offsets[:-1]).cumsum(dim=0)``, ``torch.cat(text_list)``) passed as a ``DataLoader``'s
``collate_fn``, ``train``'s ``clip_grad_norm_(model.parameters(), 0.1)`` and
``(predicted_label.argmax(1) == label).sum().item()``, ``evaluate`` under ``torch.no_grad()``,
``optim.SGD(lr=5)`` with ``StepLR(1.0, gamma=0.1)`` stepped when validation accuracy stops improving,
and ``predict`` on one text with ``output.argmax(1).item() + 1``.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

VOCAB, EMBED, CLASSES = 40, 8, 4


def build(lib):
    nn = lib.nn

    class TextClassificationModel(nn.Module):
        def __init__(self, vocab_size, embed_dim, num_class):
            super().__init__()
            self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
            self.fc = nn.Linear(embed_dim, num_class)
            self.init_weights()

        def init_weights(self):
            initrange = 0.5
            self.embedding.weight.data.uniform_(-initrange, initrange)
            self.fc.weight.data.uniform_(-initrange, initrange)
            self.fc.bias.data.zero_()

        def forward(self, text, offsets):
            embedded = self.embedding(text, offsets)
            return self.fc(embedded)

    return TextClassificationModel(VOCAB, EMBED, CLASSES)


def collate_batch(lib):
    def collate(batch):
        label_list, text_list, offsets = [], [], [0]
        for _label, _text in batch:
            label_list.append(_label - 1)  # labels are 1-based in AG_NEWS
            processed_text = lib.tensor(_text, dtype=lib.int64)
            text_list.append(processed_text)
            offsets.append(processed_text.size(0))
        label_list = lib.tensor(label_list, dtype=lib.int64)
        offsets = lib.tensor(offsets[:-1]).cumsum(dim=0)
        text_list = lib.cat(text_list)
        return label_list, text_list, offsets
    return collate


def main(lib, model, train_iter, valid_iter, epochs=3):
    train_dataloader = lib.utils.data.DataLoader(train_iter, batch_size=4, shuffle=False,
                                                 collate_fn=collate_batch(lib))
    valid_dataloader = lib.utils.data.DataLoader(valid_iter, batch_size=4, shuffle=False,
                                                 collate_fn=collate_batch(lib))
    criterion = lib.nn.CrossEntropyLoss()
    optimizer = lib.optim.SGD(model.parameters(), lr=5)
    scheduler = lib.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    total_accu = None
    history = []

    def train(dataloader):
        model.train()
        total_acc, total_count = 0, 0
        for idx, (label, text, offsets) in enumerate(dataloader):
            optimizer.zero_grad()
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            loss.backward()
            lib.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
            history.append(loss.item())

    def evaluate(dataloader):
        model.eval()
        total_acc, total_count = 0, 0
        with lib.no_grad():
            for idx, (label, text, offsets) in enumerate(dataloader):
                predicted_label = model(text, offsets)
                total_acc += (predicted_label.argmax(1) == label).sum().item()
                total_count += label.size(0)
        return total_acc / total_count

    accuracies = []
    for epoch in range(1, epochs + 1):
        train(train_dataloader)
        accu_val = evaluate(valid_dataloader)
        if total_accu is not None and total_accu > accu_val:
            scheduler.step()
        else:
            total_accu = accu_val
        accuracies.append((accu_val, scheduler.get_last_lr()[0]))

    def predict(text):
        with lib.no_grad():
            text = lib.tensor(text)
            output = model(text, lib.tensor([0]))
            return output.argmax(1).item() + 1

    return history, accuracies, predict(train_iter[0][1])


def _texts(n, seed):
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, CLASSES + 1)), rng.integers(0, VOCAB, rng.integers(2, 9)).tolist()) for _ in range(n)]


def test_text_classification_trains_the_same_in_both_frameworks(torch):
    train_iter, valid_iter = _texts(12, 0), _texts(8, 1)
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_history, their_accuracies, their_prediction = main(torch, theirs, train_iter, valid_iter)
    our_history, our_accuracies, our_prediction = main(corenn, ours, train_iter, valid_iter)
    assert len(our_history) == 9
    assert_same_run(our_history, their_history)
    assert_same_run(our_accuracies, their_accuracies)
    assert our_prediction == their_prediction
    assert_same_state(ours, theirs, moved_from=start)
