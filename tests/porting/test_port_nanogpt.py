"""Port of karpathy/nanoGPT ``model.py`` and ``train.py`` (and minGPT, its parent): a GPT with causal
self-attention, trained with AdamW on weight-decay parameter groups, then sampling greedily.

Written once against ``lib`` and run under PyTorch and corenn from the same weights on a generated
token stream (the Shakespeare data is a download; the model is 2 layers of width 16). It keeps
nanoGPT's ``GPTConfig`` dataclass, its own ``LayerNorm`` with an optional bias (``F.layer_norm``),
``CausalSelfAttention`` both ways (``F.scaled_dot_product_attention(..., is_causal=True)`` as the
"flash" path and the manual path with the ``torch.tril`` buffer, ``masked_fill(... == 0,
float('-inf'))``, ``F.softmax``), ``q, k, v = self.c_attn(x).split(self.n_embd, dim=2)``,
``view``/``transpose(1, 2)``/``contiguous()``, the ``MLP`` with ``nn.GELU()``, ``nn.ModuleDict`` of
``wte``/``wpe``/``drop``/``h``/``ln_f``, weight tying ``wte.weight = lm_head.weight``, ``_init_weights``
applied with ``self.apply`` and the scaled ``c_proj.weight`` init, ``get_num_params`` with
``numel()``, ``F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)``,
``logits[:, [-1], :]`` at inference, ``configure_optimizers`` (``p.dim() >= 2`` decays,
``optim.AdamW(optim_groups, lr=..., betas=...)``), ``get_batch`` with ``torch.stack`` of slices,
``clip_grad_norm_(model.parameters(), 1.0)``, a cosine learning-rate schedule written into
``param_group['lr']``, and ``generate`` (``torch.topk``, ``logits[logits < v[:, [-1]]] = -float('Inf')``,
``torch.cat((idx, idx_next), dim=1)``) with the sample replaced by the most likely token, as
minGPT's ``do_sample=False`` does (the two frameworks' samplers draw differently). Dropout is 0, and
``bias=False`` (nanoGPT's option; see ``GPTConfig``).
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch


@dataclass
class GPTConfig:
    block_size: int = 8
    vocab_size: int = 13
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    # nanoGPT's option: with biases, the key projection's bias only shifts each row of scores, which softmax
    # ignores; its gradient is rounding noise that AdamW's first steps turn into moves of either sign.
    bias: bool = False


def build(lib, config=GPTConfig(), flash=True):
    nn, F = lib.nn, lib.nn.functional

    class LayerNorm(nn.Module):
        """LayerNorm but with an optional bias."""

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(ndim))
            self.bias = nn.Parameter(lib.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            self.dropout = config.dropout
            self.flash = flash and hasattr(F, "scaled_dot_product_attention")
            if not self.flash:
                self.register_buffer("bias", lib.tril(lib.ones(config.block_size, config.block_size))
                                     .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if self.flash:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                                   dropout_p=self.dropout if self.training else 0, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side
            y = self.resid_dropout(self.c_proj(y))
            return y

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():  # scaled init of the residual projections, per GPT-2
                if pn.endswith("c_proj.weight"):
                    lib.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        def get_num_params(self, non_embedding=True):
            n_params = sum(p.numel() for p in self.parameters())
            if non_embedding:
                n_params -= self.transformer.wpe.weight.numel()
            return n_params

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    lib.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                lib.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            assert t <= self.config.block_size, f"Cannot forward sequence of length {t}"
            pos = lib.arange(0, t, dtype=lib.long)
            tok_emb = self.transformer.wte(idx)
            pos_emb = self.transformer.wpe(pos)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            if targets is not None:
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                logits = self.lm_head(x[:, [-1], :])  # only the last position is needed to generate
                loss = None
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type="cpu"):
            param_dict = {pn: p for pn, p in self.named_parameters()}
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {"params": decay_params, "weight_decay": weight_decay},
                {"params": nodecay_params, "weight_decay": 0.0},
            ]
            fused_available = "fused" in inspect.signature(lib.optim.AdamW).parameters
            use_fused = fused_available and device_type == "cuda"
            extra_args = dict(fused=True) if use_fused else dict()
            return lib.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

        @lib.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = lib.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                _, idx_next = lib.topk(probs, k=1, dim=-1)
                idx = lib.cat((idx, idx_next), dim=1)
            return idx

    return GPT(config)


def get_lr(it, learning_rate=1e-2, warmup_iters=2, lr_decay_iters=8, min_lr=1e-3):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def train(lib, model, data, offsets, max_iters=6, grad_clip=1.0):
    block_size = model.config.block_size
    data = lib.from_numpy(data)

    def get_batch(ix):
        x = lib.stack([data[i:i + block_size] for i in ix])
        y = lib.stack([data[i + 1:i + 1 + block_size] for i in ix])
        return x, y

    optimizer = model.configure_optimizers(weight_decay=1e-1, learning_rate=1e-2, betas=(0.9, 0.95))
    losses = []
    model.train()
    for iter_num in range(max_iters):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        X, Y = get_batch(offsets[iter_num])
        logits, loss = model(X, Y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    out = model.generate(data[:3].unsqueeze(0), max_new_tokens=10, top_k=5)
    return losses, out


@pytest.mark.parametrize("flash", [True, False], ids=["scaled_dot_product_attention", "manual_attention"])
def test_nanogpt_trains_the_same_in_both_frameworks(torch, flash):
    config = GPTConfig()
    rng = np.random.default_rng(0)
    data = rng.integers(0, config.vocab_size, 200).astype(np.int64)
    offsets = [rng.integers(0, len(data) - config.block_size - 1, 4) for _ in range(6)]
    theirs, ours = same_weights(torch, build, flash=flash)
    assert ours.transformer.wte.weight is ours.lm_head.weight
    assert ours.get_num_params() == theirs.get_num_params()
    start = numpy_state(theirs)
    their_losses, their_out = train(torch, theirs, data, offsets)
    our_losses, our_out = train(corenn, ours, data, offsets)
    assert_same_run(our_losses, their_losses)
    assert our_out.tolist() == their_out.tolist() and tuple(our_out.shape) == (1, 13)
    assert_same_state(ours, theirs, moved_from=start)
