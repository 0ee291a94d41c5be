"""Tests of the PyTorch exporter. CPU only, a few seconds.

Run: /usr/bin/python3 -m unittest discover -s client/python -p 'test_*.py'
  or /usr/bin/python3 client/python/test_export.py
"""

import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pipeplan_export as pe  # noqa: E402

NODE_FIELDS = {"id", "op", "forward_flops", "backward_flops", "param_bytes", "activation_bytes",
               "output_bytes", "forward_seconds", "backward_seconds", "param_key",
               "weight_grad_fraction"}
EDGE_FIELDS = {"src", "dst", "bytes"}
GRAPH_FIELDS = {"name", "nodes", "edges", "batch_size"}


def check_valid(test, graph):
    """The planner's validation rules (docs/graph-format.md)."""
    test.assertEqual(set(graph) - GRAPH_FIELDS, set())
    test.assertTrue(graph["nodes"], "graph has no nodes")
    ids = [n["id"] for n in graph["nodes"]]
    test.assertEqual(len(ids), len(set(ids)), "duplicate node ids")
    for n in graph["nodes"]:
        test.assertEqual(set(n) - NODE_FIELDS, set(), n)
        test.assertTrue(n["id"])
        for k, v in n.items():
            if isinstance(v, (int, float)):
                test.assertTrue(math.isfinite(v) and v >= 0, (n["id"], k, v))
        test.assertLessEqual(n.get("weight_grad_fraction", 0), 1)
    idset = set(ids)
    succ = {i: [] for i in ids}
    indeg = {i: 0 for i in ids}
    for e in graph["edges"]:
        test.assertEqual(set(e) - EDGE_FIELDS, set(), e)
        test.assertIn(e["src"], idset)
        test.assertIn(e["dst"], idset)
        test.assertNotEqual(e["src"], e["dst"])
        test.assertTrue(math.isfinite(e["bytes"]) and e["bytes"] >= 0)
        succ[e["src"]].append(e["dst"])
        indeg[e["dst"]] += 1
    ready = [i for i in ids if indeg[i] == 0]
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    test.assertEqual(seen, len(ids), "graph has a cycle")


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


if __name__ == "__main__":
    unittest.main()
