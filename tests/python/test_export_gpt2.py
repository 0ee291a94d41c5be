"""The exporter on a GPT-2-small-sized model (tests/models/gpt2.py) with 8 x 1,024
tokens: shapes come from fake tensors (no real forward, no fallback warning) and
the costs are GPT-2's, counted by hand. Speed and memory are measured by
bench/python/export_bench.py, not here."""

import os
import warnings

import pytest
import torch

import gpt2
import pipeplan_export as pe
import pipeplan_package


def by_id(graph):
    return {n["id"]: n for n in graph["nodes"]}


def test_gpt2_small_costs_from_fake_tensors():
    module, inputs = gpt2.small(batch=8, seq=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to a real forward would warn
        graph = pe.export(module, inputs, name="gpt2")
    b, t, d, heads, vocab, layers = 8, 1024, 768, 12, 50257, 12
    nodes = by_id(graph)
    assert nodes["lm_head"]["forward_flops"] == 2 * b * t * d * vocab
    assert nodes["h_0_attn_c_attn"]["forward_flops"] == 2 * b * t * d * 3 * d
    assert nodes["h_11_c_fc"]["forward_flops"] == 2 * b * t * d * 4 * d
    scores = [n for n in graph["nodes"] if n["op"] == "matmul"]
    assert len(scores) == 2 * layers  # q @ k^T and att @ v per layer
    assert all(n["forward_flops"] == 2 * b * heads * t * t * (d // heads) for n in scores)
    assert nodes["h_0_attn_c_attn"]["output_bytes"] == b * t * 3 * d * 4
    assert nodes["lm_head"]["output_bytes"] == b * t * vocab * 4
    # every parameter once (the LM head is tied to wte): GPT-2 small's 124,439,808
    params = {n["param_key"]: n["param_bytes"] for n in graph["nodes"] if n.get("param_bytes")}
    assert sum(params.values()) == 124_439_808 * 4
    assert nodes["lm_head"]["param_key"] == nodes["wte"]["param_key"] == "wte.weight"


@pytest.mark.parametrize("builder", ["tiny", "tiny_masked"])
def test_fake_and_real_shapes_agree_and_package(builder, tmp_path):
    def build():
        if builder == "tiny":
            return gpt2.tiny()
        torch.manual_seed(0)
        module = gpt2.GPT2Masked(vocab=64, d=32, heads=4, layers=2, context=16)
        mask = torch.ones(2, 16, dtype=torch.bool)
        mask[1, 12:] = False  # padding at the end of the second row
        return module, (torch.zeros(2, 16, dtype=torch.long), mask)

    module, inputs = build()
    pkg = str(tmp_path / "pkg")
    fake = pe.export(module, inputs, name=builder, package=pkg)
    real = pe.export(*build(), name=builder, real_forward=True)
    assert fake == real
    package = pipeplan_package.load_package(pkg)
    manifest = package.manifest
    expected = [("input_ids", "int64", [2, 16])]
    if builder == "tiny_masked":
        expected.append(("mask", "bool", [2, 16]))
    assert [(i["name"], i["dtype"], i["shape"]) for i in manifest["inputs"]] == expected
    assert manifest["output"] == {"shape": [2, 16, 64], "dtype": "float32"}
    # the package's module computes what the model computes
    module.eval()
    package.module.eval()
    with torch.no_grad():
        assert torch.allclose(package.module(*inputs), module(*inputs))
    assert os.path.isfile(os.path.join(pkg, "params.pt"))
