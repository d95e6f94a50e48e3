"""Port of the PyTorch tutorial "Advanced: Making Dynamic Decisions and the Bi-LSTM CRF"
(``beginner/nlp/advanced_tutorial``): a bidirectional LSTM tagger under a linear-chain CRF, trained
on the negative log likelihood (forward algorithm) and decoded with Viterbi.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on the tutorial's
kind of toy data (two short tagged sentences, written here). It keeps the tutorial's helpers
(``argmax`` through ``torch.max(vec, 1)`` and ``idx.item()``, ``prepare_sequence`` with
``torch.tensor(idxs, dtype=torch.long)``, ``log_sum_exp`` with ``max_score.view(1, -1).expand(1,
vec.size()[1])``), the ``BiLSTM_CRF`` module (``nn.Parameter(torch.randn(tagset_size, tagset_size))``
transitions with ``transitions.data[tag_to_ix[START_TAG], :] = -10000``, ``init_hidden`` with
``torch.randn(2, 1, hidden_dim // 2)`` (drawn once by numpy here, the same in both runs),
``_forward_alg`` with ``torch.full((1, tagset_size), -10000.)``, ``emit_score``/``trans_score``,
``torch.cat(alphas_t).view(1, -1)``, ``_score_sentence`` indexing ``transitions[tags[i + 1], tags[i]]``,
``_viterbi_decode`` with back-pointers and ``path_score``), ``model.zero_grad()``,
``neg_log_likelihood``, ``optim.SGD(lr=0.01, weight_decay=1e-4)`` and the predictions under
``torch.no_grad()``.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

START_TAG, STOP_TAG = "<START>", "<STOP>"
EMBEDDING_DIM, HIDDEN_DIM = 5, 4
training_data = [(
    "the wall street journal reported today that apple corporation made money".split(),
    "B I I I O O O B I O O".split(),
), (
    "georgia tech is a university in georgia".split(),
    "B I O O O O B".split(),
)]
word_to_ix = {}
for sentence, tags in training_data:
    for word in sentence:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}


def argmax(vec):
    # return the argmax as a python int
    _, idx = vec.max(1)
    return idx.item()


def prepare_sequence(lib, seq, to_ix):
    idxs = [to_ix[w] for w in seq]
    return lib.tensor(idxs, dtype=lib.long)


def log_sum_exp(lib, vec):
    """Compute log sum exp in a numerically stable way for the forward algorithm."""
    max_score = vec[0, argmax(vec)]
    max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
    return max_score + lib.log(lib.sum(lib.exp(vec - max_score_broadcast)))


def build(lib, initial_hidden):
    nn = lib.nn

    class BiLSTM_CRF(nn.Module):
        def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
            super().__init__()
            self.embedding_dim = embedding_dim
            self.hidden_dim = hidden_dim
            self.vocab_size = vocab_size
            self.tag_to_ix = tag_to_ix
            self.tagset_size = len(tag_to_ix)
            self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
            self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
            # transitions[i, j] is the score of transitioning *to* i *from* j
            self.transitions = nn.Parameter(lib.randn(self.tagset_size, self.tagset_size))
            # never transfer to the start tag, never transfer from the stop tag
            self.transitions.data[tag_to_ix[START_TAG], :] = -10000
            self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
            self.hidden = self.init_hidden()

        def init_hidden(self):
            return tuple(lib.from_numpy(state.copy()) for state in initial_hidden)  # torch.randn(2, 1, hidden // 2)

        def _forward_alg(self, feats):
            init_alphas = lib.full((1, self.tagset_size), -10000.)
            init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
            forward_var = init_alphas
            for feat in feats:
                alphas_t = []  # the forward tensors at this timestep
                for next_tag in range(self.tagset_size):
                    emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                    trans_score = self.transitions[next_tag].view(1, -1)
                    next_tag_var = forward_var + trans_score + emit_score
                    alphas_t.append(log_sum_exp(lib, next_tag_var).view(1))
                forward_var = lib.cat(alphas_t).view(1, -1)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            alpha = log_sum_exp(lib, terminal_var)
            return alpha

        def _get_lstm_features(self, sentence):
            self.hidden = self.init_hidden()
            embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
            lstm_out, self.hidden = self.lstm(embeds, self.hidden)
            lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
            lstm_feats = self.hidden2tag(lstm_out)
            return lstm_feats

        def _score_sentence(self, feats, tags):
            score = lib.zeros(1)
            tags = lib.cat([lib.tensor([self.tag_to_ix[START_TAG]], dtype=lib.long), tags])
            for i, feat in enumerate(feats):
                score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
            score = score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]
            return score

        def _viterbi_decode(self, feats):
            backpointers = []
            init_vvars = lib.full((1, self.tagset_size), -10000.)
            init_vvars[0][self.tag_to_ix[START_TAG]] = 0
            forward_var = init_vvars
            for feat in feats:
                bptrs_t = []  # holds the backpointers for this step
                viterbivars_t = []  # holds the viterbi variables for this step
                for next_tag in range(self.tagset_size):
                    next_tag_var = forward_var + self.transitions[next_tag]
                    best_tag_id = argmax(next_tag_var)
                    bptrs_t.append(best_tag_id)
                    viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
                forward_var = (lib.cat(viterbivars_t) + feat).view(1, -1)
                backpointers.append(bptrs_t)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            best_tag_id = argmax(terminal_var)
            path_score = terminal_var[0][best_tag_id]
            best_path = [best_tag_id]
            for bptrs_t in reversed(backpointers):
                best_tag_id = bptrs_t[best_tag_id]
                best_path.append(best_tag_id)
            start = best_path.pop()
            assert start == self.tag_to_ix[START_TAG]  # sanity check
            best_path.reverse()
            return path_score, best_path

        def neg_log_likelihood(self, sentence, tags):
            feats = self._get_lstm_features(sentence)
            forward_score = self._forward_alg(feats)
            gold_score = self._score_sentence(feats, tags)
            return forward_score - gold_score

        def forward(self, sentence):
            lstm_feats = self._get_lstm_features(sentence)
            score, tag_seq = self._viterbi_decode(lstm_feats)
            return score, tag_seq

    return BiLSTM_CRF(len(word_to_ix), tag_to_ix, EMBEDDING_DIM, HIDDEN_DIM)


def run(lib, model, epochs=3):
    optimizer = lib.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
    losses = []
    for epoch in range(epochs):
        for sentence, tags in training_data:
            model.zero_grad()
            sentence_in = prepare_sequence(lib, sentence, word_to_ix)
            targets = lib.tensor([tag_to_ix[t] for t in tags], dtype=lib.long)
            loss = model.neg_log_likelihood(sentence_in, targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    with lib.no_grad():
        predictions = [model(prepare_sequence(lib, sentence, word_to_ix)) for sentence, _ in training_data]
    return losses, [(score.item(), path) for score, path in predictions]


def test_bilstm_crf_trains_the_same_in_both_frameworks(torch):
    rng = np.random.default_rng(0)
    initial_hidden = tuple(rng.standard_normal((2, 1, HIDDEN_DIM // 2)).astype(np.float32) for _ in range(2))
    theirs, ours = same_weights(torch, build, initial_hidden)
    start = numpy_state(theirs)
    their_losses, their_predictions = run(torch, theirs)
    our_losses, our_predictions = run(corenn, ours)
    assert len(our_losses) == 6
    assert_same_run(our_losses, their_losses)
    assert [path for _, path in our_predictions] == [path for _, path in their_predictions]
    assert_same_run([score for score, _ in our_predictions], [score for score, _ in their_predictions])
    assert_same_state(ours, theirs, moved_from=start)
