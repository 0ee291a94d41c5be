"""pipeplan for Python: a client of the planner service and the PyTorch exporter.

    import pipeplan
    client = pipeplan.Client("127.0.0.1:7600", token_file="token")
    plan = client.plan("graph.json", "cluster.json", ranks=4, schedule="1F1B")
    graph = pipeplan.export(model, example_inputs, package="model.ptpkg")  # needs torch

Client (client.py): plan, create_job / get_job / list_jobs / cancel_job / delete_job /
replan_job / get_plan, watch_plan, reports / step_reports, and the worker calls
(register_worker, report_step, heartbeat, finish_worker). Errors (errors.py): a
PipeplanError subclass per gRPC status code (InvalidArgument, NotFound,
FailedPrecondition, ResourceExhausted, Unavailable, Unauthenticated, ...).
Messages: pipeplan.proto (the generated pipeplan.v1 modules); wire.py turns dicts,
paths and names into them.

Client, PlanWatch and the wire helpers are imported on first use, so `import
pipeplan` and pipeplan.export work without the generated modules. Those live in
a `pipeplan/v1/` folder of their own (the build tree's python/, or this package
once installed): the package path is extended to every `pipeplan/` folder on
sys.path, so `pipeplan.v1` is found there.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)  # noqa: F821 (the package's own)

from pipeplan.errors import (  # noqa: E402
    Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, FailedPrecondition,
    Internal, InvalidArgument, NotFound, OutOfRange, PermissionDenied, PipeplanError,
    ResourceExhausted, Unauthenticated, Unavailable, Unimplemented, Unknown)

# The client needs the generated modules; `import pipeplan` and export do not.
_LAZY = {"Client": "pipeplan.client", "PlanWatch": "pipeplan.client",
         "schedule_name": "pipeplan.wire", "to_dict": "pipeplan.wire",
         "to_json": "pipeplan.wire"}


def __getattr__(name):
    import importlib
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("client", "proto", "wire"):
        return importlib.import_module("pipeplan." + name)
    raise AttributeError("module 'pipeplan' has no attribute %r" % name)


def export(model, example_inputs, **kwargs):
    """pipeplan_export.export: traces `model` (an nn.Module) on `example_inputs`
    and returns the graph as a dict (the JSON form of pipeplan.v1.ModelGraph);
    `package=DIR` also writes the model package. Keywords: name, batch_size,
    leaf_modules, leaf_names, default_leaves, transformer_layers_as_leaves,
    package, loss, real_forward. Imports torch on first use."""
    return _exporter().export(model, example_inputs, **kwargs)


def write_graph(graph, path):
    """pipeplan_export.write_graph: the graph dict as JSON, one node per line."""
    _exporter().write_graph(graph, path)


def _exporter():
    """The pipeplan_export module, which sits next to this package (client/python,
    or site-packages once installed)."""
    try:
        import pipeplan_export
    except ImportError:
        import os
        import sys
        sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import pipeplan_export
    return pipeplan_export


__all__ = [
    "Client", "PlanWatch", "export", "write_graph", "schedule_name", "to_dict", "to_json",
    "PipeplanError", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange",
    "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown",
]
