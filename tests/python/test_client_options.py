"""The Python client at parity with the CLI (issue 23): every flag of `pipeplan
plan` and `pipeplan jobs create` has its keyword in pipeplan.options, the one
table the client takes its keywords from, and each keyword sets the field its
flag sets. The training dict gets the CLI's checks (the model package against
the graph) and defaults, and files that cannot be read raise PipeplanErrors.

Needs the CLI ($PIPEPLAN_CLI) and the generated pipeplan.v1 modules
($PIPEPLAN_PYTHON_DIR, else build/python); no planner.
"""

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.append(os.environ.get("PIPEPLAN_PYTHON_DIR") or os.path.join(ROOT, "build", "python"))

import pipeplan  # noqa: E402
from pipeplan import options, wire  # noqa: E402
from pipeplan.proto import plan_pb2  # noqa: E402
from pipeplan.training import training_spec  # noqa: E402

CLI = os.environ.get("PIPEPLAN_CLI") or os.path.join(ROOT, "build", "client", "pipeplan")
GRAPH = os.path.join(ROOT, "tests", "data", "chain_small.json")


def cli_flags(*words):
    """The command's own flags (not the global ones), from its --help."""
    out = subprocess.run([CLI, *words, "--help"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    own = out.split("\nglobal flags", 1)[0]
    return {m.group(1) for m in re.finditer(r"^  (?:-\w, )?--([a-z][a-z0-9-]*)", own, re.M)}


def test_every_plan_flag_has_its_keyword():
    flags = cli_flags("plan")
    table = {o.flag for o in options.PLAN}
    assert flags - set(options.NOT_REQUEST) == table


def test_every_jobs_create_flag_has_its_keyword():
    flags = cli_flags("jobs", "create")
    table = {o.flag for o in options.PLAN + options.TRAINING}
    assert flags - set(options.NOT_REQUEST) == table


# A value for each kind, and what the wire field then holds.
SAMPLES = {int: (3, 3), float: (0.25, 0.25), str: ("layer", "layer"),
           "schedule": ("ZBVZeroBubble", plan_pb2.SCHEDULE_ZBV_ZERO_BUBBLE),
           "method": ("milp", plan_pb2.METHOD_MILP),
           "comm_model": ("relay", plan_pb2.COMM_RELAY),
           "optimizer": ("momentum", plan_pb2.OPTIMIZER_MOMENTUM),
           "precision": ("fp32", plan_pb2.PRECISION_FP32)}


@pytest.mark.parametrize("option", options.PLAN, ids=lambda o: o.keyword)
def test_each_plan_keyword_sets_its_field(option):
    value, wanted = SAMPLES[option.kind]
    request = wire.plan_request(GRAPH, {"devices": [{"id": "d0"}]}, **{option.keyword: value})
    assert getattr(request.options, option.field) == wanted
    others = [f.name for f, v in request.options.ListFields() if f.name != option.field]
    assert others == []


def test_unknown_keywords_are_refused():
    with pytest.raises(TypeError, match="unknown plan option 'rank'"):
        wire.plan_options(rank=2)
    with pytest.raises(TypeError, match="unknown training key"):
        training_spec({"learning_rate": 1}, wire.graph_message(GRAPH))


def fake_package(tmp_path, nodes, fmt="pipeplan-model-package/1"):
    package = tmp_path / "model.ptpkg"
    package.mkdir()
    (package / "manifest.json").write_text(json.dumps(
        {"format": fmt, "digest": "abc123", "nodes": nodes, "loss": "mse"}))
    return str(package)


def test_training_gets_the_clis_checks_and_defaults(tmp_path):
    graph = wire.graph_message(GRAPH)
    package = fake_package(tmp_path, [n.id for n in graph.nodes])
    data = tmp_path / "data.pt"
    data.write_bytes(b"x")
    os.chdir(tmp_path)
    spec = training_spec({"model_package": "model.ptpkg", "data": "tensors:data.pt",
                          "batch_size": 8, "seed": 7}, graph, plan_optimizer="sgd")
    assert spec.model_package == package  # absolute, as the workers read it
    assert spec.package_digest == "abc123"
    assert spec.data == "tensors:" + str(data)
    assert (spec.loss, spec.optimizer, spec.lr, spec.dtype, spec.seed) == (
        "mse", "sgd", 1e-3, "float32", 7)
    with pytest.raises(pipeplan.InvalidArgument, match="batch_size is required"):
        training_spec({"model_package": package, "data": "synthetic:seed=1"}, graph)
    with pytest.raises(pipeplan.InvalidArgument, match="training.data: no file"):
        training_spec({"model_package": package, "data": "tensors:nope.pt", "batch_size": 8},
                      graph)


def test_a_package_of_another_graph_or_none_is_refused(tmp_path):
    graph = wire.graph_message(GRAPH)
    other = fake_package(tmp_path, ["x"])
    with pytest.raises(pipeplan.InvalidArgument, match="has 1 nodes, the job's graph"):
        training_spec({"model_package": other, "data": "synthetic:seed=1", "batch_size": 8},
                      graph)
    with pytest.raises(pipeplan.NotFound) as e:  # the CLI's check; Python skipped it
        training_spec({"model_package": str(tmp_path / "missing.ptpkg"),
                       "data": "synthetic:seed=1", "batch_size": 8}, graph)
    assert isinstance(e.value, pipeplan.PipeplanError)


def test_unreadable_files_raise_pipeplan_errors(tmp_path):
    # A bare FileNotFoundError escaped where the docs promise PipeplanError.
    with pytest.raises(pipeplan.NotFound, match="graph: no file"):
        wire.graph_message(str(tmp_path / "missing.json"))
    with pytest.raises(pipeplan.FailedPrecondition, match="is a directory"):
        wire.cluster_message(str(tmp_path))
    with pytest.raises(pipeplan.NotFound, match="token_file"):
        pipeplan.Client("127.0.0.1:1", token_file=str(tmp_path / "token"))
