#!/usr/bin/env python3
"""Export a PyTorch nn.Module as a pipeplan graph (pipeplan.v1.ModelGraph JSON).

The module is traced with torch.fx.symbolic_trace and run once on the example
inputs under torch.fx.passes.shape_prop.ShapeProp, so every node knows the shape
and dtype of what it produces. Each fx node except `output` becomes one graph node
(placeholders and get_attr nodes are zero-flop nodes); each use of a node's value
becomes an edge carrying that tensor's bytes. Costs are per call on the example
inputs, so `batch_size` is the example batch (the first dimension of the first
tensor input unless given).

Per node:
  forward_flops     estimated for common ops: linear, conv, matmul/bmm, embedding,
                    norms, softmax, pooling, elementwise ops, losses,
                    nn.MultiheadAttention; views, indexing and shape ops cost 0;
                    unknown ops cost 0 (their `op` names what was seen).
  param_bytes       trainable parameters the node owns (all parameters of a called
                    module, or the parameter a get_attr node reads).
  param_key         the qualified name of the parameter as module.named_parameters()
                    first lists it (names joined with '+' for several), so nodes that
                    use the same tensors (tied weights, a module called twice) share
                    a key and the planner stores them once per stage.
  output_bytes      bytes of the node's output (summed over tuple outputs).
  activation_bytes  what autograd keeps alive for backward, charged once to the node
                    that produced the tensor (a Linear saves its input, so its
                    producer is charged), plus state the node saves itself (dropout
                    masks, norm statistics, max-pool indices). 1 byte means "nothing"
                    because the format reads 0 as output_bytes.
  weight_grad_fraction  1e-6 for parameter-free nodes (the format reads 0 as 0.5),
                    1.0 for embeddings, 0.2 for norms, default (0.5) otherwise.

Usage:
  /usr/bin/python3 client/python/pipeplan_export.py --model torchvision-free-example --out g.json
  /usr/bin/python3 client/python/pipeplan_export.py --model mlp --out mlp.json
  /usr/bin/python3 client/python/pipeplan_export.py --model mypkg.models:build --out g.json
      (`build` returns an nn.Module, or (module, example_inputs); a module or class
       needs --input-shape, e.g. --input-shape 8,1024 --input-dtype float32)

API:
  export(module, example_inputs, name="model", batch_size=None) -> dict
  write_graph(graph, path)
"""

import argparse
import importlib
import json
import math
import operator
import re
import sys

import torch
import torch.fx
import torch.nn as nn
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

ACT_NONE = 1.0  # activation_bytes meaning "saves nothing" (0 would mean output_bytes)
WGF_NONE = 1e-6  # weight_grad_fraction meaning "no weight gradient" (0 would mean 0.5)

# ---------------------------------------------------------------------------
# Op tables. Names are fx call_function __name__s / call_method names.
# ---------------------------------------------------------------------------

# Zero-flop ops: views, indexing, shape queries, copies, constructors.
ZERO_FLOP = {
    "view", "reshape", "transpose", "permute", "flatten", "unflatten", "getitem", "getattr",
    "size", "dim", "contiguous", "unsqueeze", "squeeze", "expand", "expand_as", "split",
    "chunk", "narrow", "t", "select", "unbind", "type_as", "to", "float", "half", "bfloat16",
    "double", "int", "long", "bool", "detach", "clone", "cat", "stack", "arange", "zeros",
    "ones", "full", "zeros_like", "ones_like", "empty", "tensor", "repeat", "roll", "flip",
    "tril", "triu", "index_select", "gather", "masked_select", "numel", "identity",
    "flatten_module", "unfold", "pad", "movedim", "swapaxes",
}
# Elementwise ops: flops per output element.
ELEMENTWISE = {
    "add": 1, "sub": 1, "mul": 1, "truediv": 1, "div": 1, "floordiv": 1, "neg": 1, "rsub": 1,
    "iadd": 1, "isub": 1, "imul": 1, "itruediv": 1, "add_": 1, "mul_": 1, "div_": 1,
    "relu": 1, "relu_": 1, "relu6": 2, "leaky_relu": 2, "threshold": 1, "hardtanh": 2,
    "gelu": 8, "silu": 4, "sigmoid": 4, "tanh": 4, "elu": 4, "softplus": 4, "mish": 8,
    "hardswish": 4, "hardsigmoid": 3, "exp": 1, "log": 1, "pow": 1, "sqrt": 1, "rsqrt": 1,
    "abs": 1, "clamp": 1, "clip": 1, "masked_fill": 1, "masked_fill_": 1, "where": 1,
    "dropout": 1, "dropout1d": 1, "dropout2d": 1, "dropout3d": 1, "eq": 1, "ne": 1, "lt": 1,
    "le": 1, "gt": 1, "ge": 1, "logical_not": 1, "sin": 1, "cos": 1, "square": 1,
    "reciprocal": 1, "erf": 4, "scaled_dot_product_attention": 0,
}
# Reductions: flops per input element.
REDUCTIONS = {"sum": 1, "mean": 1, "amax": 1, "max": 1, "min": 1, "var": 3, "std": 3,
              "norm": 2, "logsumexp": 3}
NORMS = {"layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm",
         "local_response_norm", "normalize"}
SOFTMAX = {"softmax", "log_softmax", "softmin"}
MATMUL = {"matmul", "bmm", "mm", "baddbmm", "addmm", "addbmm", "linear", "einsum"}
LOSSES = {"cross_entropy": 5, "nll_loss": 1, "mse_loss": 3, "l1_loss": 3,
          "binary_cross_entropy": 5, "binary_cross_entropy_with_logits": 6,
          "smooth_l1_loss": 4, "kl_div": 4}
# What autograd saves: "out" (the op's result), "in" (its tensor inputs), or nothing.
SAVES_OUTPUT = SOFTMAX | {"relu", "relu_", "sigmoid", "tanh", "exp", "sqrt", "rsqrt", "elu"}
SAVES_NOTHING = ZERO_FLOP | {"add", "sub", "neg", "iadd", "isub", "add_", "rsub",
                             "dropout", "dropout1d", "dropout2d", "dropout3d", "eq", "ne",
                             "lt", "le", "gt", "ge", "logical_not", "avg_pool1d",
                             "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
                             "adaptive_avg_pool2d", "adaptive_avg_pool3d", "placeholder",
                             "get_attr"}


_MODULE_KINDS = {"ReLU": "relu", "ReLU6": "relu6", "LeakyReLU": "leaky_relu", "PReLU": "prelu",
                 "GELU": "gelu", "SiLU": "silu", "ELU": "elu", "SELU": "selu",
                 "GLU": "glu", "Mish": "mish", "Hardswish": "hardswish"}


def _snake(name):
    if name in _MODULE_KINDS:
        return _MODULE_KINDS[name]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _leaves(meta):
    """TensorMetadata leaves of a (possibly nested) tensor_meta value."""
    if isinstance(meta, TensorMetadata):
        return [meta]
    if isinstance(meta, (list, tuple)):
        out = []
        for m in meta:
            out.extend(_leaves(m))
        return out
    if isinstance(meta, dict):
        out = []
        for m in meta.values():
            out.extend(_leaves(m))
        return out
    return []


_ELEMENT_SIZE = {}


def _element_size(dtype):
    if dtype not in _ELEMENT_SIZE:
        _ELEMENT_SIZE[dtype] = torch.empty((), dtype=dtype).element_size()
    return _ELEMENT_SIZE[dtype]


def _numel(shape):
    return int(math.prod(shape)) if len(shape) else 1


def _meta(node):
    return node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None


def _tensor_numel(node):
    return sum(_numel(m.shape) for m in _leaves(_meta(node)))


def _tensor_bytes(node):
    return float(sum(_numel(m.shape) * _element_size(m.dtype) for m in _leaves(_meta(node))))


def _first_shape(node):
    leaves = _leaves(_meta(node))
    return tuple(leaves[0].shape) if leaves else None


def _tensor_args(node):
    """Input fx nodes that carry tensors, in argument order."""
    return [a for a in node.all_input_nodes if _leaves(_meta(a))]


def _kind(node, modules):
    """A snake_case op name for the node."""
    if node.op in ("placeholder", "get_attr"):
        return node.op
    if node.op == "call_module":
        return _snake(type(modules[node.target]).__name__)
    if node.op == "call_method":
        return str(node.target)
    name = getattr(node.target, "__name__", str(node.target))
    return name


def _matmul_flops(node):
    """2*M*K*N summed over the batch: 2 * numel(out) * K."""
    args = _tensor_args(node)
    out = _tensor_numel(node)
    name = _kind(node, {})
    if name in ("addmm", "baddbmm", "addbmm") and len(args) >= 3:
        a = _first_shape(args[1])
    elif name == "linear":
        a = _first_shape(args[0]) if args else None
    elif name == "einsum":
        return 0.0  # not estimated
    else:
        a = _first_shape(args[0]) if args else None
    if not a:
        return 0.0
    return 2.0 * out * a[-1]


def _module_flops(node, mod, kind):
    """Returns (forward_flops, extra_saved_bytes, saves) for a call_module node."""
    out = _tensor_numel(node)
    args = _tensor_args(node)
    in_shape = _first_shape(args[0]) if args else None
    in_numel = _tensor_numel(args[0]) if args else 0
    if isinstance(mod, nn.Linear):
        return 2.0 * out * mod.in_features, 0.0, "in"
    if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        k = _numel(mod.kernel_size)
        return 2.0 * out * (mod.in_channels // mod.groups) * k, 0.0, "in"
    if isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        k = _numel(mod.kernel_size)
        return 2.0 * in_numel * (mod.out_channels // mod.groups) * k, 0.0, "in"
    if isinstance(mod, nn.Embedding):
        return float(out), 0.0, "in"
    if isinstance(mod, nn.EmbeddingBag):
        return float(out), 0.0, "in"
    if isinstance(mod, nn.MultiheadAttention) and in_shape and len(in_shape) == 3:
        e = mod.embed_dim
        n, l = (in_shape[0], in_shape[1]) if mod.batch_first else (in_shape[1], in_shape[0])
        kshape = _first_shape(args[1]) if len(args) > 1 else in_shape
        s = kshape[1] if mod.batch_first else kshape[0]
        flops = (2.0 * n * l * e * e + 2.0 * 2 * n * s * e * e  # q, k, v projections
                 + 2.0 * 2 * n * l * s * e  # scores and attention @ v
                 + 5.0 * n * mod.num_heads * l * s  # softmax
                 + 2.0 * n * l * e * e)  # output projection
        extra = n * mod.num_heads * l * s * _element_size(torch.float32) * 2 + 4.0 * n * l * e * 4
        return flops, extra, "in"
    if isinstance(mod, (nn.LayerNorm, nn.GroupNorm)) or "norm" in kind:
        rows = in_numel / max(1, _numel(getattr(mod, "normalized_shape", (1,))))
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            rows = mod.num_features
        return 5.0 * out, 2.0 * rows * 4, "in"
    if isinstance(mod, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d,
                        nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)):
        return float(in_numel), out * 8.0, "in"
    if isinstance(mod, (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool1d,
                        nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)):
        return float(in_numel), 0.0, "none"
    if isinstance(mod, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)):
        return float(out), float(out) if mod.training and mod.p > 0 else 0.0, "none"
    if isinstance(mod, (nn.Flatten, nn.Unflatten, nn.Identity)):
        return 0.0, 0.0, "none"
    if isinstance(mod, (nn.Softmax, nn.LogSoftmax, nn.Softmin)):
        return 5.0 * out, 0.0, "out"
    if isinstance(mod, (nn.ReLU, nn.Sigmoid, nn.Tanh, nn.ELU)):
        return ELEMENTWISE.get(kind, 1) * float(out), 0.0, "out"
    if isinstance(mod, nn.modules.loss._Loss):
        base = kind.replace("_loss", "")
        per = {"cross_entropy": 5, "mse": 3, "l1": 3, "nll": 1, "bce": 5,
               "bce_with_logits": 6}.get(base, 3)
        saved = _tensor_bytes(args[0]) if base == "cross_entropy" and args else 0.0
        return per * float(in_numel), saved, "in"
    if kind in ELEMENTWISE:
        return ELEMENTWISE[kind] * float(out), 0.0, "in"
    return 0.0, 0.0, "in"


def _function_flops(node, kind):
    """Returns (forward_flops, extra_saved_bytes, saves) for call_function/call_method."""
    out = _tensor_numel(node)
    args = _tensor_args(node)
    in_numel = _tensor_numel(args[0]) if args else 0
    if kind in MATMUL or kind == "matmul":
        return _matmul_flops(node), 0.0, "in"
    if kind in ("conv1d", "conv2d", "conv3d") and len(args) >= 2:
        w = _first_shape(args[1])
        return 2.0 * out * _numel(w[1:]), 0.0, "in"
    if kind == "embedding":
        return float(out), 0.0, "in"
    if kind in NORMS:
        return 5.0 * out, 0.0, "in"
    if kind in SOFTMAX:
        return 5.0 * out, 0.0, "out"
    if kind in LOSSES:
        saved = _tensor_bytes(args[0]) if kind == "cross_entropy" and args else 0.0
        return LOSSES[kind] * float(in_numel), saved, "in"
    if kind in REDUCTIONS:
        return REDUCTIONS[kind] * float(in_numel), 0.0, "none"
    if kind.startswith("max_pool") or kind.startswith("adaptive_max_pool"):
        return float(in_numel), out * 8.0, "in"
    if "avg_pool" in kind:
        return float(in_numel), 0.0, "none"
    if kind.startswith("dropout"):
        return float(out), float(out), "none"
    if kind in ZERO_FLOP:
        return 0.0, 0.0, "none"
    if kind in ELEMENTWISE:
        if kind in SAVES_OUTPUT:
            saves = "out"
        elif kind in SAVES_NOTHING:
            saves = "none"
        elif kind in ("mul", "imul", "mul_", "truediv", "div", "itruediv", "div_"):
            # Scaling by a Python number keeps nothing; a tensor product keeps both.
            saves = "in" if len(args) >= 2 else "none"
        elif kind in ("masked_fill", "masked_fill_", "where"):
            mask = node.args[1] if kind != "where" else node.args[0]
            saves = [mask] if isinstance(mask, torch.fx.Node) else "none"
        else:
            saves = "in"
        return ELEMENTWISE[kind] * float(out), 0.0, saves
    return 0.0, 0.0, "in"  # unknown: assume it saves its inputs


def _param_names(module):
    """id(parameter) -> canonical qualified name (first one named_parameters lists)."""
    return {id(p): name for name, p in module.named_parameters()}


def _get_attr(module, target):
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def export(module, example_inputs, name="model", batch_size=None):
    """Traces `module` on `example_inputs` and returns the graph as a dict.

    `example_inputs` is a tuple (or a single tensor) of positional inputs. The dict is
    the protobuf JSON form of pipeplan.v1.ModelGraph (snake_case field names).
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    gm = torch.fx.symbolic_trace(module)
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
    modules = dict(gm.named_modules())
    canonical = _param_names(module)

    if batch_size is None:
        batch_size = 0
        for x in example_inputs:
            if isinstance(x, torch.Tensor) and x.dim() > 0:
                batch_size = int(x.shape[0])
                break

    fx_nodes = [n for n in gm.graph.nodes if n.op != "output"]
    info = {}
    charged = set()  # nodes whose output some consumer keeps for backward
    for node in fx_nodes:
        kind = _kind(node, modules)
        params = []
        if node.op == "call_module":
            mod = modules[node.target]
            flops, extra, saves = _module_flops(node, mod, kind)
            params = [p for p in mod.parameters() if p.requires_grad]
        elif node.op in ("call_function", "call_method"):
            flops, extra, saves = _function_flops(node, kind)
        else:  # placeholder, get_attr
            flops, extra, saves = 0.0, 0.0, "none"
            if node.op == "get_attr":
                obj = _get_attr(gm, node.target)
                if isinstance(obj, nn.Parameter) and obj.requires_grad:
                    params = [obj]
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
        if saves == "out":
            charged.add(node)
        else:
            kept = _tensor_args(node) if saves == "in" else (saves if saves != "none" else [])
            for a in kept:
                if a.op != "get_attr":  # parameters are counted as param_bytes
                    charged.add(a)
        info[node] = dict(kind=kind, flops=flops, extra=extra, param_bytes=param_bytes,
                          param_key="+".join(names))

    nodes = []
    edges = []
    for node in fx_nodes:
        d = info[node]
        out_bytes = _tensor_bytes(node)
        act = d["extra"] + (out_bytes if node in charged else 0.0)
        entry = {"id": node.name, "op": d["kind"]}
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
        nodes.append(entry)
        for src in node.all_input_nodes:
            if src.op == "output":
                continue
            edges.append({"src": src.name, "dst": node.name, "bytes": _tensor_bytes(src)})
    return {"name": name, "batch_size": float(batch_size), "nodes": nodes, "edges": edges}


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


# ---------------------------------------------------------------------------
# Built-in example models (no torchvision needed)
# ---------------------------------------------------------------------------

class ExampleMLP(nn.Module):
    """Linear(1024, 4096) -> GELU -> Dropout -> Linear(4096, 1024) -> LayerNorm."""

    def __init__(self, d=1024, hidden=4096):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(self.drop(self.act(self.fc1(x)))))

    @staticmethod
    def example_inputs(batch=8, d=1024):
        return (torch.randn(batch, d),)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.d = d
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.size(0), x.size(1), self.d
        hd = self.d // self.heads
        q = self.q_proj(x).view(b, t, self.heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias == 0, float("-inf"))  # t == seq
        att = torch.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq)
        self.ln_2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.dropout(self.fc2(self.gelu(self.fc1(self.ln_2(x)))))


class ExampleTransformer(nn.Module):
    """A small GPT: token + position embeddings, transformer blocks, LM head tied to wte."""

    def __init__(self, vocab=1000, d=128, heads=4, layers=2, seq=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([Block(d, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.seq = seq
        self.vocab = vocab
        self.register_buffer("pos", torch.arange(seq), persistent=False)

    def forward(self, idx):
        # Inputs are full-length sequences: symbolic tracing cannot slice a buffer by a
        # traced length (nor call torch.arange on one) in this torch version.
        pos = self.pos
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def example_inputs(self, batch=4):
        return (torch.randint(0, self.vocab, (batch, self.seq)),)


def builtin(name):
    """(module, example_inputs) of a built-in example."""
    torch.manual_seed(0)
    if name == "mlp":
        return ExampleMLP(), ExampleMLP.example_inputs()
    if name in ("transformer", "torchvision-free-example"):
        m = ExampleTransformer()
        return m, m.example_inputs()
    raise KeyError(name)


BUILTINS = ("torchvision-free-example", "transformer", "mlp")

_DTYPES = {"float32": torch.float32, "float": torch.float32, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int64": torch.int64, "long": torch.int64,
           "int32": torch.int32}


def _load(spec, shapes, dtype):
    """Resolves `package.module:attr` to (module, example_inputs)."""
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit("--model must be a built-in (%s) or module:attr" % ", ".join(BUILTINS))
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, nn.Module):
        obj = obj()
    if isinstance(obj, tuple):
        module, inputs = obj
        return module, inputs
    module = obj
    if shapes:
        dt = _DTYPES[dtype]
        inputs = []
        for s in shapes:
            shape = tuple(int(v) for v in s.split(","))
            if dt.is_floating_point:
                inputs.append(torch.randn(shape, dtype=dt))
            else:
                inputs.append(torch.zeros(shape, dtype=dt))
        return module, tuple(inputs)
    if hasattr(module, "example_inputs"):
        return module, module.example_inputs()
    raise SystemExit("%s: give --input-shape (the module has no example_inputs())" % spec)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Export an nn.Module as a pipeplan graph.")
    parser.add_argument("--model", required=True,
                        help="built-in (%s) or package.module:attr" % ", ".join(BUILTINS))
    parser.add_argument("--out", required=True, help="output graph JSON")
    parser.add_argument("--name", help="graph name (default: the model argument)")
    parser.add_argument("--input-shape", action="append", default=[],
                        help="comma-separated shape of a positional input (repeatable)")
    parser.add_argument("--input-dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--batch-size", type=float,
                        help="samples the costs describe (default: first input's dim 0)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    if args.model in BUILTINS:
        module, inputs = builtin(args.model)
    else:
        module, inputs = _load(args.model, args.input_shape, args.input_dtype)
    graph = export(module, inputs, name=args.name or args.model, batch_size=args.batch_size)
    write_graph(graph, args.out)
    flops = sum(n.get("forward_flops", 0) for n in graph["nodes"])
    print("%s: %d nodes, %d edges, %.4g forward flops" % (args.out, len(graph["nodes"]),
                                                         len(graph["edges"]), flops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
