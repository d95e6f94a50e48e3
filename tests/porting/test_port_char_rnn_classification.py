"""Port of the PyTorch tutorial "NLP From Scratch: Classifying Names with a Character-Level RNN"
(``intermediate/char_rnn_classification_tutorial``, in its hand-built-RNN form): names read one
one-hot letter at a time by ``i2h``/``i2o`` layers over ``torch.cat((input, hidden), 1)``.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on a few names
written here (the tutorial's name lists are a download). It keeps the tutorial's ``unicodeToAscii``
(``unicodedata.normalize('NFD', ...)``), ``letterToIndex``/``lineToTensor`` (``torch.zeros(len(line), 1,
n_letters)`` filled by ``tensor[li][0][letterToIndex(letter)] = 1``), the ``RNN`` module with
``nn.LogSoftmax(dim=1)`` and ``initHidden``, ``categoryFromOutput`` with ``output.topk(1)`` and
``top_i[0].item()``, ``nn.NLLLoss``, ``rnn.zero_grad()``, the hand-written update
``p.data.add_(p.grad.data, alpha=-learning_rate)``, and ``evaluate``/``predict`` under
``torch.no_grad()`` with ``output.topk(n_predictions, 1, True)``.
"""
from __future__ import annotations

import string
import unicodedata

import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

all_letters = string.ascii_letters + " .,;'"
n_letters = len(all_letters)
N_HIDDEN = 16
category_lines = {
    "Czech": ["Novák", "Dvořák", "Černý"],
    "Japanese": ["Satō", "Nakamura", "Abe"],
    "Scottish": ["MacDonald", "Campbell", "Stewart"],
}
all_categories = list(category_lines)


def unicodeToAscii(s):
    return "".join(c for c in unicodedata.normalize("NFD", s)
                   if unicodedata.category(c) != "Mn" and c in all_letters)


def letterToIndex(letter):
    return all_letters.find(letter)


def lineToTensor(lib, line):
    tensor = lib.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


def build(lib, input_size=n_letters, hidden_size=N_HIDDEN, output_size=len(all_categories)):
    nn = lib.nn

    class RNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
            self.i2o = nn.Linear(input_size + hidden_size, output_size)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, input, hidden):
            combined = lib.cat((input, hidden), 1)
            hidden = self.i2h(combined)
            output = self.i2o(combined)
            output = self.softmax(output)
            return output, hidden

        def initHidden(self):
            return lib.zeros(1, self.hidden_size)

    return RNN()


def categoryFromOutput(output):
    top_n, top_i = output.topk(1)
    category_i = top_i[0].item()
    return all_categories[category_i], category_i


def run(lib, rnn, learning_rate=0.05):
    criterion = lib.nn.NLLLoss()

    def train(category_tensor, line_tensor):
        hidden = rnn.initHidden()
        rnn.zero_grad()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        loss = criterion(output, category_tensor)
        loss.backward()
        for p in rnn.parameters():  # add parameters' gradients to their values, multiplied by learning rate
            p.data.add_(p.grad.data, alpha=-learning_rate)
        return output, loss.item()

    def evaluate(line_tensor):
        hidden = rnn.initHidden()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        return output

    def predict(input_line, n_predictions=2):
        with lib.no_grad():
            output = evaluate(lineToTensor(lib, unicodeToAscii(input_line)))
            topv, topi = output.topk(n_predictions, 1, True)
            return [(topv[0][i].item(), all_categories[topi[0][i].item()]) for i in range(n_predictions)]

    losses, guesses = [], []
    for _epoch in range(2):
        for category, lines in category_lines.items():
            for line in lines:
                category_tensor = lib.tensor([all_categories.index(category)], dtype=lib.long)
                output, loss = train(category_tensor, lineToTensor(lib, unicodeToAscii(line)))
                losses.append(loss)
                guesses.append(categoryFromOutput(output))
    return losses, guesses, predict("Dovesky") + predict("Jackson")


def test_char_rnn_classification_trains_the_same_in_both_frameworks(torch):
    assert unicodeToAscii("Ślusàrski") == "Slusarski"
    line = lineToTensor(corenn, "Jones")
    assert tuple(line.shape) == (5, 1, n_letters) and line.sum().item() == 5 and line[0][0][35].item() == 1
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_guesses, their_predictions = run(torch, theirs)
    our_losses, our_guesses, our_predictions = run(corenn, ours)
    assert len(our_losses) == 18
    assert_same_run(our_losses, their_losses)
    assert our_guesses == their_guesses
    assert [c for _, c in our_predictions] == [c for _, c in their_predictions]
    assert_same_run([v for v, _ in our_predictions], [v for v, _ in their_predictions])
    assert_same_state(ours, theirs, moved_from=start)
