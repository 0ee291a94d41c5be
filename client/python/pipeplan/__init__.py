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

The exporter is the subpackage pipeplan.export (export/__init__.py); pipeplan.loss
names the losses a job trains with.

Client, PlanWatch, the wire helpers and the error classes are imported on first
use, so `import pipeplan` and pipeplan.export work without the generated modules
and without grpcio (the worker's stage compiler reads model packages through
pipeplan.export.package). The generated modules live in a `pipeplan/v1/` folder of
their own (the build tree's python/, or this package once installed): the package
path is extended to every `pipeplan/` folder on sys.path, so `pipeplan.v1` is
found there.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)  # noqa: F821 (the package's own)

_ERRORS = (
    "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange",
    "PermissionDenied", "PipeplanError", "ResourceExhausted", "Unauthenticated",
    "Unavailable", "Unimplemented", "Unknown")

# The client needs the generated modules and the errors need grpcio; `import
# pipeplan` and the exporter need neither.
_LAZY = dict({"Client": "pipeplan.client", "PlanWatch": "pipeplan.client",
              "schedule_name": "pipeplan.wire", "to_dict": "pipeplan.wire",
              "to_json": "pipeplan.wire", "write_graph": "pipeplan.export.graph_export"},
             **{name: "pipeplan.errors" for name in _ERRORS})


def __getattr__(name):
    import importlib
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("client", "errors", "export", "loss", "proto", "wire"):
        # pipeplan.export(model, example_inputs, ...) calls the exporter package.
        return importlib.import_module("pipeplan." + name)
    raise AttributeError("module 'pipeplan' has no attribute %r" % name)


__all__ = [
    "Client", "PlanWatch", "export", "write_graph", "schedule_name", "to_dict", "to_json",
    "PipeplanError", "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound", "OutOfRange",
    "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown",
]
