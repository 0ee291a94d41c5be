"""Tests of the PyTorch exporter. CPU only, a few seconds.

Run: /usr/bin/python3 -m pytest -q tests/python/test_export.py
  or /usr/bin/python3 tests/python/test_export.py
"""

import json
import math
import os
import sys
import tempfile
import unittest

# This folder (the CLI tests name `test_export:ConvNet`) and the exporter's.
HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (HERE, os.path.join(HERE, "..", "..", "client", "python")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor  # noqa: E402

import pipeplan_export as pe  # noqa: E402
from pipeplan.export.tracer_patches import proxy_iter  # noqa: E402
from pipeplan_graph_check import validate  # noqa: E402


def check_valid(test, graph):
    """The planner's validation rules (docs/graph-format.md, pipeplan_graph_check); the
    exporter also states every edge's bytes."""
    try:
        validate(graph)
    except ValueError as e:
        test.fail("invalid graph: %s" % e)
    for e in graph["edges"]:
        test.assertIn("bytes", e)


def by_id(graph):
    return {n["id"]: n for n in graph["nodes"]}


class TiedFunctional(nn.Module):
    """Reads a tied weight through a get_attr node (F.linear on the embedding)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, idx):
        return F.linear(self.proj(self.emb(idx)), self.emb.weight)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(self.pool(y), 1))


class MHATransformer(nn.Module):
    """A pre-norm transformer over nn.MultiheadAttention (batch first) that unpacks
    tuples: `B, T, C = x.shape` and `a, _ = self.attn(...)`; LM head tied to wte."""

    def __init__(self, vocab=50, d=32, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.ln = nn.ModuleList([nn.LayerNorm(d) for _ in range(layers)])
        self.attn = nn.ModuleList([nn.MultiheadAttention(d, heads, batch_first=True)
                                   for _ in range(layers)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                nn.Linear(4 * d, d)) for _ in range(layers)])
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.heads = heads

    def forward(self, idx):
        x = self.wte(idx)
        B, T, C = x.shape
        for ln, attn, mlp in zip(self.ln, self.attn, self.mlp):
            h = ln(x)
            a, _ = attn(h, h, h)
            x = x + a
            x = x + mlp(x).view(B, T, C)
        return self.lm_head(x)


class SeqFirstAttention(nn.Module):
    """Sequence-first cross attention with distinct key / value widths and kwargs."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, kdim=8, vdim=12)

    def forward(self, q, k, v):
        out = self.attn(q, key=k, value=v, need_weights=False)[0]
        return out


class LSTMTagger(nn.Module):
    def __init__(self, vocab=40, d=16, hidden=24, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(2 * hidden, hidden)
        self.out = nn.Linear(hidden, tags)

    def forward(self, idx):
        y, (h, c) = self.lstm(self.emb(idx))
        z, _ = self.gru(y.transpose(0, 1))
        return self.out(z.transpose(0, 1)) + h[-1].sum() + c[-1].sum()


class ShapeUnpack(nn.Module):
    """Multi-head self attention written out, with `B, T, C = x.size()`."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class NanoGPT(nn.Module):
    """nanoGPT-style: positions from torch.arange(T) of a traced T, a causal-mask
    buffer sliced by it, `B, T = idx.size()` and `q, k, v = ....split(C, dim=2)`."""

    def __init__(self, vocab=64, d=32, heads=4, block=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block, d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        C = x.size(-1)
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return self.lm_head(self.ln_f(x))


class DataDependent(nn.Module):
    """Branches on a tensor value: not symbolically traceable."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return self.fc(-x)


class HasDataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.gate = DataDependent()

    def forward(self, x):
        return self.gate(self.pre(x))


class StarUnpack(nn.Module):
    def forward(self, x):
        *lead, c = x.shape
        return x.view(-1, c)


class ValueDependent(nn.Module):
    """Scales by a tensor's value (`.item()`): fake tensors cannot say it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) * x.abs().max().item()


class SeenInputs(nn.Module):
    """A leaf that records the type of what its forward is given."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.seen = []

    def forward(self, x):
        self.seen.append(type(x))
        return self.fc(x)


class TwoDtypes(nn.Module):
    """Token ids and a boolean padding mask, in that order of forward's parameters."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, input_ids, mask):
        return self.fc(self.emb(input_ids) * mask.unsqueeze(-1))


def mha_hand_flops(n, l, s, e, heads, kdim=None, vdim=None):
    kdim, vdim = kdim or e, vdim or e
    return (2 * n * l * e * e + 2 * n * s * kdim * e + 2 * n * s * vdim * e  # q, k, v
            + 2 * n * l * s * e * 2  # Q K^T and P V over all heads
            + 5 * n * heads * l * s  # softmax
            + 2 * n * l * e * e)  # out projection


class ExportTest(unittest.TestCase):
    def test_builtins_are_valid_graphs(self):
        for name in pe.BUILTINS:
            module, inputs = pe.builtin(name)
            graph = pe.export(module, inputs, name=name)
            with self.subTest(model=name):
                check_valid(self, graph)
                fx_nodes = [n for n in torch.fx.symbolic_trace(module).graph.nodes
                            if n.op != "output"]
                self.assertEqual(len(graph["nodes"]), len(fx_nodes))
                self.assertGreater(len(graph["edges"]), 0)

    def test_linear_flops(self):
        module, inputs = pe.builtin("mlp")
        self.assertEqual(tuple(inputs[0].shape), (8, 1024))
        self.assertEqual((module.fc1.in_features, module.fc1.out_features), (1024, 4096))
        graph = pe.export(module, inputs)
        fc1 = by_id(graph)["fc1"]
        self.assertEqual(fc1["forward_flops"], 2 * 8 * 1024 * 4096)
        self.assertEqual(fc1["param_bytes"], (1024 * 4096 + 4096) * 4)
        self.assertEqual(fc1["output_bytes"], 8 * 4096 * 4)
        self.assertEqual(graph["batch_size"], 8)
        edge = [e for e in graph["edges"] if e["src"] == "x" and e["dst"] == "fc1"]
        self.assertEqual(len(edge), 1)
        self.assertEqual(edge[0]["bytes"], 8 * 1024 * 4)

    def test_attention_matmul_flops_and_views(self):
        module, inputs = pe.builtin("transformer")
        graph = pe.export(module, inputs)
        nodes = by_id(graph)
        b, t, d = inputs[0].shape[0], module.seq, 128
        self.assertEqual(nodes["matmul"]["forward_flops"], 2 * b * t * t * d)
        for n in graph["nodes"]:
            if n["op"] in ("view", "transpose", "contiguous", "get_attr", "placeholder"):
                self.assertNotIn("forward_flops", n)
        # The three projections read the same layernorm output: parallel branches.
        q_src = {e["src"] for e in graph["edges"] if e["dst"] == "h_0_attn_q_proj"}
        k_src = {e["src"] for e in graph["edges"] if e["dst"] == "h_0_attn_k_proj"}
        self.assertEqual(q_src, {"h_0_ln_1"})
        self.assertEqual(q_src, k_src)

    def test_tied_weights_share_param_key(self):
        module, inputs = pe.builtin("transformer")
        self.assertIs(module.lm_head.weight, module.wte.weight)
        nodes = by_id(pe.export(module, inputs))
        self.assertEqual(nodes["wte"]["param_key"], "wte.weight")
        self.assertEqual(nodes["lm_head"]["param_key"], nodes["wte"]["param_key"])
        self.assertEqual(nodes["lm_head"]["param_bytes"], nodes["wte"]["param_bytes"])
        keys = [n["param_key"] for n in nodes.values() if n.get("param_bytes")]
        self.assertEqual(len(keys) - len(set(keys)), 1)  # only the tied pair repeats

    def test_tied_weight_through_get_attr(self):
        graph = pe.export(TiedFunctional(), (torch.randint(0, 100, (4, 8)),))
        check_valid(self, graph)
        keyed = [n for n in graph["nodes"] if n.get("param_key") == "emb.weight"]
        self.assertEqual(sorted(n["op"] for n in keyed), ["embedding", "get_attr"])
        nodes = by_id(graph)
        self.assertEqual(nodes["linear"]["forward_flops"], 2 * 4 * 8 * 16 * 100)  # F.linear
        self.assertEqual(nodes["proj"]["forward_flops"], 2 * 4 * 8 * 16 * 16)  # nn.Linear

    def test_conv_flops(self):
        graph = pe.export(ConvNet(), (torch.randn(2, 3, 16, 16),))
        check_valid(self, graph)
        nodes = by_id(graph)
        self.assertEqual(nodes["conv"]["forward_flops"], 2 * 2 * 8 * 16 * 16 * 3 * 9)
        self.assertEqual(nodes["conv"]["param_bytes"], 8 * 3 * 9 * 4)
        self.assertEqual(nodes["bn"]["param_bytes"], 2 * 8 * 4)
        self.assertEqual(nodes["fc"]["forward_flops"], 2 * 2 * 8 * 10)

    def test_activation_conventions(self):
        module, inputs = pe.builtin("mlp")
        nodes = by_id(pe.export(module, inputs))
        # Nothing keeps fc2's output (dropout/add keep nothing of it): 1 byte, not 0.
        self.assertEqual(nodes["fc2"]["activation_bytes"], pe.ACT_NONE)
        # fc1's output is kept by the GELU.
        self.assertEqual(nodes["fc1"]["activation_bytes"], 8 * 4096 * 4)
        self.assertEqual(nodes["act"]["weight_grad_fraction"], pe.WGF_NONE)
        self.assertNotIn("weight_grad_fraction", nodes["fc1"])  # default one half

    def test_json_round_trip(self):
        for name in pe.BUILTINS:
            module, inputs = pe.builtin(name)
            graph = pe.export(module, inputs, name=name)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "g.json")
                pe.write_graph(graph, path)
                with open(path) as f:
                    loaded = json.load(f)
            with self.subTest(model=name):
                self.assertEqual(loaded, graph)
                self.assertEqual(json.loads(json.dumps(graph)), graph)

    def test_cli(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.json")
            self.assertEqual(pe.main(["--model", "torchvision-free-example", "--out", path]), 0)
            with open(path) as f:
                graph = json.load(f)
            check_valid(self, graph)
            self.assertEqual(graph["name"], "torchvision-free-example")
            path2 = os.path.join(d, "g2.json")
            self.assertEqual(pe.main(["--model", "test_export:ConvNet", "--out", path2,
                                      "--input-shape", "2,3,16,16"]), 0)
            with open(path2) as f:
                check_valid(self, json.load(f))

    # --- real-model tracing: leaves, tuple unpacking, shape propagation -----------

    def test_mha_transformer_with_tuple_unpacking(self):
        torch.manual_seed(0)
        module = MHATransformer()
        graph = pe.export(module, (torch.randint(0, 50, (3, 10)),))
        check_valid(self, graph)
        nodes = by_id(graph)
        b, t, d, h = 3, 10, 32, 4
        for i in range(2):
            attn = nodes["attn_%d" % i]
            self.assertEqual(attn["op"], "multihead_attention")
            self.assertEqual(attn["forward_flops"], mha_hand_flops(b, t, t, d, h))
            self.assertEqual(attn["param_bytes"], (4 * d * d + 4 * d) * 4)
            # output: (B, T, d) attention output + (B, T, T) averaged weights
            self.assertEqual(attn["output_bytes"], (b * t * d + b * t * t) * 4)
        # `a, _ = attn(...)`: each getitem edge carries its element only.
        outs = sorted(e["bytes"] for e in graph["edges"] if e["src"] == "attn_0")
        self.assertEqual(outs, [b * t * t * 4, b * t * d * 4])
        for e in graph["edges"]:
            if e["dst"] in nodes and nodes[e["dst"]]["op"] == "getattr":  # x.shape
                self.assertEqual(e["bytes"], pe.ACT_NONE)
        self.assertEqual(nodes["lm_head"]["param_key"], "wte.weight")
        self.assertEqual(nodes["wte"]["param_key"], "wte.weight")
        # Proxy.__iter__ is restored after tracing.
        self.assertIsNot(torch.fx.proxy.Proxy.__dict__.get("__iter__"), proxy_iter)

    def test_mha_sequence_first_hand_count(self):
        module = SeqFirstAttention()
        l, s, n = 3, 6, 2
        graph = pe.export(module, (torch.randn(l, n, 16), torch.randn(s, n, 8),
                                   torch.randn(s, n, 12)))
        check_valid(self, graph)
        attn = by_id(graph)["attn"]
        self.assertEqual(attn["forward_flops"], mha_hand_flops(n, l, s, 16, 4, 8, 12))
        self.assertEqual(graph["batch_size"], l)  # first dim of the first input
        # need_weights=False: (out, None); the getitem edge carries the output only.
        edge = [e for e in graph["edges"] if e["src"] == "attn"]
        self.assertEqual([e["bytes"] for e in edge], [l * n * 16 * 4])
        # batch_first and sequence-first agree on the same problem.
        bf = nn.MultiheadAttention(16, 4, kdim=8, vdim=12, batch_first=True)
        flops, _, _ = pe.mha_cost(bf, n, l, s)
        self.assertEqual(flops, attn["forward_flops"])

    def test_lstm_gru_export(self):
        torch.manual_seed(0)
        b, t, d, hid = 2, 7, 16, 24
        graph = pe.export(LSTMTagger(), (torch.randint(0, 40, (b, t)),))
        check_valid(self, graph)
        nodes = by_id(graph)
        lstm = nodes["lstm"]
        self.assertEqual(lstm["op"], "lstm")
        gates = 2 * b * 4 * hid * (d + hid) + 2 * b * 4 * hid * (2 * hid + hid)  # 2 layers
        elementwise = 2 * 24 * b * hid
        self.assertEqual(lstm["forward_flops"], 2 * t * (gates + elementwise))  # 2 directions
        gru = nodes["gru"]
        self.assertEqual(gru["forward_flops"],
                         t * (2 * b * 3 * hid * (2 * hid + hid) + 17 * b * hid))
        n_params = sum(p.numel() for p in LSTMTagger().lstm.parameters())
        self.assertEqual(lstm["param_bytes"], n_params * 4)
        # output (B, T, 2H) + h_n and c_n (4 layer-directions, B, H)
        y_bytes, state_bytes = b * t * 2 * hid * 4, 4 * b * hid * 4
        self.assertEqual(lstm["output_bytes"], y_bytes + 2 * state_bytes)
        outs = sorted(e["bytes"] for e in graph["edges"] if e["src"] == "lstm")
        self.assertEqual(outs, sorted([y_bytes, 2 * state_bytes]))
        self.assertGreater(lstm["activation_bytes"], y_bytes)

    def test_shape_unpacking(self):
        graph = pe.export(ShapeUnpack(), (torch.randn(2, 6, 32),))
        check_valid(self, graph)
        nodes = by_id(graph)
        self.assertEqual(nodes["matmul"]["forward_flops"], 2 * 2 * 4 * 6 * 6 * 8)
        self.assertEqual(nodes["proj"]["output_bytes"], 2 * 6 * 32 * 4)
        split_out = [e["bytes"] for e in graph["edges"] if e["src"] == "split"]
        self.assertEqual(split_out, [2 * 6 * 32 * 4] * 3)

    def test_nanogpt_traced_sizes(self):
        torch.manual_seed(0)
        module = NanoGPT()
        idx = torch.randint(0, 64, (2, 10))  # shorter than the block: T is traced
        graph = pe.export(module, (idx,))
        check_valid(self, graph)
        nodes = by_id(graph)
        self.assertEqual(nodes["arange"]["output_bytes"], 10 * 8)
        self.assertEqual(nodes["wpe"]["output_bytes"], 10 * 32 * 4)
        self.assertEqual(nodes["matmul"]["forward_flops"], 2 * 2 * 4 * 10 * 10 * 8)
        self.assertEqual(nodes["lm_head"]["param_key"], "wte.weight")
        self.assertEqual(nodes["wte"]["param_key"], "wte.weight")
        # the traced graph computes what the model computes
        gm = pe.trace(module)
        self.assertTrue(torch.allclose(gm(idx), module(idx)))
        self.assertEqual(torch.arange(3).tolist(), [0, 1, 2])  # torch is restored
        self.assertNotIn("__getitem__", torch.Tensor.__dict__)

    def test_transformer_layers_traced_or_leaves(self):
        torch.manual_seed(0)
        m = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=2, num_decoder_layers=1,
                           dim_feedforward=32)
        inputs = (torch.randn(7, 2, 16), torch.randn(5, 2, 16))
        fine = pe.export(m, inputs)
        coarse = pe.export(m, inputs, transformer_layers_as_leaves=True)
        check_valid(self, fine)
        check_valid(self, coarse)
        ops = [n["op"] for n in fine["nodes"]]
        self.assertEqual(ops.count("multihead_attention"), 2 + 2)
        self.assertEqual(ops.count("linear"), 3 * 2)
        self.assertEqual([n["op"] for n in coarse["nodes"] if n.get("forward_flops")],
                         ["transformer_encoder_layer"] * 2 + ["layer_norm"]
                         + ["transformer_decoder_layer", "layer_norm"])
        total = lambda g: sum(n.get("forward_flops", 0) for n in g["nodes"])  # noqa: E731
        self.assertEqual(total(fine), total(coarse))
        params = lambda g: sum(n.get("param_bytes", 0) for n in g["nodes"])  # noqa: E731
        self.assertEqual(params(fine), params(coarse))
        self.assertEqual(params(fine), sum(p.numel() for p in m.parameters()) * 4)

    def test_untraceable_module_is_reported(self):
        with self.assertRaises(pe.ExportError) as ctx:
            pe.export(HasDataDependent(), (torch.randn(2, 8),))
        msg = str(ctx.exception)
        self.assertIn("'gate'", msg)
        self.assertIn("--leaf-module %s.DataDependent" % __name__, msg)
        with self.assertRaises(pe.ExportError) as ctx:
            pe.export(StarUnpack(), (torch.randn(2, 8),))
        self.assertIn("top-level forward", str(ctx.exception))
        self.assertIsNot(torch.fx.proxy.Proxy.__dict__.get("__iter__"), proxy_iter)

    def test_user_leaf_module(self):
        for kwargs in ({"leaf_modules": [DataDependent]},
                       {"leaf_modules": [__name__ + ".DataDependent"]},
                       {"leaf_names": ["gate"]}):
            graph = pe.export(HasDataDependent(), (torch.randn(2, 8),), **kwargs)
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                check_valid(self, graph)
                gate = by_id(graph)["gate"]
                self.assertEqual(gate["op"], "data_dependent")
                self.assertEqual(gate["forward_flops"], 2 * 2 * 8 * 8)  # counted addmm
                self.assertEqual(gate["param_key"], "gate.fc.bias+gate.fc.weight")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.json")
            argv = ["--model", __name__ + ":HasDataDependent", "--input-shape", "2,8",
                    "--out", path]
            with open(os.devnull, "w") as null:
                saved, sys.stderr = sys.stderr, null
                try:
                    self.assertEqual(pe.main(argv), 2)
                finally:
                    sys.stderr = saved
            self.assertEqual(pe.main(argv + ["--leaf-module", __name__ + ".DataDependent"]),
                             0)
            with open(path) as f:
                check_valid(self, json.load(f))

    # --- shapes from fake tensors; inputs with their own dtypes ----------------------

    def test_fake_shapes_equal_a_real_run(self):
        # Each export gets a fresh module: tracing names tensor constants it adds to
        # the module (_tensor_constant0, 1, ...) after those already there.
        cases = [lambda name=name: pe.builtin(name) for name in pe.BUILTINS] + [
            lambda: (ConvNet(), (torch.randn(2, 3, 16, 16),)),
            lambda: (MHATransformer(), (torch.randint(0, 50, (3, 10)),)),
            lambda: (LSTMTagger(), (torch.randint(0, 40, (2, 7)),)),
            lambda: (NanoGPT(), (torch.randint(0, 64, (2, 10)),)),
            lambda: (nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1,
                                    num_decoder_layers=1, dim_feedforward=32),
                     (torch.randn(7, 2, 16), torch.randn(5, 2, 16)))]
        for build in cases:
            torch.manual_seed(0)
            fake = pe.export(*build())
            torch.manual_seed(0)
            module, inputs = build()
            with self.subTest(model=type(module).__name__):
                self.assertEqual(fake, pe.export(module, inputs, real_forward=True))
        counted = pe.export(HasDataDependent(), (torch.randn(2, 8),), leaf_names=["gate"])
        self.assertEqual(by_id(counted)["gate"]["forward_flops"], 2 * 2 * 8 * 8)

    def test_export_does_not_run_the_model(self):
        net = ConvNet()  # training mode: a real forward would update BatchNorm's stats
        before = {k: v.clone() for k, v in net.state_dict().items()}
        pe.export(net, (torch.randn(2, 3, 16, 16),))
        for k, v in net.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)
        leaf = SeenInputs()
        pe.export(nn.Sequential(nn.Linear(8, 8), leaf), (torch.randn(2, 8),),
                  leaf_modules=[SeenInputs])
        self.assertEqual(leaf.seen, [FakeTensor])

    def test_value_dependent_model_runs_for_real(self):
        with self.assertWarnsRegex(UserWarning, "fake tensors failed.*item"):
            graph = pe.export(ValueDependent(), (torch.randn(2, 8),))
        check_valid(self, graph)
        self.assertEqual(by_id(graph)["fc"]["forward_flops"], 2 * 2 * 8 * 8)
        self.assertEqual(by_id(graph)["mul"]["output_bytes"], 2 * 8 * 4)

    def test_input_specs(self):
        self.assertEqual(pe.parse_input_spec("input_ids:int64[8,1024]"),
                         ("input_ids", torch.int64, (8, 1024)))
        self.assertEqual(pe.parse_input_spec("bool[3]"), (None, torch.bool, (3,)))
        self.assertEqual(pe.parse_input_spec("x:float32[]"), ("x", torch.float32, ()))
        for bad in ("x:int64(8)", "x:complex[2]", "x:int64[a]", "1x:int64[2]"):
            with self.assertRaises(ValueError, msg=bad):
                pe.parse_input_spec(bad)
        ids, mask = pe.inputs_from_specs(TwoDtypes(), ["mask:bool[2,5]", "input_ids:int64[2,5]"])
        self.assertEqual((ids.dtype, tuple(ids.shape)), (torch.int64, (2, 5)))
        self.assertEqual((mask.dtype, tuple(mask.shape)), (torch.bool, (2, 5)))
        with self.assertRaisesRegex(ValueError, "no parameter 'masks'"):
            pe.inputs_from_specs(TwoDtypes(), ["input_ids:int64[2,5]", "masks:bool[2,5]"])
        with self.assertRaisesRegex(ValueError, "'input_ids' comes before 'mask'"):
            pe.inputs_from_specs(TwoDtypes(), ["mask:bool[2,5]"])

    def test_cli_inputs_with_their_own_dtypes(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.json")
            argv = ["--model", __name__ + ":TwoDtypes", "--out", path,
                    "--input", "input_ids:int64[2,5]", "--input", "mask:bool[2,5]"]
            self.assertEqual(pe.main(argv + ["--package", os.path.join(d, "pkg")]), 0)
            with open(path) as f:
                graph = json.load(f)
            check_valid(self, graph)
            nodes = by_id(graph)
            self.assertEqual(nodes["input_ids"]["output_bytes"], 2 * 5 * 8)
            self.assertEqual(nodes["mask"]["output_bytes"], 2 * 5 * 1)
            self.assertEqual(nodes["fc"]["forward_flops"], 2 * 2 * 5 * 8 * 4)
            with open(os.path.join(d, "pkg", "manifest.json")) as f:
                manifest = json.load(f)
            self.assertEqual([(i["name"], i["dtype"], i["shape"]) for i in manifest["inputs"]],
                             [("input_ids", "int64", [2, 5]), ("mask", "bool", [2, 5])])
            self.assertEqual(manifest["output"], {"shape": [2, 5, 4], "dtype": "float32"})
            with open(os.devnull, "w") as null:
                saved, sys.stderr = sys.stderr, null
                try:
                    self.assertEqual(pe.main(argv[:4] + ["--input", "nope:int64[2]"]), 2)
                    self.assertEqual(pe.main(argv + ["--input-shape", "2,5"]), 2)
                finally:
                    sys.stderr = saved
            # --input-shape with one --input-dtype still works
            self.assertEqual(pe.main(["--model", "test_export:TiedFunctional", "--out", path,
                                      "--input-shape", "4,8", "--input-dtype", "int32"]), 0)
            with open(path) as f:
                self.assertEqual(by_id(json.load(f))["idx"]["output_bytes"], 4 * 8 * 4)


if __name__ == "__main__":
    unittest.main()
