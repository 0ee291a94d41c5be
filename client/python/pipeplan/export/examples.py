"""The exporter's built-in example models (no torchvision needed): a small MLP
block and a small GPT with a tied LM head, for `pipeplan_export.py --model mlp`,
`transformer` and `torchvision-free-example`.
"""

import math

import torch
import torch.nn as nn


class ExampleMLP(nn.Module):
    """Linear(1024, 4096) -> GELU -> Dropout -> Linear(4096, 1024) -> LayerNorm."""

    def __init__(self, d=1024, hidden=4096):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(self.drop(self.act(self.fc1(x)))))

    @staticmethod
    def example_inputs(batch=8, d=1024):
        return (torch.randn(batch, d),)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.d = d
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.size(0), x.size(1), self.d
        hd = self.d // self.heads
        q = self.q_proj(x).view(b, t, self.heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias == 0, float("-inf"))  # t == seq
        att = torch.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq)
        self.ln_2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.dropout(self.fc2(self.gelu(self.fc1(self.ln_2(x)))))


class ExampleTransformer(nn.Module):
    """A small GPT: token + position embeddings, transformer blocks, LM head tied to wte."""

    def __init__(self, vocab=1000, d=128, heads=4, layers=2, seq=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([Block(d, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.seq = seq
        self.vocab = vocab
        self.register_buffer("pos", torch.arange(seq), persistent=False)

    def forward(self, idx):
        # Inputs are full-length sequences (plain torch.fx cannot slice a buffer by a
        # traced length in torch 1.13; the exporter's tracer can, see NanoGPT in tests).
        pos = self.pos
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def example_inputs(self, batch=4):
        return (torch.randint(0, self.vocab, (batch, self.seq)),)


def builtin(name):
    """(module, example_inputs) of a built-in example."""
    torch.manual_seed(0)
    if name == "mlp":
        return ExampleMLP(), ExampleMLP.example_inputs()
    if name in ("transformer", "torchvision-free-example"):
        m = ExampleTransformer()
        return m, m.example_inputs()
    raise KeyError(name)


BUILTINS = ("torchvision-free-example", "transformer", "mlp")
