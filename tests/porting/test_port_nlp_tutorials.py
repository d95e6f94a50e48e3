"""Ports of the "Deep Learning for NLP with PyTorch" tutorials (``beginner/nlp``) and of "NLP From Scratch:
Generating Names with a Character-Level RNN" (``intermediate/char_rnn_generation_tutorial``).

Each program is written once against ``lib`` and run under PyTorch and corenn from the same weights:
- the N-gram language model of "Word Embeddings: Encoding Lexical Semantics" (``NGramLanguageModeler``,
  ``self.embeddings(inputs).view((1, -1))``, ``F.log_softmax(out, dim=1)``, ``nn.NLLLoss``,
  ``optim.SGD(lr=0.001)``, ``total_loss += loss.item()``, ``model.embeddings.weight[word_to_ix["beauty"]]``);
- the ``LSTMTagger`` of "Sequence Models and Long Short-Term Memory Networks"
  (``self.lstm(embeds.view(len(sentence), 1, -1))``, ``tag_space.view``, ``F.log_softmax``, scores
  under ``torch.no_grad()``);
- the name generator (an ``RNN`` over ``torch.cat((category, input, hidden), 1)`` with ``i2h``/``i2o``/
  ``o2o``, ``nn.Dropout``, ``nn.LogSoftmax(dim=1)``; ``target_line_tensor.unsqueeze_(-1)``, the loss summed
  over the letters, ``rnn.zero_grad()`` and ``p.data.add_(p.grad.data, alpha=-learning_rate)``;
  ``sample`` feeding ``topk(1)`` back until EOS). Dropout is 0 in training (different masks).
"""
from __future__ import annotations

import string

import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

CONTEXT_SIZE, EMBEDDING_DIM = 2, 10
test_sentence = """When forty winters shall besiege thy brow,
And dig deep trenches in thy beauty's field,
Thy youth's proud livery so gazed on now,
Will be a totter'd weed of small worth held:""".split()
ngrams = [([test_sentence[i - j - 1] for j in range(CONTEXT_SIZE)], test_sentence[i])
          for i in range(CONTEXT_SIZE, len(test_sentence))]
vocab = sorted(set(test_sentence))
word_to_ix = {word: i for i, word in enumerate(vocab)}


def build_ngram(lib):
    nn, F = lib.nn, lib.nn.functional

    class NGramLanguageModeler(nn.Module):
        def __init__(self, vocab_size, embedding_dim, context_size):
            super().__init__()
            self.embeddings = nn.Embedding(vocab_size, embedding_dim)
            self.linear1 = nn.Linear(context_size * embedding_dim, 32)
            self.linear2 = nn.Linear(32, vocab_size)

        def forward(self, inputs):
            embeds = self.embeddings(inputs).view((1, -1))
            out = F.relu(self.linear1(embeds))
            out = self.linear2(out)
            log_probs = F.log_softmax(out, dim=1)
            return log_probs

    return NGramLanguageModeler(len(vocab), EMBEDDING_DIM, CONTEXT_SIZE)


def train_ngram(lib, model, epochs=2):
    losses = []
    loss_function = lib.nn.NLLLoss()
    optimizer = lib.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(epochs):
        total_loss = 0
        for context, target in ngrams:
            context_idxs = lib.tensor([word_to_ix[w] for w in context], dtype=lib.long)
            model.zero_grad()
            log_probs = model(context_idxs)
            loss = loss_function(log_probs, lib.tensor([word_to_ix[target]], dtype=lib.long))
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        losses.append(total_loss)
    return losses, model.embeddings.weight[word_to_ix["beauty's"]].detach()


def test_ngram_language_model(torch):
    theirs, ours = same_weights(torch, build_ngram)
    start = numpy_state(theirs)
    their_losses, their_embedding = train_ngram(torch, theirs)
    our_losses, our_embedding = train_ngram(corenn, ours)
    assert_same_run(our_losses, their_losses)
    assert_same_run([our_embedding], [their_embedding])
    assert_same_state(ours, theirs, moved_from=start)


tagging_data = [
    ("The dog ate the apple".split(), ["DET", "NN", "V", "DET", "NN"]),
    ("Everybody read that book".split(), ["NN", "V", "DET", "NN"]),
]
tag_to_ix = {"DET": 0, "NN": 1, "V": 2}
tagger_words = {}
for sent, tags in tagging_data:
    for word in sent:
        tagger_words.setdefault(word, len(tagger_words))


def prepare_sequence(lib, seq, to_ix):
    idxs = [to_ix[w] for w in seq]
    return lib.tensor(idxs, dtype=lib.long)


def build_tagger(lib):
    nn, F = lib.nn, lib.nn.functional

    class LSTMTagger(nn.Module):
        def __init__(self, embedding_dim, hidden_dim, vocab_size, tagset_size):
            super().__init__()
            self.hidden_dim = hidden_dim
            self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim)
            self.hidden2tag = nn.Linear(hidden_dim, tagset_size)

        def forward(self, sentence):
            embeds = self.word_embeddings(sentence)
            lstm_out, _ = self.lstm(embeds.view(len(sentence), 1, -1))
            tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
            tag_scores = F.log_softmax(tag_space, dim=1)
            return tag_scores

    return LSTMTagger(6, 6, len(tagger_words), len(tag_to_ix))


def train_tagger(lib, model, epochs=3):
    loss_function = lib.nn.NLLLoss()
    optimizer = lib.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(epochs):
        for sentence, tags in tagging_data:
            model.zero_grad()
            sentence_in = prepare_sequence(lib, sentence, tagger_words)
            targets = prepare_sequence(lib, tags, tag_to_ix)
            tag_scores = model(sentence_in)
            loss = loss_function(tag_scores, targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    with lib.no_grad():
        tag_scores = model(prepare_sequence(lib, tagging_data[0][0], tagger_words))
    return losses, tag_scores


def test_lstm_tagger(torch):
    theirs, ours = same_weights(torch, build_tagger)
    start = numpy_state(theirs)
    their_losses, their_scores = train_tagger(torch, theirs)
    our_losses, our_scores = train_tagger(corenn, ours)
    assert_same_run(our_losses, their_losses)
    assert_same_run([our_scores], [their_scores])
    assert_same_state(ours, theirs, moved_from=start)


all_letters = string.ascii_letters + " .,;'-"
n_letters = len(all_letters) + 1  # plus EOS marker
category_lines = {"Italian": ["Abate", "Rossi", "Bruno"], "German": ["Abel", "Bauer", "Mueller"]}
all_categories = list(category_lines)
n_categories = len(all_categories)


def build_generator(lib, dropout=0.0):
    nn = lib.nn

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, output_size):
            super().__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(n_categories + input_size + hidden_size, hidden_size)
            self.i2o = nn.Linear(n_categories + input_size + hidden_size, output_size)
            self.o2o = nn.Linear(hidden_size + output_size, output_size)
            self.dropout = nn.Dropout(dropout)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, category, input, hidden):
            input_combined = lib.cat((category, input, hidden), 1)
            hidden = self.i2h(input_combined)
            output = self.i2o(input_combined)
            output_combined = lib.cat((hidden, output), 1)
            output = self.o2o(output_combined)
            output = self.dropout(output)
            output = self.softmax(output)
            return output, hidden

        def initHidden(self):
            return lib.zeros(1, self.hidden_size)

    return RNN(n_letters, 16, n_letters)


def categoryTensor(lib, category):
    li = all_categories.index(category)
    tensor = lib.zeros(1, n_categories)
    tensor[0][li] = 1
    return tensor


def inputTensor(lib, line):
    tensor = lib.zeros(len(line), 1, n_letters)
    for li in range(len(line)):
        letter = line[li]
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor


def targetTensor(lib, line):
    letter_indexes = [all_letters.find(line[li]) for li in range(1, len(line))]
    letter_indexes.append(n_letters - 1)  # EOS
    return lib.LongTensor(letter_indexes)


def train_generator(lib, rnn, learning_rate=0.05):
    criterion = lib.nn.NLLLoss()

    def train(category_tensor, input_line_tensor, target_line_tensor):
        target_line_tensor.unsqueeze_(-1)
        hidden = rnn.initHidden()
        rnn.zero_grad()
        loss = lib.Tensor([0])  # you can also just simply use ``loss = 0``
        for i in range(input_line_tensor.size(0)):
            output, hidden = rnn(category_tensor, input_line_tensor[i], hidden)
            l = criterion(output, target_line_tensor[i])
            loss += l
        loss.backward()
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-learning_rate)
        return output, loss.item() / input_line_tensor.size(0)

    def sample(category, start_letter="A", max_length=8):
        with lib.no_grad():
            category_tensor = categoryTensor(lib, category)
            input = inputTensor(lib, start_letter)
            hidden = rnn.initHidden()
            output_name = start_letter
            for i in range(max_length):
                output, hidden = rnn(category_tensor, input[0], hidden)
                topv, topi = output.topk(1)
                topi = topi[0][0]
                if topi == n_letters - 1:
                    break
                letter = all_letters[topi]
                output_name += letter
                input = inputTensor(lib, letter)
            return output_name

    losses = []
    for _ in range(2):
        for category, lines in category_lines.items():
            for line in lines:
                _, loss = train(categoryTensor(lib, category), inputTensor(lib, line), targetTensor(lib, line))
                losses.append(loss)
    return losses, [sample(category, letter) for category in all_categories for letter in "AB"]


@pytest.mark.xfail(not hasattr(corenn, "LongTensor"), strict=True, raises=AttributeError,
                   reason="needs corenn.LongTensor (PyTorch's legacy typed-tensor constructors)")
def test_char_rnn_name_generation(torch):
    theirs, ours = same_weights(torch, build_generator)
    start = numpy_state(theirs)
    their_losses, their_samples = train_generator(torch, theirs)
    our_losses, our_samples = train_generator(corenn, ours)
    assert len(our_losses) == 12
    assert_same_run(our_losses, their_losses)
    assert our_samples == their_samples
    assert_same_state(ours, theirs, moved_from=start)
