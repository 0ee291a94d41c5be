"""pipeplan_stage_compile: stages of 1, 2 and 4 (and one node each) for the test
models; running them in a chain gives the whole model's loss and gradients; the
manifest's invariants; the cache; bad input."""

import json
import os

import pytest
import torch

from conftest import run_script
import pipeplan_data
import pipeplan_loss
import pipeplan_package as pp
import pipeplan_reference_train as ref
import pipeplan_stage_compile as sc
import stage_chain


def even_split(num_nodes, num_stages):
    return [i * num_stages // num_nodes for i in range(num_nodes)]


def compile_to(fixture, node_stage, microbatch_size, out):
    assert sc.write_stages(fixture["package"], node_stage, microbatch_size, out) == \
        "compiled"
    return stage_chain.load_stages(out, pp.load_package(fixture["package"]).params)


def whole_model_step(fixture, batches, loss):
    """Loss and gradients of the whole model on the same microbatches."""
    package = pp.load_package(fixture["package"])
    model = ref.prepare_model(package)
    total = 0.0
    for inputs, targets in batches:
        term = pipeplan_loss.compute(loss, model(*inputs), targets) / len(batches)
        term.backward()
        total += term.item()
    return total, {n: p.grad for n, p in pp.canonical_parameters(model)}


def assert_close(got, want, rel=1e-5):
    scale = max(float(want.abs().max()), 1e-30)
    assert float((got - want).abs().max()) <= rel * scale


def check_manifest(manifest, package, node_stage, microbatch_size):
    assert manifest["format"] == "pipeplan-stages/1"
    assert manifest["package_digest"] == package.manifest["digest"]
    assert manifest["assignment_digest"] == sc.assignment_digest(node_stage)
    assert manifest["microbatch_size"] == microbatch_size
    stages = manifest["stages"]
    assert manifest["num_stages"] == len(stages) == max(node_stage) + 1
    for a, b in zip(stages, stages[1:]):
        assert a["outputs"] == b["inputs"]
    assert [x["name"] for x in stages[0]["inputs"]] == \
        [x["name"] for x in package.manifest["inputs"]]
    assert not any(x["requires_grad"] for x in stages[0]["inputs"])
    assert len(stages[-1]["outputs"]) == 1
    assert stages[-1]["outputs"][0]["shape"][0] == microbatch_size
    # every parameter is in some stage, under its canonical name
    names = {p["name"] for s in stages for p in s["parameters"]}
    assert names == set(package.params)


@pytest.mark.parametrize("name,num_stages", [("gpt", 1), ("gpt", 2), ("gpt", 4),
                                             ("cnn", 1), ("cnn", 2), ("cnn", 4),
                                             ("skip", 3)])
def test_chain_matches_whole_model(fixtures, tmp_path, name, num_stages):
    fixture = fixtures[name]
    package = pp.load_package(fixture["package"])
    node_stage = even_split(len(package.manifest["nodes"]), num_stages)
    microbatch = 4
    manifest, modules = compile_to(fixture, node_stage, microbatch, str(tmp_path / "st"))
    check_manifest(manifest, package, node_stage, microbatch)
    loss = package.manifest["loss"]
    data = pipeplan_data.open_data("tensors:" + fixture["data"], package.manifest, loss)
    batches = pipeplan_data.microbatches(*data.batch(1, 3 * microbatch), 3)
    got_loss, got_grads = stage_chain.run_step(manifest, modules, loss, batches)
    want_loss, want_grads = whole_model_step(fixture, batches, loss)
    assert abs(got_loss - want_loss) <= 1e-5 * abs(want_loss)
    assert set(got_grads) == set(want_grads)
    for key, want in want_grads.items():
        assert_close(got_grads[key], want)


def test_gpt_tied_weight_in_first_and_last_stage(fixtures, tmp_path):
    package = pp.load_package(fixtures["gpt"]["package"])
    manifest, _ = compile_to(fixtures["gpt"], even_split(len(package.manifest["nodes"]), 2),
                             2, str(tmp_path / "st"))
    first, last = manifest["stages"][0], manifest["stages"][-1]
    assert {"name": "wte.weight", "path": "wte.weight"} in first["parameters"]
    assert {"name": "wte.weight", "path": "lm_head.weight"} in last["parameters"]


@pytest.mark.parametrize("name", ["skip", "gpt"])
def test_one_node_per_stage(fixtures, tmp_path, name):
    """Every cut there is. skip: its input and first activation cross several
    stages, its batch size (read by the first nodes) is baked into the last. gpt:
    idx.device, read a stage before torch.arange uses it, crosses as a device."""
    fixture = fixtures[name]
    package = pp.load_package(fixture["package"])
    loss = package.manifest["loss"]
    n = len(package.manifest["nodes"])
    manifest, modules = compile_to(fixture, list(range(n)), 2, str(tmp_path / "st"))
    first_input = package.manifest["inputs"][0]["name"]
    relaying = [s["index"] for s in manifest["stages"]
                if any(x["name"] == first_input for x in s["outputs"])]
    assert len(relaying) > 3
    assert not any(x["name"].startswith("size") for s in manifest["stages"]
                   for x in s["outputs"])
    batches = pipeplan_data.microbatches(
        *pipeplan_data.open_data("tensors:" + fixture["data"], package.manifest,
                                 loss).batch(0, 4), 2)
    got_loss, got_grads = stage_chain.run_step(manifest, modules, loss, batches)
    want_loss, want_grads = whole_model_step(fixture, batches, loss)
    assert abs(got_loss - want_loss) <= 1e-5 * abs(want_loss)
    for key, want in want_grads.items():
        assert_close(got_grads[key], want)


def test_defaulted_inputs_are_not_stage_inputs(tmp_path):
    """nn.TransformerEncoder's mask arguments keep their default (None): baked,
    not inputs."""
    import pipeplan_export
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    module = torch.nn.TransformerEncoder(layer, 2)
    package = str(tmp_path / "enc.ptpkg")
    pipeplan_export.export(module, (torch.randn(2, 5, 16),), package=package)
    loaded = pp.load_package(package)
    assert [x["name"] for x in loaded.manifest["inputs"]] == ["src"]
    n = len(loaded.manifest["nodes"])
    manifest, modules = compile_to({"package": package}, even_split(n, 3), 2,
                                   str(tmp_path / "st"))
    assert [x["name"] for x in manifest["stages"][0]["inputs"]] == ["src"]
    inputs = sc.example_inputs(loaded.manifest, 2)
    acts = inputs
    for m in modules:
        acts = m(*acts)
    assert_close(acts[0], loaded.module(*inputs))


def test_cache_and_cli(fixtures, tmp_path):
    fixture = fixtures["cnn"]
    n = len(pp.load_package(fixture["package"]).manifest["nodes"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"graph_name": "cnn", "node_stage": even_split(n, 2)}))
    out = str(tmp_path / "st")
    args = ["--package", fixture["package"], "--node-stage", str(plan),
            "--microbatch-size", "4", "--out", out]
    proc = run_script("pipeplan_stage_compile.py", *args)
    assert proc.returncode == 0, proc.stderr
    assert "2 stages (compiled)" in proc.stdout
    mtime = os.stat(os.path.join(out, "stages.json")).st_mtime_ns
    assert sc.write_stages(fixture["package"], even_split(n, 2), 4, out) == "cached"
    assert os.stat(os.path.join(out, "stages.json")).st_mtime_ns == mtime
    # another assignment or microbatch size replaces the directory
    assert sc.write_stages(fixture["package"], even_split(n, 3), 4, out) == "compiled"
    assert sc.write_stages(fixture["package"], even_split(n, 3), 2, out) == "compiled"
    with open(os.path.join(out, "stages.json")) as f:
        manifest = json.load(f)
    assert (manifest["num_stages"], manifest["microbatch_size"]) == (3, 2)
    assert sorted(os.listdir(out)) == ["stage_0.pt", "stage_1.pt", "stage_2.pt",
                                       "stages.json"]
    assert sorted(os.listdir(tmp_path)) == ["plan.json", "st"]


def test_builtin_transformer_and_mlp(tmp_path):
    """The exporter's built-ins (dropout: compared in eval mode)."""
    import pipeplan_export
    for model in ("transformer", "mlp"):
        package = str(tmp_path / (model + ".ptpkg"))
        assert pipeplan_export.main(["--model", model, "--out",
                                     str(tmp_path / (model + ".json")),
                                     "--package", package]) == 0
        loaded = pp.load_package(package)
        node_stage = even_split(len(loaded.manifest["nodes"]), 2)
        out = str(tmp_path / (model + "_st"))
        sc.write_stages(package, node_stage, 2, out)
        manifest, modules = stage_chain.load_stages(out)
        inputs = sc.example_inputs(loaded.manifest, 2)
        acts = inputs
        for m in modules:
            acts = m.eval()(*acts)
        want = loaded.module.eval()(*inputs)
        assert_close(acts[0], want)


def test_bad_input_exit_2(fixtures, tmp_path, capsys):
    fixture = fixtures["cnn"]
    n = len(pp.load_package(fixture["package"]).manifest["nodes"])
    out = str(tmp_path / "st")

    def compile_error(node_stage, microbatch_size="2"):
        code = sc.main(["--package", fixture["package"], "--node-stage", node_stage,
                        "--microbatch-size", microbatch_size, "--out", out])
        assert not os.path.exists(out)
        return code, capsys.readouterr().err

    assert compile_error(json.dumps([0] * (n - 1))) == (
        2, "pipeplan_stage_compile: node_stage: has %d entries but the package has %d "
        "nodes\n" % (n - 1, n))
    code, err = compile_error(json.dumps([0] * (n - 1) + [2]))
    assert code == 2 and "node_stage: stage 1 has no nodes" in err
    code, err = compile_error(json.dumps([0] * n), microbatch_size="0")
    assert code == 2 and "microbatch_size" in err
    code, err = compile_error(str(tmp_path / "missing.json"))
    assert code == 2 and "--node-stage: cannot read" in err
    # the process's exit status
    proc = run_script("pipeplan_stage_compile.py", "--package", str(tmp_path / "none"),
                      "--node-stage", "[0]", "--microbatch-size", "1", "--out", out)
    assert proc.returncode == 2 and "package" in proc.stderr and "not a directory" \
        in proc.stderr


def test_validation_errors(fixtures):
    package = pp.load_package(fixtures["cnn"]["package"])
    nodes = package.manifest["nodes"]
    n = len(nodes)
    with pytest.raises(sc.CompileError, match="has %d entries" % (n + 1)):
        sc.compile_stages(package, [0] * (n + 1), 2)
    with pytest.raises(sc.CompileError, match="stage 1 has no nodes"):
        sc.compile_stages(package, [0] * (n - 1) + [2], 2)
    # a backward edge: the last node (fc2) early, its input (relu_2) late
    node_stage = [0] * (n - 2) + [1, 0]
    with pytest.raises(sc.CompileError) as err:
        sc.compile_stages(package, node_stage, 2)
    assert "node %r (stage 0) uses %r of stage 1" % (nodes[-1], nodes[-2]) in str(err.value)
    with pytest.raises(sc.CompileError, match="microbatch_size"):
        sc.compile_stages(package, [0] * n, 0)
    for bad in ("[0, -1]", "[0, 1.5]", '{"stages": []}', "[true]", "{"):
        with pytest.raises(sc.CompileError, match="node.stage"):
            sc.read_node_stage(bad)
    assert sc.read_node_stage('{"node_stage": [0, 1]}') == [0, 1]
    assert sc.read_node_stage("[0,0,1]") == [0, 0, 1]
