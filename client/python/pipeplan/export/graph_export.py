"""From a traced, shape-propagated model to the graph: one node per fx node
except `output` (placeholders and get_attr nodes are zero-flop nodes), one edge
per use of a node's value, in the protobuf JSON form of pipeplan.v1.ModelGraph
(docs/graph-format.md). Costs are per call on the example inputs, so
`batch_size` is the example batch (the first dimension of the first tensor
input unless given).

Per node:
  forward_flops     estimated for common ops (cost_model.py, leaf_costs.py); views,
                    indexing and shape ops cost 0; unknown functions cost 0 (their
                    `op` names what was seen).
  param_bytes       trainable parameters the node owns (all parameters of a called
                    module, or the parameter a get_attr node reads).
  param_key         the qualified name of the parameter as module.named_parameters()
                    first lists it (names joined with '+' for several), so nodes that
                    use the same tensors (tied weights, a module called twice) share
                    a key and the planner stores them once per stage.
  module            the qualified name of the module the node was traced in
                    (a leaf module's own name), for PlanOptions.cut_granularity.
  output_bytes      bytes of the node's output (summed over tuple outputs).
  activation_bytes  what autograd keeps alive for backward, charged once to the node
                    that produced the tensor (a Linear saves its input, so its
                    producer is charged), plus state the node saves itself (dropout
                    masks, norm statistics, max-pool indices). 1 byte means "nothing"
                    because the format reads 0 as output_bytes.
  weight_grad_fraction  1e-6 for parameter-free nodes (the format reads 0 as 0.5),
                    1.0 for embeddings, 0.2 for norms, default (0.5) otherwise.
  forward_seconds, backward_seconds  only with `profile`: measured (profile.py), and
                    the measured weight-gradient share replaces the fraction above.

Edges carry the bytes the consumer reads: one element of a tuple output when the
consumer is a getitem on it, 1 byte (nothing) into a shape query (`x.shape`,
`x.size()`), else the producer's whole output.
"""

import json
import operator

import torch
import torch.nn as nn

from pipeplan.export.cost_model import function_flops, module_flops, needs_counting
from pipeplan.export.op_tables import op_kind
from pipeplan.export.package import get_attr, write_package
from pipeplan.export.profile import profile_nodes
from pipeplan.export.propagation import propagate
from pipeplan.export.tensor_meta import node_meta, tensor_args, tensor_bytes
from pipeplan.export.tracer import trace
from pipeplan.progress import quiet

ACT_NONE = 1.0  # activation_bytes meaning "saves nothing" (0 would mean output_bytes)
WGF_NONE = 1e-6  # weight_grad_fraction meaning "no weight gradient" (0 would mean 0.5)


def export(module, example_inputs, name="model", batch_size=None, leaf_modules=(),
           leaf_names=(), default_leaves=True, transformer_layers_as_leaves=False,
           package=None, loss=None, real_forward=False, progress=None, profile=0,
           profile_device=None):
    """Traces `module` on `example_inputs` and returns the graph as a dict.

    `example_inputs` is a tuple (or a single tensor) of positional inputs. The dict is
    the protobuf JSON form of pipeplan.v1.ModelGraph (snake_case field names).
    `leaf_modules` (classes or "pkg.mod.Class" strings), `leaf_names` (qualified module
    names), `default_leaves` and `transformer_layers_as_leaves` choose the modules kept
    as single nodes (see PipeplanTracer). Raises ExportError when tracing fails.
    With `package` (a directory) it also writes the model package
    (package.write_package, docs/model-package.md) with default loss `loss`.
    Shapes come from fake tensors (see propagate); `real_forward` runs the model on
    the example inputs instead. Only the inputs' shapes and dtypes matter.
    `progress` (pipeplan.progress.Progress) reports each phase; default silent.
    `profile` (a count of timings per node, 0: off) measures each node's forward and
    backward seconds and weight-gradient share on the example inputs (profile.py), on
    `profile_device` ("cuda:0"; default: the inputs' device).
    """
    progress = progress or quiet()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    with progress.phase("tracing"):
        gm = trace(module, leaf_modules, leaf_names, default_leaves,
                   transformer_layers_as_leaves)
    count = {n.target for n in gm.graph.nodes
             if n.op == "call_module" and needs_counting(gm.get_submodule(n.target))}
    with progress.phase("shapes", total=len(gm.graph.nodes)) as phase:
        propagate(gm, example_inputs, count, real_forward, phase)
    if batch_size is None:
        batch_size = _example_batch(example_inputs)
    fx_nodes = [n for n in gm.graph.nodes if n.op != "output"]
    with progress.phase("costs", total=len(fx_nodes)) as phase:
        info, charged = _node_costs(gm, fx_nodes, _param_names(module), phase)
    if profile:
        with progress.phase("profile", total=(profile + 1) * len(gm.graph.nodes)) as phase:
            measured = profile_nodes(gm, example_inputs, profile, phase, profile_device)
        for node in fx_nodes:
            info[node]["measured"] = measured.get(node.name)
    nodes, edges = _nodes_and_edges(fx_nodes, info, charged)
    graph = {"name": name, "batch_size": float(batch_size), "nodes": nodes, "edges": edges}
    # Bytes per element of the model's floating-point parameters: the memory
    # model scales the byte counts to the training precision from there.
    element = next((p.element_size() for p in module.parameters() if p.is_floating_point()), 4)
    if element != 4:
        graph["element_bytes"] = element
    if package is not None:
        with progress.phase("package (reload check, parameters)"):
            write_package(gm, graph, example_inputs, package, loss)
    return graph


def _example_batch(example_inputs):
    """The first dimension of the first tensor input with one, else 0."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            return int(x.shape[0])
    return 0


def _param_names(module):
    """id(parameter) -> canonical qualified name (first one named_parameters lists)."""
    return {id(p): name for name, p in module.named_parameters()}


def _node_costs(gm, fx_nodes, canonical, phase):
    """({node: kind, flops, extra saved bytes, param_bytes, param_key}, the set of
    nodes whose output some consumer keeps for backward)."""
    modules = dict(gm.named_modules())
    info = {}
    charged = set()
    for node in fx_nodes:
        kind = op_kind(node, modules)
        flops, extra, saves, params = _node_cost(gm, modules, node, kind)
        # Parameters as seen through the traced module map to the original's names.
        seen = set()
        uniq = []
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                uniq.append(p)
        param_bytes = float(sum(p.numel() * p.element_size() for p in uniq))
        names = sorted(canonical.get(id(p), "%s.<param%d>" % (node.target, i))
                       for i, p in enumerate(uniq))
        _charge_saved(node, saves, charged)
        info[node] = dict(kind=kind, flops=flops, extra=extra, param_bytes=param_bytes,
                          param_key="+".join(names))
        phase.advance()
    return info, charged


def _node_cost(gm, modules, node, kind):
    """(forward_flops, extra saved bytes, saves, trainable parameters it owns)."""
    if node.op == "call_module":
        mod = modules[node.target]
        flops, extra, saves = module_flops(node, mod, kind)
        return flops, extra, saves, [p for p in mod.parameters() if p.requires_grad]
    if node.op in ("call_function", "call_method"):
        flops, extra, saves = function_flops(node, kind)
        return flops, extra, saves, []
    params = []  # placeholder, get_attr
    if node.op == "get_attr":
        obj = get_attr(gm, node.target)
        if isinstance(obj, nn.Parameter) and obj.requires_grad:
            params = [obj]
    return 0.0, 0.0, "none", params


def _charge_saved(node, saves, charged):
    """Adds to `charged` the nodes whose output `node` keeps for backward."""
    if saves == "out":
        charged.add(node)
        return
    kept = tensor_args(node) if saves == "in" else (saves if saves != "none" else [])
    for a in kept:
        if a.op != "get_attr":  # parameters are counted as param_bytes
            charged.add(a)


def _nodes_and_edges(fx_nodes, info, charged):
    """The graph's node and edge entries, in fx order."""
    nodes = []
    edges = []
    for node in fx_nodes:
        nodes.append(_node_entry(node, info[node], node in charged))
        for src in node.all_input_nodes:
            if src.op == "output":
                continue
            edges.append({"src": src.name, "dst": node.name,
                          "bytes": _edge_bytes(src, node)})
    return nodes, edges


def _node_entry(node, d, charged):
    """One node of the graph: fields left out where the format's default says it."""
    out_bytes = tensor_bytes(node)
    act = d["extra"] + (out_bytes if charged else 0.0)
    entry = {"id": node.name, "op": d["kind"]}
    if node.meta.get("pipeplan_module"):
        entry["module"] = node.meta["pipeplan_module"]
    if d["flops"]:
        entry["forward_flops"] = float(d["flops"])
    if d["param_bytes"]:
        entry["param_bytes"] = d["param_bytes"]
        entry["param_key"] = d["param_key"]
    entry["activation_bytes"] = act if act > 0 else ACT_NONE
    if out_bytes:
        entry["output_bytes"] = out_bytes
    if d["flops"]:
        if not d["param_bytes"]:
            entry["weight_grad_fraction"] = WGF_NONE
        elif d["kind"] in ("embedding", "embedding_bag"):
            entry["weight_grad_fraction"] = 1.0
        elif "norm" in d["kind"]:
            entry["weight_grad_fraction"] = 0.2
    if d.get("measured"):
        _add_measured(entry, *d["measured"])
    return entry


def _add_measured(entry, forward, backward, weight_share):
    """A profiled node's times replace its flop-derived ones (docs/graph-format.md)."""
    entry["forward_seconds"] = forward
    entry["backward_seconds"] = backward
    if weight_share is not None:
        entry["weight_grad_fraction"] = min(1.0, max(WGF_NONE, weight_share))
    elif backward > 0:
        entry["weight_grad_fraction"] = WGF_NONE


_SHAPE_QUERIES = {"shape", "size", "dim", "dtype", "device", "ndim", "numel"}


def _edge_bytes(src, dst):
    """Bytes of src's output that dst reads: one element when dst picks an element of a
    tuple output (`out, _ = attn(...)`, `lstm(x)[1][0]`), nothing (1 byte; 0 would
    mean src's output_bytes) when dst only asks for its shape (`x.shape`, `x.size(1)`),
    else the whole output."""
    if dst.args and dst.args[0] is src and (
            (dst.op == "call_method" and dst.target in _SHAPE_QUERIES)
            or (dst.op == "call_function" and dst.target is getattr and len(dst.args) > 1
                and dst.args[1] in _SHAPE_QUERIES)):
        return ACT_NONE
    if (dst.op == "call_function" and dst.target is operator.getitem
            and dst.args and dst.args[0] is src
            and isinstance(node_meta(src), (tuple, list, dict))):
        return tensor_bytes(dst)
    return tensor_bytes(src)


def write_graph(graph, path):
    """Writes compact JSON, one node / edge per line."""
    with open(path, "w") as f:
        f.write("{\n")
        f.write(' "name":%s,\n "batch_size":%s,\n' % (json.dumps(graph["name"]),
                                                       json.dumps(graph["batch_size"])))
        for key in ("nodes", "edges"):
            items = graph[key]
            f.write(' "%s":[\n' % key)
            for i, item in enumerate(items):
                f.write("  " + json.dumps(item, separators=(",", ":"))
                        + (",\n" if i + 1 < len(items) else "\n"))
            f.write(" ]" + (",\n" if key == "nodes" else "\n"))
        f.write("}\n")
