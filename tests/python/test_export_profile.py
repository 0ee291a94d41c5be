"""Tests of the exporter's node profiling (pipeplan/export/profile.py). CPU, seconds.

Run: /usr/bin/python3 -m pytest -q tests/python/test_export_profile.py
"""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (HERE, os.path.join(HERE, "..", "..", "client", "python")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pipeplan_export as pe  # noqa: E402
from pipeplan.export.errors import ExportError  # noqa: E402
from pipeplan.export.profile import profile_nodes  # noqa: E402
from pipeplan.export.tracer import trace  # noqa: E402
from pipeplan_graph_check import validate  # noqa: E402


class Uneven(nn.Module):
    """A wide layer and a narrow one: three orders of magnitude apart in flops."""

    def __init__(self):
        super().__init__()
        self.wide = nn.Linear(1024, 1024)
        self.act = nn.ReLU(inplace=True)  # in place on a tensor that carries a gradient
        self.narrow = nn.Linear(1024, 4)
        self.norm = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.norm(self.narrow(self.act(self.wide(x)))))


class ReadsItsWeight(nn.Module):
    """A function node whose parameter comes through a get_attr node."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(32, 32)
        self.weight = nn.Parameter(torch.randn(32, 32))

    def forward(self, x):
        return F.linear(self.first(x), self.weight)


class SplitsAProjection(nn.Module):
    """Attention's shape: one projection split into parts that meet in a matmul."""

    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(32, 64)

    def forward(self, x):
        q, k = self.qk(x).split(32, dim=-1)
        return torch.matmul(q, k.transpose(-2, -1))


def by_id(graph):
    return {n["id"]: n for n in graph["nodes"]}


class ProfileTest(unittest.TestCase):
    def test_measured_times_follow_the_work(self):
        graph = pe.export(Uneven(), (torch.randn(256, 1024),), profile=3)
        validate(graph)
        nodes = by_id(graph)
        for name in ("wide", "act", "narrow", "norm", "drop"):
            self.assertGreater(nodes[name]["forward_seconds"], 0, name)
            self.assertGreater(nodes[name]["backward_seconds"], 0, name)
        # 537 MFLOP against 2 MFLOP a forward: measured, not assumed, apart.
        self.assertGreater(nodes["wide"]["forward_seconds"],
                           10 * nodes["narrow"]["forward_seconds"])
        self.assertNotIn("forward_seconds", nodes["x"])  # the input is not timed

    def test_weight_gradient_shares(self):
        nodes = by_id(pe.export(Uneven(), (torch.randn(64, 1024),), profile=3))
        # The first layer's input is data: its backward is all weight gradient.
        self.assertEqual(nodes["wide"]["weight_grad_fraction"], 1.0)
        # Parameter-free nodes have none (the format reads 0 as one half).
        self.assertEqual(nodes["act"]["weight_grad_fraction"], pe.WGF_NONE)
        self.assertEqual(nodes["drop"]["weight_grad_fraction"], pe.WGF_NONE)
        share = nodes["narrow"]["weight_grad_fraction"]
        self.assertGreater(share, 0.0)
        self.assertLess(share, 1.0)

    def test_a_parameter_read_through_get_attr_is_a_weight_gradient(self):
        gm = trace(ReadsItsWeight(), (), (), True, False)
        costs = profile_nodes(gm, (torch.randn(8, 32),), repeats=2)
        forward, backward, share = costs["linear"]
        self.assertGreater(backward, 0)
        self.assertIsNotNone(share)
        self.assertGreater(share, 0.0)
        self.assertLess(share, 1.0)

    def test_gradients_flow_through_tuple_outputs(self):
        nodes = by_id(pe.export(SplitsAProjection(), (torch.randn(4, 16, 32),), profile=2))
        # split -> getitem -> transpose -> matmul: each passes the gradient back.
        for name in ("split", "getitem", "transpose", "matmul"):
            self.assertGreater(nodes[name]["backward_seconds"], 0, name)
        share = nodes["qk"]["weight_grad_fraction"]
        self.assertEqual(share, 1.0)  # its input is data

    def test_profiling_leaves_the_model_and_the_generators_as_they_were(self):
        torch.manual_seed(0)
        model = Uneven()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        torch.manual_seed(7)
        pe.export(model, (torch.randn(16, 1024),), profile=2)
        after_rng = torch.rand(4)
        torch.manual_seed(7)
        torch.randn(16, 1024)
        self.assertTrue(torch.equal(after_rng, torch.rand(4)))
        for key, value in model.state_dict().items():  # BatchNorm's running statistics
            self.assertTrue(torch.equal(before[key], value), key)

    def test_without_profile_the_graph_is_unchanged(self):
        plain = pe.export(Uneven(), (torch.randn(16, 1024),))
        profiled = pe.export(Uneven(), (torch.randn(16, 1024),), profile=1)
        for node in plain["nodes"]:
            self.assertNotIn("forward_seconds", node)
        strip = ("forward_seconds", "backward_seconds", "weight_grad_fraction")
        self.assertEqual([{k: v for k, v in n.items() if k not in strip}
                          for n in profiled["nodes"]],
                         [{k: v for k, v in n.items() if k not in strip}
                          for n in plain["nodes"]])
        self.assertEqual(profiled["edges"], plain["edges"])

    def test_repeats_must_be_positive(self):
        gm = trace(Uneven(), (), (), True, False)
        with self.assertRaises(ExportError):
            profile_nodes(gm, (torch.randn(4, 1024),), repeats=0)

    def test_a_device_that_does_not_exist_is_an_error(self):
        gm = trace(Uneven(), (), (), True, False)
        with self.assertRaises(ExportError) as e:
            profile_nodes(gm, (torch.randn(4, 1024),), repeats=1, device="cuda:99")
        self.assertIn("cuda:99", str(e.exception))
        costs = profile_nodes(gm, (torch.randn(4, 1024),), repeats=1, device="cpu")
        self.assertGreater(costs["wide"][0], 0)

    def test_cli_refuses_a_profile_device_without_profiling(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(SystemExit) as e:
                pe.main(["--model", "mlp", "--out", os.path.join(d, "g.json"),
                         "--profile-device", "cpu", "--quiet"])
            self.assertEqual(e.exception.code, 2)  # argparse's usage error

    def test_cli_writes_measured_times(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "g.json")
            self.assertEqual(pe.main(["--model", "test_export:ConvNet", "--out", path,
                                      "--input-shape", "2,3,16,16", "--profile", "2",
                                      "--profile-device", "cpu",
                                      "--quiet"]), 0)
            with open(path) as f:
                graph = json.load(f)
            validate(graph)
            conv = by_id(graph)["conv"]
            self.assertGreater(conv["forward_seconds"], 0)
            self.assertGreater(conv["backward_seconds"], 0)


if __name__ == "__main__":
    unittest.main()
