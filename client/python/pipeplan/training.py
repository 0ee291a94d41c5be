"""create_job's `training` dict -> pipeplan.v1.TrainingSpec, with the checks and
defaults of `pipeplan jobs create`'s training flags (client/cli/training_flags.cc):
the model package must exist and match the job's graph node for node (its
digest is then sent along), `data` and `batch_size` are required and a
`tensors:` file must exist; paths become absolute (the workers read them);
optimizer, lr, loss and dtype default as the CLI's do.

Errors are PipeplanErrors, as the CLI's: NotFound for a missing package,
InvalidArgument naming the key for the rest.
"""

import json
import os

from pipeplan import options as options_table
from pipeplan import wire
from pipeplan.errors import InvalidArgument
from pipeplan.proto import planner_service_pb2

PACKAGE_FORMAT = "pipeplan-model-package/1"
_KEYS = set(options_table.training_keys()) | {"package_digest"}


def _manifest(package):
    text = wire.read_text("training.model_package", os.path.join(package, "manifest.json"))
    try:
        manifest = json.loads(text)
    except ValueError as e:
        raise InvalidArgument("training.model_package: %s/manifest.json: %s" % (package, e))
    if manifest.get("format") != PACKAGE_FORMAT:
        raise InvalidArgument("training.model_package: %s/manifest.json: format is %r, not %s"
                              % (package, manifest.get("format"), PACKAGE_FORMAT))
    return manifest


def check_package_matches_graph(package, manifest, graph):
    """InvalidArgument unless the package's nodes are the graph's, in order."""
    nodes, graph_nodes = manifest.get("nodes", []), [n.id for n in graph.nodes]
    if len(nodes) != len(graph_nodes):
        raise InvalidArgument("model package %s has %d nodes, the job's graph %d"
                              % (package, len(nodes), len(graph_nodes)))
    for i, (mine, theirs) in enumerate(zip(nodes, graph_nodes)):
        if mine != theirs:
            raise InvalidArgument("model package %s: node %d is %r, the job's graph has %r"
                                  % (package, i, mine, theirs))


def _data(data):
    if not data:
        raise InvalidArgument("training.data is required (tensors:FILE or synthetic:seed=N)")
    if data.startswith("tensors:"):
        path = data[len("tensors:"):]
        if not os.path.isfile(path):
            raise InvalidArgument("training.data: no file %s" % path)
        return "tensors:" + os.path.abspath(path)
    return data


def training_spec(training, graph, plan_optimizer=None):
    """The TrainingSpec for `training` (a dict of options.TRAINING keys or a
    TrainingSpec) of a job on `graph` (a ModelGraph); None gives None.
    `plan_optimizer` (the plan keyword) names the training optimizer when
    `training` names none, as --optimizer does."""
    if training is None:
        return None
    if isinstance(training, planner_service_pb2.TrainingSpec):
        training = wire.to_dict(training)
    if not isinstance(training, dict):
        raise InvalidArgument("training: want a dict or a TrainingSpec, got %s"
                              % type(training).__name__)
    unknown = set(training) - _KEYS
    if unknown:
        raise TypeError("unknown training key(s) %s (use %s)"
                        % (", ".join(sorted(unknown)), ", ".join(sorted(_KEYS))))
    values = {k: v for k, v in training.items() if v is not None}
    if not values.get("model_package"):
        raise InvalidArgument("training.model_package is required")
    package = os.path.abspath(values["model_package"])
    manifest = _manifest(package)
    check_package_matches_graph(package, manifest, graph)
    values.update(model_package=package, package_digest=manifest.get("digest", ""),
                  data=_data(values.get("data")))
    if int(values.get("batch_size", 0)) < 1:
        raise InvalidArgument("training.batch_size is required (rows per step)")
    if values.get("checkpoint_dir"):
        values["checkpoint_dir"] = os.path.abspath(values["checkpoint_dir"])
    values.setdefault("loss", manifest.get("loss", ""))
    if plan_optimizer is not None and isinstance(plan_optimizer, str):
        values.setdefault("optimizer", plan_optimizer)
    for key, default in options_table.TRAINING_DEFAULTS.items():
        values.setdefault(key, default)
    return wire._message("training", values, planner_service_pb2.TrainingSpec)
