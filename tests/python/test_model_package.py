"""The exporter's model package (docs/model-package.md): manifest fields, a round
trip through a fresh process, the default loss, and the errors."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from conftest import CLIENT, MODELS, run_script
import pipeplan_export
import pipeplan_package as pp
import tiny_models


def _manifest(path):
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["gpt", "cnn", "skip"])
def test_manifest_matches_graph_and_files(fixtures, name):
    paths = fixtures[name]
    manifest = _manifest(paths["package"])
    with open(paths["graph"]) as f:
        graph = json.load(f)
    assert manifest["format"] == "pipeplan-model-package/1"
    assert manifest["graph_name"] == name
    assert manifest["nodes"] == [n["id"] for n in graph["nodes"]]
    h = hashlib.sha256()
    for file in ("graph_module.pt", "params.pt"):
        with open(os.path.join(paths["package"], file), "rb") as f:
            h.update(f.read())
    assert manifest["digest"] == h.hexdigest()
    module, inputs = tiny_models.MODELS[name](batch=4)
    assert [(e["name"], e["shape"], e["dtype"]) for e in manifest["inputs"]] == \
        [("x" if name != "gpt" else "idx", list(inputs[0].shape),
          pp.dtype_name(inputs[0].dtype))]
    assert manifest["output"] == {"shape": list(module(*inputs).shape), "dtype": "float32"}
    assert manifest["batch_dim"] == 0
    # every trainable parameter once, a tied one under its first name
    want = [(n, list(p.shape)) for n, p in module.named_parameters()]
    assert [(p["name"], p["shape"]) for p in manifest["parameters"]] == want


def test_gpt_manifest_details(fixtures):
    manifest = _manifest(fixtures["gpt"]["package"])
    assert manifest["inputs"][0]["high"] == 64  # vocabulary of the embedding idx feeds
    names = [p["name"] for p in manifest["parameters"]]
    assert "wte.weight" in names and "lm_head.weight" not in names
    assert manifest["loss"] == "cross_entropy"
    assert _manifest(fixtures["skip"]["package"])["loss"] == "mse"  # --loss given


def test_fresh_process_loads_and_runs_the_package(fixtures, tmp_path):
    """graph_module.pt loads with torch.load alone where the model needs no patched
    reload (cnn), and with client/python importable where it does (gpt calls
    torch.arange with a traced length); both give the original module's output."""
    check = (
        "import sys, torch\n"
        "def run(package, x_path):\n"
        "    gm = torch.load(package + '/graph_module.pt', weights_only=False)\n"
        "    named = dict(gm.named_parameters())\n"
        "    params = torch.load(package + '/params.pt')\n"
        "    assert all(torch.equal(named[k], v) for k, v in params.items())\n"
        "    torch.save(gm(torch.load(x_path)), x_path + '.out')\n"
        "run(sys.argv[1], sys.argv[2])\n"
        "sys.path.insert(0, sys.argv[5])\n"
        "run(sys.argv[3], sys.argv[4])\n")
    args, expected = [], {}
    for name in ("cnn", "gpt"):
        module, inputs = tiny_models.MODELS[name](batch=3)
        x_path = str(tmp_path / ("%s_x.pt" % name))
        torch.save(inputs[0], x_path)
        args += [fixtures[name]["package"], x_path]
        expected[x_path] = module(*inputs)
    proc = subprocess.run([sys.executable, "-c", check] + args + [CLIENT],
                          capture_output=True, text=True, cwd=str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    for x_path, want in expected.items():
        assert torch.equal(torch.load(x_path + ".out"), want)


def test_load_package_checks(fixtures, tmp_path):
    package = pp.load_package(fixtures["cnn"]["package"])
    assert package.manifest["nodes"][0] == "x"
    broken = tmp_path / "broken.ptpkg"
    os.system("cp -r %s %s" % (fixtures["cnn"]["package"], broken))
    with open(broken / "params.pt", "ab") as f:
        f.write(b"x")
    with pytest.raises(pp.PackageError, match="digest"):
        pp.load_package(str(broken))
    os.remove(broken / "params.pt")
    with pytest.raises(pp.PackageError, match="params.pt is missing"):
        pp.load_package(str(broken))
    with pytest.raises(pp.PackageError, match="not a directory"):
        pp.load_package(str(tmp_path / "nothing"))


def test_exporter_cli_writes_package(tmp_path):
    """A user's model through --model module:builder (found in the current
    directory), with --loss."""
    out, package = tmp_path / "cnn.json", tmp_path / "cnn.ptpkg"
    proc = run_script("pipeplan_export.py", "--model", "tiny_models:cnn", "--out",
                      str(out), "--package", str(package), "--loss", "mse", cwd=MODELS)
    assert proc.returncode == 0, proc.stderr
    manifest = _manifest(str(package))
    assert manifest["loss"] == "mse"
    with open(out) as f:
        assert manifest["nodes"] == [n["id"] for n in json.load(f)["nodes"]]
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p or ".old-" in p]


def test_default_loss():
    def entry(shape, dtype="float32"):
        return {"shape": shape, "dtype": dtype}
    # the output has the input's shape: regression (the exporter's mlp)
    assert pp.default_loss([entry([8, 1024])], entry([8, 1024])) == "mse"
    # classes or tokens last
    assert pp.default_loss([entry([8, 3, 8, 8])], entry([8, 10])) == "cross_entropy"
    assert pp.default_loss([entry([8, 16], "int64")], entry([8, 16, 64])) == \
        "cross_entropy"


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x), x


def test_package_needs_one_output_tensor(tmp_path):
    with pytest.raises(pp.PackageError, match="output must be one tensor"):
        pipeplan_export.export(TupleOut(), (torch.randn(2, 4),),
                               package=str(tmp_path / "p"))
    assert not os.path.exists(tmp_path / "p")
    with pytest.raises(pp.PackageError, match="loss"):
        pipeplan_export.export(nn.Linear(4, 4), (torch.randn(2, 4),),
                               package=str(tmp_path / "p"), loss="hinge")
