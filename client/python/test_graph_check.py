"""Tests of pipeplan_graph_check: each rule rejects the graph that breaks it.

Run: /usr/bin/python3 -m unittest discover -s client/python -p 'test_*.py'
"""

import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pipeplan_graph_check import validate  # noqa: E402

GOOD = {
    "name": "g",
    "batch_size": 8,
    "nodes": [
        {"id": "x", "op": "placeholder", "output_bytes": 16},
        {"id": "fc", "op": "linear", "forward_flops": 1e6, "param_bytes": 64,
         "param_key": "fc.weight", "weight_grad_fraction": 0.5},
        {"id": "y", "op": "output"},
    ],
    "edges": [{"src": "x", "dst": "fc", "bytes": 16}, {"src": "fc", "dst": "y"}],
}


def broken(change):
    g = copy.deepcopy(GOOD)
    change(g)
    return g


class ValidateTest(unittest.TestCase):
    def test_accepts_a_valid_graph(self):
        validate(GOOD)

    def test_rejects_each_broken_rule(self):
        cases = {
            "unknown graph field": lambda g: g.update(stages=2),
            "unknown node field": lambda g: g["nodes"][0].update(flops=1),
            "unknown edge field": lambda g: g["edges"][0].update(size=1),
            "no nodes": lambda g: g.update(nodes=[], edges=[]),
            "duplicate id": lambda g: g["nodes"][2].update(id="fc"),
            "empty id": lambda g: g["nodes"][2].update(id=""),
            "negative number": lambda g: g["nodes"][1].update(param_bytes=-1),
            "infinite number": lambda g: g["nodes"][1].update(forward_flops=float("inf")),
            "weight_grad_fraction over 1": lambda g: g["nodes"][1].update(
                weight_grad_fraction=1.5),
            "edge to an unknown node": lambda g: g["edges"][1].update(dst="z"),
            "self-loop": lambda g: g["edges"][1].update(dst="fc"),
            "negative edge bytes": lambda g: g["edges"][0].update(bytes=-4),
            "cycle": lambda g: g["edges"].append({"src": "y", "dst": "x"}),
        }
        for name, change in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError):
                    validate(broken(change))


if __name__ == "__main__":
    unittest.main()
