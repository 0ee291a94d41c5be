"""pipeplan.export: a PyTorch nn.Module as a pipeplan graph (pipeplan.v1.ModelGraph
JSON) and, on request, as the model package the torch executor trains.

    import pipeplan.export
    graph = pipeplan.export(model, example_inputs, package="model.ptpkg")
    pipeplan.export.write_graph(graph, "graph.json")

The model is traced with torch.fx (tracer.py, with tracer_patches.py), run once on
fake tensors of the example inputs' shapes and dtypes so every node knows what it
produces (propagation.py), costed node by node (cost_model.py, leaf_costs.py,
op_tables.py, tensor_meta.py) and written as nodes and edges (graph_export.py);
package.py writes and reads the model package. examples.py holds the built-in
example models, inputs.py example inputs from `name:dtype[shape]` specs, cli.py the
command line of `pipeplan_export.py`.

Dependencies run one way, with no cycle: tensor_meta, op_tables, errors,
tracer_patches (torch only) <- leaf_costs <- cost_model; tracer_patches <- tracer;
tracer_patches <- package (with pipeplan.loss); all of them <- graph_export <- cli.
Reading a package (the stage compiler, the trainers) imports package and
tracer_patches only. This file imports nothing of them until a name is used.

API (also importable from the modules named):
  export(module, example_inputs, name="model", batch_size=None, leaf_modules=(),
         leaf_names=(), default_leaves=True, transformer_layers_as_leaves=False,
         package=None, loss=None, real_forward=False) -> dict      graph_export
  write_graph(graph, path)                                         graph_export
  trace(module, ...) -> torch.fx.GraphModule (raises ExportError)  tracer
  propagate(gm, example_inputs, count=(), real_forward=False)      propagation
  parse_input_spec("input_ids:int64[8,1024]") -> (name, dtype, shape), inputs_from_specs
  main(argv)                                                       cli
"""

import importlib
import sys
import types

_API = {
    "export": "graph_export", "write_graph": "graph_export", "ACT_NONE": "graph_export",
    "WGF_NONE": "graph_export", "trace": "tracer", "PipeplanTracer": "tracer",
    "resolve_class": "tracer", "DEFAULT_LEAF_MODULES": "tracer",
    "patched_proxy_iter": "tracer_patches", "propagate": "propagation",
    "ExportError": "errors", "mha_cost": "leaf_costs", "rnn_cost": "leaf_costs",
    "transformer_layer_cost": "leaf_costs", "parse_input_spec": "inputs",
    "inputs_from_specs": "inputs", "example_tensor": "inputs", "builtin": "examples",
    "BUILTINS": "examples", "main": "cli",
}


def __getattr__(name):
    # Imported on first use, so that reading a package does not load the tracer.
    if name in _API:
        return getattr(importlib.import_module("pipeplan.export." + _API[name]), name)
    raise AttributeError("module 'pipeplan.export' has no attribute %r" % name)


class _CallableModule(types.ModuleType):
    """`pipeplan.export(model, example_inputs, ...)` was a function before the
    exporter became this package; calling the package still exports."""

    def __call__(self, model, example_inputs, **kwargs):
        return self.export(model, example_inputs, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = sorted(_API)
