"""Port of the PyTorch tutorial "Language Translation with nn.Transformer and torchtext"
(``beginner/translation_transformer``): an encoder-decoder ``nn.Transformer`` with padding masks,
trained with teacher forcing and decoded greedily.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on generated
token pairs (Multi30k and the spaCy tokenizers are downloads). It keeps the tutorial's
``PositionalEncoding`` (``torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)``,
``pos_embedding[:, 0::2] = torch.sin(pos * den)``, ``unsqueeze(-2)``, ``register_buffer``),
``TokenEmbedding`` (``tokens.long()`` times ``math.sqrt(emb_size)``), ``Seq2SeqTransformer`` with
``encode``/``decode`` through ``transformer.encoder``/``transformer.decoder``,
``generate_square_subsequent_mask`` from ``torch.triu(...) == 1`` with ``masked_fill``,
``create_mask`` (a boolean ``src_mask``, ``(src == PAD_IDX).transpose(0, 1)`` padding masks),
``nn.init.xavier_uniform_`` on every ``p.dim() > 1``, ``nn.CrossEntropyLoss(ignore_index=PAD_IDX)``,
``optim.Adam(lr=0.0001, betas=(0.9, 0.98), eps=1e-9)`` (here a larger lr), ``train_epoch``'s
``tgt[:-1, :]``/``tgt[1:, :]`` and ``reshape(-1, ...)``, and ``greedy_decode`` (``torch.ones(1, 1)
.fill_(start_symbol).type(torch.long)``, ``type(torch.bool)`` masks, ``out.transpose(0, 1)``,
``torch.max(prob, dim=1)``, ``type_as(src.data)``, ``torch.cat(..., dim=0)``). Dropout is 0.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = [
    pytest.mark.torch,
    # PyTorch's notes on its own fast paths and on mixing a float attention mask with boolean padding masks
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),
    pytest.mark.filterwarnings("ignore:Support for mismatched"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
]

UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
SRC_VOCAB, TGT_VOCAB, EMB_SIZE, NHEAD, FFN = 15, 13, 16, 2, 32


def build(lib, dropout=0.0):
    nn = lib.nn

    class PositionalEncoding(nn.Module):
        def __init__(self, emb_size, dropout, maxlen=64):
            super().__init__()
            den = lib.exp(- lib.arange(0, emb_size, 2) * math.log(10000) / emb_size)
            pos = lib.arange(0, maxlen).reshape(maxlen, 1)
            pos_embedding = lib.zeros((maxlen, emb_size))
            pos_embedding[:, 0::2] = lib.sin(pos * den)
            pos_embedding[:, 1::2] = lib.cos(pos * den)
            pos_embedding = pos_embedding.unsqueeze(-2)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer("pos_embedding", pos_embedding)

        def forward(self, token_embedding):
            return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])

    class TokenEmbedding(nn.Module):
        def __init__(self, vocab_size, emb_size):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, emb_size)
            self.emb_size = emb_size

        def forward(self, tokens):
            return self.embedding(tokens.long()) * math.sqrt(self.emb_size)

    class Seq2SeqTransformer(nn.Module):
        def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size,
                     tgt_vocab_size, dim_feedforward=512, dropout=0.1):
            super().__init__()
            self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                              num_decoder_layers=num_decoder_layers,
                                              dim_feedforward=dim_feedforward, dropout=dropout)
            self.generator = nn.Linear(emb_size, tgt_vocab_size)
            self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
            self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
            self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

        def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                    memory_key_padding_mask):
            src_emb = self.positional_encoding(self.src_tok_emb(src))
            tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
            outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                    src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
            return self.generator(outs)

        def encode(self, src, src_mask):
            return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

        def decode(self, tgt, memory, tgt_mask):
            return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)

    transformer = Seq2SeqTransformer(2, 2, EMB_SIZE, NHEAD, SRC_VOCAB, TGT_VOCAB, FFN, dropout)
    for p in transformer.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return transformer


def generate_square_subsequent_mask(lib, sz):
    mask = (lib.triu(lib.ones((sz, sz))) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(lib, src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(lib, tgt_seq_len)
    src_mask = lib.zeros((src_seq_len, src_seq_len)).type(lib.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def train_epoch(lib, model, optimizer, batches):
    model.train()
    loss_fn = lib.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    losses = []
    for src, tgt in batches:
        src, tgt = lib.from_numpy(src), lib.from_numpy(tgt)
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(lib, src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def greedy_decode(lib, model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = lib.ones(1, 1).fill_(start_symbol).type(lib.long)
    for i in range(max_len - 1):
        tgt_mask = (generate_square_subsequent_mask(lib, ys.size(0)).type(lib.bool))
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = lib.max(prob, dim=1)
        next_word = next_word.item()
        ys = lib.cat([ys, lib.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def run(lib, model, batches):
    optimizer = lib.optim.Adam(model.parameters(), lr=0.003, betas=(0.9, 0.98), eps=1e-9)
    losses = train_epoch(lib, model, optimizer, batches)
    model.eval()
    src = lib.from_numpy(batches[0][0][:, :1])
    num_tokens = src.shape[0]
    src_mask = (lib.zeros(num_tokens, num_tokens)).type(lib.bool)
    with lib.no_grad():
        tokens = greedy_decode(lib, model, src, src_mask, max_len=num_tokens + 5, start_symbol=BOS_IDX).flatten()
    return losses, tokens.tolist()


def _batches(n=4, batch=3, seed=0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n):
        pair = []
        for vocab, length in ((SRC_VOCAB, 7), (TGT_VOCAB, 8)):
            tokens = np.full((length, batch), PAD_IDX, np.int64)
            for column in range(batch):
                words = rng.integers(4, vocab, rng.integers(2, length - 1))
                tokens[:len(words) + 2, column] = [BOS_IDX, *words, EOS_IDX]
            pair.append(tokens)
        batches.append(tuple(pair))
    return batches


def test_translation_transformer_trains_the_same_in_both_frameworks(torch):
    batches = _batches()
    theirs, ours = same_weights(torch, build)
    start = numpy_state(theirs)
    their_losses, their_tokens = run(torch, theirs, batches)
    our_losses, our_tokens = run(corenn, ours, batches)
    assert_same_run(our_losses, their_losses)
    assert our_tokens == their_tokens and our_tokens[0] == BOS_IDX
    # The key projection's bias adds the same amount to every score of a query's row, which softmax ignores:
    # its gradient is rounding noise, and Adam's first steps move it by up to lr either way. The query and
    # value thirds of each in_proj_bias are compared; the key third only for staying within Adam's reach.
    in_proj_biases = tuple(name for name in start if name.endswith("in_proj_bias"))
    assert len(in_proj_biases) == 2 + 2 * 2
    assert_same_state(ours, theirs, moved_from=start, except_for=in_proj_biases)
    our_state, their_state = numpy_state(ours), numpy_state(theirs)
    for name in in_proj_biases:
        query, key, value = np.split(our_state[name], 3)
        their_query, their_key, their_value = np.split(their_state[name], 3)
        assert_same_run([query, value], [their_query, their_value])
        for moved in (key, their_key):
            assert np.all(np.abs(moved - np.split(start[name], 3)[1]) <= 0.003 * len(our_losses) + 1e-6)
