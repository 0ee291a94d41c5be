"""A GPT-2 in the shape of the released small model (12 layers, d=768, 12 heads,
vocabulary 50,257, context 1,024: 124 M parameters), written for torch.fx: the
exporter's benchmark (bench/python/export_bench.py) and its size test. Builders return
(module, example_inputs), the form `pipeplan_export.py --model gpt2:<builder>`
takes (PYTHONPATH=tests/models).

  small         GPT2(), input_ids int64 [batch, seq]
  small_masked  GPT2Masked(), input_ids int64 and mask bool [batch, seq] (a
                padding mask: False drops a key position), the two-dtype case of
                `--input input_ids:int64[8,1024] --input mask:bool[8,1024]`
  tiny          the same code at d=32, 2 layers, vocabulary 64, context 16

The weights are random (GPT-2's init: normal, std 0.02, residual projections
scaled by 1/sqrt(2 * layers)); positions come from torch.arange of the traced
length, the LM head is tied to the token embedding, as in GPT-2.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, d, heads, context, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        causal = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("causal", causal.view(1, 1, context, context), persistent=False)

    def forward(self, x, keep=None):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        allowed = self.causal[:, :, :t, :t]
        if keep is not None:  # a Python branch: GPT2Masked passes the mask, GPT2 not
            allowed = allowed & keep
        att = att.masked_fill(~allowed, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, d, heads, context, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, context, dropout)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, keep=None):
        x = x + self.attn(self.ln_1(x), keep)
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.dropout(self.c_proj(h))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, d=768, heads=12, layers=12, context=1024, dropout=0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(d, heads, context, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") \
                        else 0.02
                    p.normal_(0.0, std)

    def embed(self, input_ids):
        t = input_ids.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device)
        return self.drop(self.wte(input_ids) + self.wpe(pos))

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class GPT2Masked(GPT2):
    """GPT2 with a padding mask: mask[b, s] False hides key position s of row b."""

    def forward(self, input_ids, mask):
        keep = mask[:, None, None, :]
        x = self.embed(input_ids)
        for block in self.h:
            x = block(x, keep)
        return self.lm_head(self.ln_f(x))


def small(batch=8, seq=1024, seed=0):
    torch.manual_seed(seed)
    return GPT2(), (torch.zeros(batch, seq, dtype=torch.long),)


def small_masked(batch=8, seq=1024, seed=0):
    torch.manual_seed(seed)
    return GPT2Masked(), (torch.zeros(batch, seq, dtype=torch.long),
                          torch.ones(batch, seq, dtype=torch.bool))


def tiny(batch=2, seq=16, seed=0):
    torch.manual_seed(seed)
    return GPT2(vocab=64, d=32, heads=4, layers=2, context=16), \
        (torch.zeros(batch, seq, dtype=torch.long),)
