"""Small models for the exactness tests of pipelined training (no dropout, no
BatchNorm, deterministic init): each builder returns (module, example_inputs), the
form `pipeplan_export.py --model tiny_models:<builder>` takes
(PYTHONPATH=tests/models).

  gpt   a GPT: token + position embeddings (positions from torch.arange of the
        traced length), causal attention blocks, LM head tied to the token
        embedding; input int64 [batch, seq], output [batch, seq, vocab]
  cnn   conv / relu / max-pool twice, flatten by x.view(x.size(0), -1), two
        linears; input float32 [batch, 3, 8, 8], output [batch, 10]
  skip  an MLP whose input and first activation skip to the end (a tensor that
        crosses several stages) and whose batch size, read at the start, shapes
        the output; input float32 [batch, 16], output [batch, 8]
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, seq)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for emb in (self.wte, self.wpe):  # GPT-2's init: logits start near uniform
            nn.init.normal_(emb.weight, std=0.02)

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class CNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, classes)

    def forward(self, x):
        x = self.pool1(F.relu(self.conv1(x)))
        x = self.pool2(F.relu(self.conv2(x)))
        x = x.view(x.size(0), -1)
        return self.fc2(F.relu(self.fc1(x)))


class Skip(nn.Module):
    def __init__(self, d=16, hidden=32, out=8):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, hidden)
        self.fc4 = nn.Linear(hidden, out)
        self.proj = nn.Linear(d, out)

    def forward(self, x):
        n = x.size(0)
        h1 = torch.tanh(self.fc1(x))
        h2 = torch.tanh(self.fc2(h1))
        h3 = torch.tanh(self.fc3(h2)) + h1
        y = self.fc4(h3) + self.proj(x)
        return y.view(n, -1)


def gpt(batch=4, vocab=64, d=32, heads=4, layers=2, seq=16, seed=0):
    torch.manual_seed(seed)
    return GPT(vocab, d, heads, layers, seq), (torch.randint(0, vocab, (batch, seq)),)


def cnn(batch=4, seed=0):
    torch.manual_seed(seed)
    return CNN(), (torch.randn(batch, 3, 8, 8),)


def skip(batch=4, seed=0):
    torch.manual_seed(seed)
    return Skip(), (torch.randn(batch, 16),)


MODELS = {"gpt": gpt, "cnn": cnn, "skip": skip}
