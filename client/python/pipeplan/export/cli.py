"""The command line of the exporter (`pipeplan_export.py`): which model (a
built-in example or `package.module:attr`), its example inputs, the tracing
choices, and where the graph JSON and the model package go. Exit status 2 with
the reason on stderr when the model cannot be exported.
"""

import argparse
import importlib
import os
import sys

import torch
import torch.nn as nn

from pipeplan.export.errors import ExportError
from pipeplan.export.examples import BUILTINS, builtin
from pipeplan.export.graph_export import export, write_graph
from pipeplan.export.inputs import DTYPES, example_tensor, inputs_from_specs
from pipeplan.progress import Progress


def _load(spec):
    """Resolves `package.module:attr` to (module, example_inputs or None)."""
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit("--model must be a built-in (%s) or module:attr" % ", ".join(BUILTINS))
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(1, os.getcwd())  # the user's modules, as `python -m` finds them
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, nn.Module):
        obj = obj()
    if isinstance(obj, tuple):
        return obj
    if hasattr(obj, "example_inputs"):
        return obj, obj.example_inputs()
    return obj, None


def _inputs_from_args(args, module, inputs):
    """The example inputs the command line asks for: --input, else --input-shape with
    --input-dtype, else the model's own."""
    if args.input and args.input_shape:
        raise ValueError("give --input or --input-shape, not both")
    if args.input:
        return inputs_from_specs(module, args.input)
    if args.input_shape:
        dt = DTYPES[args.input_dtype]
        return tuple(example_tensor(tuple(int(v) for v in s.split(",")), dt)
                     for s in args.input_shape)
    if inputs is None:
        raise ValueError("%s: give --input (the module has no example_inputs())"
                         % args.model)
    return inputs


def _parser():
    parser = argparse.ArgumentParser(description="Export an nn.Module as a pipeplan graph.")
    parser.add_argument("--model", required=True,
                        help="built-in (%s) or package.module:attr" % ", ".join(BUILTINS))
    parser.add_argument("--out", required=True, help="output graph JSON")
    parser.add_argument("--name", help="graph name (default: the model argument)")
    parser.add_argument("--input", action="append", default=[],
                        metavar="NAME:DTYPE[SHAPE]",
                        help="an example input by its forward parameter's name, dtype and "
                             "shape, e.g. input_ids:int64[8,1024] or mask:bool[8,1024] "
                             "(repeatable; the name may be left out on all of them: "
                             "positional)")
    parser.add_argument("--input-shape", action="append", default=[],
                        help="comma-separated shape of a positional input (repeatable), "
                             "all of --input-dtype")
    parser.add_argument("--input-dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--batch-size", type=float,
                        help="samples the costs describe (default: first input's dim 0)")
    parser.add_argument("--leaf-module", action="append", default=[], metavar="PKG.MOD.CLASS",
                        help="keep modules of this class as single nodes (not traced "
                             "into); repeatable")
    parser.add_argument("--leaf-name", action="append", default=[], metavar="QUALNAME",
                        help="keep the module with this qualified name (e.g. "
                             "encoder.layers.3) as a single node; repeatable")
    parser.add_argument("--transformer-layers-as-leaves", action="store_true",
                        help="one node per nn.TransformerEncoderLayer/DecoderLayer "
                             "instead of its attention, linear and norm nodes")
    parser.add_argument("--package", metavar="DIR",
                        help="also write the model package (docs/model-package.md)")
    parser.add_argument("--loss", choices=("cross_entropy", "mse"),
                        help="the package's default loss (default: mse when the output "
                             "has the first input's shape, else cross_entropy)")
    parser.add_argument("--no-default-leaves", action="store_true",
                        help="do not add nn.MultiheadAttention and the RNN modules to "
                             "the leaves (torch.fx's own rule still applies)")
    parser.add_argument("--real-forward", action="store_true",
                        help="get shapes by running the model on the example inputs "
                             "(slow, memory of a real forward) instead of fake tensors")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="time every node on the example inputs in N passes over the "
                             "graph (median per node) and "
                             "write its measured forward/backward seconds and weight-"
                             "gradient share (0: off; run where and with the threads the "
                             "workers use)")
    parser.add_argument("--profile-device", metavar="DEVICE",
                        help="with --profile: time on this torch device (e.g. cuda:0; "
                             "default cpu, where the example inputs are)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress on stderr (by default each phase prints a line; "
                             "on a terminal one live line with nodes done and seconds)")
    return parser


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.profile_device and args.profile <= 0:
        parser.error("--profile-device needs --profile N (N >= 1)")
    torch.manual_seed(0)
    if args.model in BUILTINS:
        module, inputs = builtin(args.model)
    else:
        module, inputs = _load(args.model)
    try:
        inputs = _inputs_from_args(args, module, inputs)
        with Progress("pipeplan_export", enabled=not args.quiet) as progress:
            graph = export(module, inputs, name=args.name or args.model,
                           batch_size=args.batch_size, leaf_modules=args.leaf_module,
                           leaf_names=args.leaf_name,
                           default_leaves=not args.no_default_leaves,
                           transformer_layers_as_leaves=args.transformer_layers_as_leaves,
                           package=args.package, loss=args.loss,
                           real_forward=args.real_forward, progress=progress,
                           profile=args.profile, profile_device=args.profile_device)
    except (ExportError, ValueError) as e:  # package.PackageError is a ValueError
        print("pipeplan_export: %s" % e, file=sys.stderr)
        return 2
    write_graph(graph, args.out)
    flops = sum(n.get("forward_flops", 0) for n in graph["nodes"])
    print("%s: %d nodes, %d edges, %.4g forward flops" % (args.out, len(graph["nodes"]),
                                                         len(graph["edges"]), flops))
    return 0
