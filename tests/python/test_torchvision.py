"""Models nobody here wrote: torchvision's ResNet-18, MobileNetV3-Small and a small
VisionTransformer export (graph and package), the graph passes the planner's checks,
the package reloads and computes what the model does, and the plan CLI plans the
graph when the binary is given ($PIPEPLAN_CLI, set by CTest). A model torch.fx
cannot trace gets a message naming the construct, its source line and the ways out.
Random weights only (weights=None): nothing is downloaded. CPU, about 20 s.

Run: /usr/bin/python3 -m pytest -q tests/python/test_torchvision.py
The whole torchvision matrix: scripts/torchvision_matrix.py (docs/models.md).
"""

import json
import os
import subprocess

import pytest
import torch
import torch.nn as nn
import torchvision  # Debian's python3-torchvision, which scripts/setup.sh installs
from torchvision.models.vision_transformer import VisionTransformer

import pipeplan.export as pe  # conftest puts client/python on sys.path
from pipeplan.export.package import load_package
from pipeplan_graph_check import validate

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def small_vit():
    """torchvision's VisionTransformer, small: its forward has the torch._assert calls
    with an f-string of `x.shape` that broke the package's reload."""
    return VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                             hidden_dim=16, mlp_dim=32, num_classes=10)


MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(weights=None), 64),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(weights=None), 64),
    "vit": (small_vit, 32),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def exported(request, tmp_path_factory):
    """(model, input, graph, package dir) of one model, exported once."""
    build, size = MODELS[request.param]
    torch.manual_seed(0)
    model = build()
    x = torch.randn(2, 3, size, size)
    package = str(tmp_path_factory.mktemp(request.param) / "model.ptpkg")
    graph = pe.export(model, (x,), name=request.param, package=package)
    return model, x, graph, package


def test_graph_is_valid(exported):
    model, _, graph, _ = exported
    validate(graph)  # raises ValueError naming the rule a graph breaks
    params = sum(n.get("param_bytes", 0) for n in graph["nodes"])
    assert params == 4 * sum(p.numel() for p in model.parameters())
    assert sum(n.get("forward_flops", 0) for n in graph["nodes"]) > 0


def test_package_reloads_and_computes_the_model(exported):
    model, x, graph, package = exported
    pkg = load_package(package)
    assert pkg.manifest["nodes"] == [n["id"] for n in graph["nodes"]]
    module = pkg.module.eval()
    module.load_state_dict(pkg.params, strict=False)
    with torch.no_grad():
        assert torch.allclose(module(x), model.eval()(x), atol=1e-5)


@pytest.mark.skipif(not os.environ.get("PIPEPLAN_CLI"),
                    reason="PIPEPLAN_CLI (the pipeplan binary) not set")
def test_plan_cli_plans_the_graph(exported, tmp_path):
    graph = exported[2]
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph))
    out = subprocess.run(
        [os.environ["PIPEPLAN_CLI"], "plan", "--graph", str(path), "--cluster",
         os.path.join(ROOT, "tests", "data", "cluster_8xa100.json"), "--ranks", "2",
         "--schedule", "1F1B", "--microbatches", "4", "-o", "json"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert len(plan["stages"]) == 2 and plan["step_seconds"] > 0


class ShapeInMessage(nn.Module):
    """ViT's pattern in small: `x.shape` read only by an assert's message, then a
    second attribute read that the reload used to name one lower."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        torch._assert(x.dim() == 2, f"expected (batch, features), got {x.shape}")
        return self.fc(x).reshape(x.shape[0], -1)


def test_unread_attribute_does_not_break_the_reload(tmp_path):
    graph = pe.export(ShapeInMessage(), (torch.randn(2, 8),), package=str(tmp_path / "p"))
    assert load_package(str(tmp_path / "p")).manifest["nodes"] == \
        [n["id"] for n in graph["nodes"]]


class Gate(nn.Module):
    """Data-dependent control flow: which branch runs depends on the values."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gate = Gate()

    def forward(self, x):
        return self.gate(self.fc(x))


def test_untraceable_construct_is_named_with_the_way_out(tmp_path):
    with pytest.raises(pe.ExportError) as info:
        pe.export(Gated(), (torch.randn(2, 8),))
    msg = str(info.value)
    assert "module 'gate'" in msg
    assert "data-dependent control flow" in msg
    assert "test_torchvision.py" in msg and "`if x.sum() > 0:`" in msg
    assert "--leaf-module %s.Gate" % __name__ in msg and "--leaf-name gate" in msg
    assert "--cut-granularity" in msg
    # The way out it names works: the gate is one node, and the package reloads.
    graph = pe.export(Gated(), (torch.randn(2, 8),), leaf_names=["gate"],
                      package=str(tmp_path / "p"))
    validate(graph)
    assert "gate" in [n["id"] for n in graph["nodes"]]
    load_package(str(tmp_path / "p"))


class IteratesInput(nn.Module):
    def forward(self, x):
        return torch.stack([row * 2 for row in x])


def test_untraceable_top_level_names_iteration():
    with pytest.raises(pe.ExportError) as info:
        pe.export(IteratesInput(), (torch.randn(2, 8),))
    msg = str(info.value)
    assert "top-level forward" in msg and "iteration over a traced value" in msg
    assert "`return torch.stack([row * 2 for row in x])`" in msg
    assert "submodule and mark that a leaf" in msg
