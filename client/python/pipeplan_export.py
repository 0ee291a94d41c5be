#!/usr/bin/env python3
"""Export a PyTorch nn.Module as a pipeplan graph (pipeplan.v1.ModelGraph JSON):
the command, and the exporter's API under its old module name. The exporter is
the package pipeplan.export (pipeplan/export/__init__.py says which module does
what; graph_export.py what each node's fields mean).

The module is traced with a torch.fx Tracer (PipeplanTracer) and the traced graph is
run once on fake tensors of the example inputs' shapes and dtypes
(torch._subclasses.FakeTensorMode: shapes only, no arithmetic, no activation memory),
so every node knows the shape and dtype of what it produces (`propagate`). A model
whose code needs tensor values (`.item()`, data-dependent shapes) is run for real on
the example inputs instead, with a warning. The model's parameters are never copied
or changed; a GPT-2-small-sized model with 8 x 1,024 tokens exports in seconds.

Tracing. Leaf modules become single `call_module` nodes: torch.fx's rule (torch.nn
modules except containers) plus nn.MultiheadAttention and the RNN family by default,
user classes (`--leaf-module pkg.mod.Class`) and qualified names (`--leaf-name a.b`).
nn.Transformer, nn.TransformerEncoder/Decoder and their layers are traced through
(their training path) unless `--transformer-layers-as-leaves`. Tuple unpacking of a
traced value (`a, _ = attn(x, x, x)`, `B, T, C = x.shape`) works on Python 3.11 too:
Proxy.__iter__ is patched during tracing to find the UNPACK_SEQUENCE by byte offset;
torch.arange & co. and tensor indexing accept traced sizes (`self.pos[:T]`).
When tracing fails, ExportError names the innermost module being traced and the
--leaf-module that would make it opaque. A leaf without a cost model here is run under
a flop counter (matmul, convolution, softmax flops).

Usage:
  /usr/bin/python3 client/python/pipeplan_export.py --model torchvision-free-example --out g.json
  /usr/bin/python3 client/python/pipeplan_export.py --model mlp --out mlp.json
  /usr/bin/python3 client/python/pipeplan_export.py --model mypkg.models:build --out g.json
      (`build` returns an nn.Module, or (module, example_inputs); a module or class
       needs --input-shape, e.g. --input-shape 8,1024 --input-dtype float32)
  ... --leaf-module mypkg.layers.FancyBlock --leaf-name encoder.layers.3
  ... --transformer-layers-as-leaves
  ... --package model.ptpkg [--loss cross_entropy|mse]
      (also writes the model package the torch executor trains:
       pipeplan/export/package.py, docs/model-package.md)

API (re-exported from pipeplan.export, for callers that import pipeplan_export):
  export(module, example_inputs, name="model", batch_size=None, leaf_modules=(),
         leaf_names=(), default_leaves=True, transformer_layers_as_leaves=False,
         package=None, loss=None, real_forward=False) -> dict
  propagate(gm, example_inputs, count=(), real_forward=False)   shapes onto gm's nodes
  parse_input_spec("input_ids:int64[8,1024]") -> (name, dtype, shape)
  trace(module, ...) -> torch.fx.GraphModule   (raises ExportError)
  write_graph(graph, path)
"""

import sys

from pipeplan.export.cli import main
from pipeplan.export.errors import ExportError
from pipeplan.export.examples import (BUILTINS, Block, CausalSelfAttention, ExampleMLP,
                                      ExampleTransformer, builtin)
from pipeplan.export.graph_export import ACT_NONE, WGF_NONE, export, write_graph
from pipeplan.export.inputs import example_tensor, inputs_from_specs, parse_input_spec
from pipeplan.export.leaf_costs import leaf_cost, mha_cost, rnn_cost, transformer_layer_cost
from pipeplan.export.op_tables import RNN_LEAVES, TRANSFORMER_LAYERS
from pipeplan.export.propagation import propagate
from pipeplan.export.tracer import DEFAULT_LEAF_MODULES, PipeplanTracer, resolve_class, trace
from pipeplan.export.tracer_patches import patched_proxy_iter

__all__ = [
    "ACT_NONE", "BUILTINS", "Block", "CausalSelfAttention", "DEFAULT_LEAF_MODULES",
    "ExampleMLP", "ExampleTransformer", "ExportError", "PipeplanTracer", "RNN_LEAVES",
    "TRANSFORMER_LAYERS", "WGF_NONE", "builtin", "example_tensor", "export",
    "inputs_from_specs", "leaf_cost", "main", "mha_cost", "parse_input_spec",
    "patched_proxy_iter", "propagate", "resolve_class", "rnn_cost", "trace",
    "transformer_layer_cost", "write_graph",
]

if __name__ == "__main__":
    sys.exit(main())
