#!/usr/bin/env python3
"""Export a PyTorch nn.Module as a pipeplan graph (pipeplan.v1.ModelGraph JSON).

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

Each fx node except `output` becomes one graph node (placeholders and get_attr nodes
are zero-flop nodes); each use of a node's value becomes an edge carrying that
tensor's bytes. Costs are per call on the example inputs, so `batch_size` is the
example batch (the first dimension of the first tensor input unless given).

Per node:
  forward_flops     estimated for common ops: linear, conv, matmul/bmm, embedding,
                    norms, softmax, pooling, elementwise ops, losses,
                    nn.MultiheadAttention, nn.LSTM/GRU/RNN (and cells), transformer
                    layers kept as leaves, other leaves by counting; views, indexing
                    and shape ops cost 0; unknown functions cost 0 (their `op` names
                    what was seen).
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

Usage:
  /usr/bin/python3 client/python/pipeplan_export.py --model torchvision-free-example --out g.json
  /usr/bin/python3 client/python/pipeplan_export.py --model mlp --out mlp.json
  /usr/bin/python3 client/python/pipeplan_export.py --model mypkg.models:build --out g.json
      (`build` returns an nn.Module, or (module, example_inputs); a module or class
       needs --input-shape, e.g. --input-shape 8,1024 --input-dtype float32)
  ... --leaf-module mypkg.layers.FancyBlock --leaf-name encoder.layers.3
  ... --transformer-layers-as-leaves
  ... --package model.ptpkg [--loss cross_entropy|mse]
      (also writes the model package the torch executor trains: pipeplan_package.py,
       docs/model-package.md)

Edges carry the bytes the consumer reads: one element of a tuple output when the
consumer is a getitem on it, 1 byte (nothing) into a shape query (`x.shape`,
`x.size()`), else the producer's whole output.

API:
  export(module, example_inputs, name="model", batch_size=None, leaf_modules=(),
         leaf_names=(), default_leaves=True, transformer_layers_as_leaves=False,
         package=None, loss=None, real_forward=False) -> dict
  propagate(gm, example_inputs, count=(), real_forward=False)   shapes onto gm's nodes
  parse_input_spec("input_ids:int64[8,1024]") -> (name, dtype, shape)
  trace(module, ...) -> torch.fx.GraphModule   (raises ExportError)
  write_graph(graph, path)
"""

import argparse
import contextlib
import dis
import importlib
import inspect
import json
import math
import operator
import os
import re
import sys
import warnings

import torch
import torch.fx
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.node import map_aggregate
from torch.fx.passes.shape_prop import TensorMetadata, _extract_tensor_metadata
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

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
    cost = leaf_cost(node, mod)
    if cost is not None:
        return cost
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
    # Any other module: the matmul / conv / softmax flops counted while running it.
    return float(node.meta.get("pipeplan_counted_flops", 0.0)), 0.0, "in"


# Modules whose cost _module_flops states without running them.
_STATIC_COST = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d,
                nn.ConvTranspose2d, nn.ConvTranspose3d, nn.Embedding, nn.EmbeddingBag,
                nn.MultiheadAttention, nn.LayerNorm, nn.GroupNorm,
                nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm,
                nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d,
                nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d, nn.AvgPool1d, nn.AvgPool2d,
                nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d,
                nn.AdaptiveAvgPool3d, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                nn.Flatten, nn.Unflatten, nn.Identity, nn.Softmax, nn.LogSoftmax,
                nn.Softmin, nn.ReLU, nn.Sigmoid, nn.Tanh, nn.ELU, nn.modules.loss._Loss,
                nn.LSTM, nn.GRU, nn.RNN, nn.LSTMCell, nn.GRUCell, nn.RNNCell,
                nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


def _needs_counting(mod):
    return not (isinstance(mod, _STATIC_COST) or _snake(type(mod).__name__) in ELEMENTWISE
                or "norm" in _snake(type(mod).__name__))


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


# ---------------------------------------------------------------------------
# Tracing: a torch.fx Tracer with configurable leaf modules, traceable stand-ins for
# torch.nn's transformer containers, and Proxy unpacking that works on Python 3.11.
# ---------------------------------------------------------------------------

class ExportError(RuntimeError):
    """Tracing or shape propagation failed; the message says where and what to try."""


def _proxy_iter(self):
    """Proxy.__iter__ that finds the calling instruction by byte offset.

    torch 1.13 indexes dis.get_instructions() with f_lasti // 2, which assumes one
    two-byte code unit per instruction; Python 3.11's inline caches break that, so
    `a, b = proxy` raises IndexError or TraceError. f_lasti is the byte offset of the
    executing instruction on every supported Python, so match on Instruction.offset.
    """
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    try:
        if caller is not None:
            lasti = caller.f_lasti
            for inst in dis.get_instructions(caller.f_code):
                if inst.offset == lasti:
                    if inst.opname == "UNPACK_SEQUENCE":
                        return (self[i] for i in range(inst.argval))
                    break
    finally:
        del frame, caller
    return self.tracer.iter(self)


def _find_proxy(value):
    """The first fx Proxy inside value (nested tuples, lists, dicts, slices), or None."""
    if isinstance(value, torch.fx.Proxy):
        return value
    if isinstance(value, slice):
        value = (value.start, value.stop, value.step)
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (tuple, list)):
        for v in value:
            found = _find_proxy(v)
            if found is not None:
                return found
    return None


# torch factory functions that models call with traced sizes (`torch.arange(T)`,
# `torch.ones(T, T)`); torch 1.13 rejects a Proxy there, so during tracing a call
# with a Proxy argument is recorded as a call_function node of the original function.
_FACTORIES = ("arange", "zeros", "ones", "full", "empty", "rand", "randn", "randint",
              "eye", "linspace", "tril_indices", "triu_indices")


def _recording(fn):
    def wrapper(*args, **kwargs):
        proxy = _find_proxy((args, kwargs))
        if proxy is None:
            return fn(*args, **kwargs)
        return proxy.tracer.create_proxy("call_function", fn, args, kwargs)
    wrapper.__name__ = fn.__name__
    wrapper.__wrapped__ = fn
    return wrapper


def _recording_getitem(orig):
    def getitem(self, index):
        proxy = _find_proxy(index)
        if proxy is None or isinstance(self, torch.fx.Proxy):
            return orig(self, index)
        # a real tensor (a buffer: `self.pos[:T]`) indexed by a traced value
        return proxy.tracer.create_proxy("call_function", operator.getitem, (self, index), {})
    return getitem


@contextlib.contextmanager
def patched_proxy_iter():
    """Within the block, tuple-unpacking an fx Proxy (`a, _ = attn(x, x, x)`,
    `B, T, C = x.shape`) yields one getitem per target on any Python version, torch
    factory functions accept traced sizes (`torch.arange(T, device=x.device)`) and a
    tensor can be indexed by traced values (`self.pos[:T]`)."""
    proxy_cls = torch.fx.proxy.Proxy
    saved_iter = proxy_cls.__dict__.get("__iter__")
    saved_factories = {name: getattr(torch, name) for name in _FACTORIES
                       if hasattr(torch, name)}
    had_getitem = "__getitem__" in torch.Tensor.__dict__
    saved_getitem = torch.Tensor.__getitem__
    proxy_cls.__iter__ = _proxy_iter
    for name, fn in saved_factories.items():
        setattr(torch, name, _recording(fn))
    torch.Tensor.__getitem__ = _recording_getitem(saved_getitem)
    try:
        yield
    finally:
        if had_getitem:
            torch.Tensor.__getitem__ = saved_getitem
        else:
            del torch.Tensor.__getitem__
        for name, fn in saved_factories.items():
            setattr(torch, name, fn)
        if saved_iter is None:
            del proxy_cls.__iter__
        else:
            proxy_cls.__iter__ = saved_iter


RNN_LEAVES = (nn.LSTM, nn.GRU, nn.RNN, nn.LSTMCell, nn.GRUCell, nn.RNNCell)
TRANSFORMER_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
# Always leaves (their forward is not symbolically traceable, and the exporter has a
# cost model for them), whatever the tracer's defaults.
DEFAULT_LEAF_MODULES = (nn.MultiheadAttention,) + RNN_LEAVES


# Traceable stand-ins for forwards that branch on tensor properties (fast-path checks)
# in torch.nn; they compute the training (slow) path with the module's own blocks.
def _encoder_layer_forward(m, src, src_mask=None, src_key_padding_mask=None):
    x = src
    if m.norm_first:
        x = x + m._sa_block(m.norm1(x), src_mask, src_key_padding_mask)
        x = x + m._ff_block(m.norm2(x))
    else:
        x = m.norm1(x + m._sa_block(x, src_mask, src_key_padding_mask))
        x = m.norm2(x + m._ff_block(x))
    return x


def _encoder_forward(m, src, mask=None, src_key_padding_mask=None):
    out = src
    for layer in m.layers:
        out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
    return m.norm(out) if m.norm is not None else out


def _decoder_forward(m, tgt, memory, tgt_mask=None, memory_mask=None,
                     tgt_key_padding_mask=None, memory_key_padding_mask=None):
    out = tgt
    for layer in m.layers:
        out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                    tgt_key_padding_mask=tgt_key_padding_mask,
                    memory_key_padding_mask=memory_key_padding_mask)
    return m.norm(out) if m.norm is not None else out


def _transformer_forward(m, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                         src_key_padding_mask=None, tgt_key_padding_mask=None,
                         memory_key_padding_mask=None):
    memory = m.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask)
    return m.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                     tgt_key_padding_mask=tgt_key_padding_mask,
                     memory_key_padding_mask=memory_key_padding_mask)


_TRACE_THROUGH = {nn.TransformerEncoderLayer: _encoder_layer_forward,
                  nn.TransformerEncoder: _encoder_forward,
                  nn.TransformerDecoder: _decoder_forward,
                  nn.Transformer: _transformer_forward}
if not all(hasattr(nn.TransformerEncoderLayer, a) for a in ("_sa_block", "_ff_block")):
    del _TRACE_THROUGH[nn.TransformerEncoderLayer]  # other torch: keep it a leaf


def resolve_class(spec):
    """`pkg.mod.Class` or `pkg.mod:Class` -> the class."""
    if isinstance(spec, type):
        return spec
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
    else:
        mod_name, _, attr = spec.rpartition(".")
    if not mod_name or not attr:
        raise ExportError("leaf module %r: write it as package.module.Class" % spec)
    try:
        obj = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ExportError("leaf module %r: %s" % (spec, e)) from e
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise ExportError("leaf module %r is not an nn.Module class" % spec)
    return obj


class PipeplanTracer(torch.fx.Tracer):
    """torch.fx Tracer whose leaf modules are:

    - DEFAULT_LEAF_MODULES (nn.MultiheadAttention, the RNN family) unless
      `default_leaves=False`;
    - the classes in `leaf_modules` (classes or "pkg.mod.Class" strings) and any
      module whose qualified name is in `leaf_names`;
    - nn.TransformerEncoderLayer / nn.TransformerDecoderLayer when
      `transformer_layers_as_leaves`;
    - as in torch.fx, every other torch.nn module except containers: nn.Sequential,
      nn.Transformer, nn.TransformerEncoder/Decoder and (unless leaves)
      nn.TransformerEncoderLayer/DecoderLayer are traced through, the ones whose
      forward is not traceable through a stand-in computing their training path.

    It records the module being traced when an error happens (`failed_module`).
    """

    def __init__(self, leaf_modules=(), leaf_names=(), default_leaves=True,
                 transformer_layers_as_leaves=False):
        super().__init__()
        classes = [resolve_class(c) for c in leaf_modules]
        if default_leaves:
            classes.extend(DEFAULT_LEAF_MODULES)
        if transformer_layers_as_leaves:
            classes.extend(TRANSFORMER_LAYERS)
        self.leaf_classes = tuple(classes)
        self.leaf_names = set(leaf_names)
        self.transformer_layers_as_leaves = transformer_layers_as_leaves
        self.module_stack = []
        self.failed_module = None  # (qualified name, class) of the innermost failure

    def is_leaf_module(self, m, module_qualified_name):
        if isinstance(m, self.leaf_classes) or module_qualified_name in self.leaf_names:
            return True
        if type(m) in _TRACE_THROUGH or isinstance(m, nn.TransformerDecoderLayer):
            return False
        return super().is_leaf_module(m, module_qualified_name)

    def create_proxy(self, kind, target, args, kwargs, *rest, **kw):
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **kw)
        # The module a node was traced inside: the planner's cut granularity
        # (module:DEPTH, layer) keeps such modules whole.
        if kind == "call_module":
            proxy.node.meta["pipeplan_module"] = target
        elif self.module_stack:
            proxy.node.meta["pipeplan_module"] = self.module_stack[-1]
        return proxy

    def call_module(self, m, forward, args, kwargs):
        name = self.path_of_module(m)
        if self.is_leaf_module(m, name):
            return self.create_proxy("call_module", name, args, kwargs)
        self.module_stack.append(name)
        try:
            stand_in = _TRACE_THROUGH.get(type(m))
            if stand_in is not None:
                return stand_in(m, *args, **kwargs)
            return forward(*args, **kwargs)
        except Exception:
            if self.failed_module is None:
                self.failed_module = (name, type(m))
            raise
        finally:
            self.module_stack.pop()


def _class_path(cls):
    return "%s.%s" % (cls.__module__, cls.__qualname__)


def trace(module, leaf_modules=(), leaf_names=(), default_leaves=True,
          transformer_layers_as_leaves=False):
    """Symbolically traces `module` with PipeplanTracer; returns a GraphModule.

    Raises ExportError naming the module whose forward could not be traced and the
    --leaf-module argument that would make it opaque.
    """
    tracer = PipeplanTracer(leaf_modules, leaf_names, default_leaves,
                            transformer_layers_as_leaves)
    stand_in = _TRACE_THROUGH.get(type(module))
    saved_class = module.__class__
    try:
        with patched_proxy_iter():
            if stand_in is not None:  # Tracer.trace calls type(root).forward
                module.__class__ = type(saved_class.__name__, (saved_class,),
                                        {"forward": stand_in})
            graph = tracer.trace(module)
    except Exception as e:
        if tracer.failed_module is not None:
            name, cls = tracer.failed_module
            where = "module %r (%s)" % (name, _class_path(cls))
            hint = ("mark it as a leaf: --leaf-module %s (export(..., leaf_modules=[%s]) "
                    "or leaf_names=[%r]); a leaf is one graph node whose flops are "
                    "counted by running it" % (_class_path(cls), cls.__qualname__, name))
        else:
            where = "the top-level forward of %s" % _class_path(saved_class)
            hint = ("make that forward traceable by torch.fx (no Python control flow on "
                    "tensor values, no iteration over tensors or unknown-length shapes)")
        raise ExportError("torch.fx could not trace %s: %s: %s\n  hint: %s"
                          % (where, type(e).__name__, e, hint)) from e
    finally:
        module.__class__ = saved_class
    name = module.__class__.__name__
    return torch.fx.GraphModule(tracer.root, graph, name)


# ---------------------------------------------------------------------------
# Costs of leaf modules: attention, recurrent layers, transformer layers, and a
# counting fallback for any other opaque module.
# ---------------------------------------------------------------------------

def _bind(node, mod):
    """The call's arguments by parameter name (fx nodes or constants)."""
    try:
        bound = inspect.signature(mod.forward).bind(*node.args, **node.kwargs)
    except TypeError:
        return {}
    return dict(bound.arguments)


def _shape_of(value):
    return _first_shape(value) if isinstance(value, torch.fx.Node) else None


def _out_element_size(node, default=4):
    leaves = _leaves(_meta(node))
    return _element_size(leaves[0].dtype) if leaves else default


def _seq_batch(shape, batch_first):
    """(sequence length, batch) of a (L, N, E) / (N, L, E) / unbatched (L, E) input."""
    if len(shape) == 2:
        return shape[0], 1
    return (shape[1], shape[0]) if batch_first else (shape[0], shape[1])


def mha_cost(mod, n, l, s, training=None):
    """(forward_flops, saved elements, saved mask bytes) of nn.MultiheadAttention on a
    batch of n, query length l and key length s.

    Flops: q, k and v projections (2·n·len·in_dim·E each), the two batched matmuls
    (scores Q·Kᵀ and probabilities·V, 2·n·l·s·E each, summed over heads), the softmax
    (5 per score, n·heads·l·s scores) and the output projection (2·n·l·E·E).
    Saved: the projected q, k, v, the attention probabilities and the heads' output
    (input of out_proj); plus the dropout mask on the probabilities when training.
    """
    e, h = mod.embed_dim, mod.num_heads
    s_eff = s + (1 if getattr(mod, "bias_k", None) is not None else 0) \
        + (1 if getattr(mod, "add_zero_attn", False) else 0)
    flops = (2.0 * n * l * e * e  # q projection
             + 2.0 * n * s * mod.kdim * e + 2.0 * n * s * mod.vdim * e  # k, v projections
             + 2.0 * n * l * s_eff * e  # scores
             + 2.0 * n * l * s_eff * e  # probabilities @ v
             + 5.0 * n * h * l * s_eff  # softmax
             + 2.0 * n * l * e * e)  # output projection
    training = mod.training if training is None else training
    dropout = training and mod.dropout > 0
    saved = n * l * e + 2.0 * n * s_eff * e + n * h * l * s_eff * (2 if dropout else 1) \
        + n * l * e
    mask = float(n * h * l * s_eff) if dropout else 0.0
    return flops, saved, mask


_RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
# Elementwise flops per hidden unit and step: gate nonlinearities, products, sums.
_RNN_ELEMENTWISE = {"LSTM": 24, "GRU": 17, "RNN_TANH": 5, "RNN_RELU": 2}


def _rnn_mode(mod):
    if isinstance(mod, (nn.LSTM, nn.LSTMCell)):
        return "LSTM"
    if isinstance(mod, (nn.GRU, nn.GRUCell)):
        return "GRU"
    return "RNN_RELU" if getattr(mod, "nonlinearity", "tanh") == "relu" else "RNN_TANH"


def rnn_cost(mod, t, n):
    """(forward_flops, saved elements) of an nn.LSTM / GRU / RNN over t steps of a
    batch of n (t = 1 for the *Cell modules).

    Per layer, direction and step: the gate matmuls 2·n·G·H·(in + P) (G = 4 LSTM,
    3 GRU, 1 RNN; P = proj_size or H; in = input_size on layer 0, P·directions
    above), the LSTM projection 2·n·H·P, and the gate elementwise work (LSTM 24,
    GRU 17, tanh-RNN 5, relu-RNN 2 flops per hidden unit).
    Saved: the gates, the cell state and its tanh (LSTM) and each step's output.
    """
    mode = _rnn_mode(mod)
    g, hsz = _RNN_GATES[mode], mod.hidden_size
    proj = getattr(mod, "proj_size", 0) or 0
    p = proj if proj > 0 else hsz
    layers = getattr(mod, "num_layers", 1)
    dirs = 2 if getattr(mod, "bidirectional", False) else 1
    flops = 0.0
    saved = 0.0
    for layer in range(layers):
        inp = mod.input_size if layer == 0 else p * dirs
        step = 2.0 * n * g * hsz * (inp + p) + _RNN_ELEMENTWISE[mode] * n * hsz
        if proj > 0:
            step += 2.0 * n * hsz * p
        flops += dirs * t * step
        state = {"LSTM": g + 2, "GRU": g + 1}.get(mode, 1) * hsz
        saved += dirs * t * n * (state + p)
    if layers > 1 and mod.training and getattr(mod, "dropout", 0) > 0:
        saved += (layers - 1) * t * n * p * dirs
    return flops, saved


def _activation_flops(layer):
    act = getattr(layer, "activation", None)
    name = getattr(act, "__name__", type(act).__name__).lower()
    return ELEMENTWISE.get(_snake(type(act).__name__) if isinstance(act, nn.Module) else name, 1)


def transformer_layer_cost(mod, n, l, s=None):
    """(forward_flops, saved elements, saved mask bytes) of an
    nn.TransformerEncoderLayer (s None) or nn.TransformerDecoderLayer (memory length s)
    on a batch of n sequences of length l: its attention blocks (mha_cost), the
    feed-forward linear1 / activation / linear2, the norms (5 flops per element) and
    the residual adds and the dropouts (1 per element, as the traced modules count
    them), so the leaf costs what the traced layer's nodes add up to."""
    d, ff = mod.linear1.in_features, mod.linear1.out_features
    flops, saved, mask = mha_cost(mod.self_attn, n, l, l, mod.training)
    norms = 2
    if s is not None:
        f2, s2, m2 = mha_cost(mod.multihead_attn, n, l, s, mod.training)
        flops, saved, mask = flops + f2, saved + s2, mask + m2
        norms = 3
    flops += 2.0 * n * l * d * ff * 2 + _activation_flops(mod) * n * l * ff
    flops += norms * (5.0 + 1.0 + 1.0) * n * l * d  # norms, residual adds, dropouts
    flops += 1.0 * n * l * ff  # dropout after the activation
    # inputs of the attention blocks and linear1 (norm outputs), linear1's output,
    # linear2's input, norm statistics
    saved += norms * n * l * d + 2.0 * n * l * ff + norms * 2.0 * n * l
    if mod.training:
        drops = [mod.dropout.p, mod.dropout1.p, mod.dropout2.p] + (
            [mod.dropout3.p] if s is not None else [])
        mask += sum(n * l * (ff if i == 0 else d) for i, p in enumerate(drops) if p > 0)
    return flops, saved, mask


def leaf_cost(node, mod):
    """(forward_flops, extra_saved_bytes, saves) for a module with a cost model here,
    or None."""
    args = _bind(node, mod)
    if isinstance(mod, nn.MultiheadAttention):
        qshape = _shape_of(args.get("query"))
        kshape = _shape_of(args.get("key")) or qshape
        if not qshape:
            return None
        l, n = _seq_batch(qshape, mod.batch_first)
        s, _ = _seq_batch(kshape, mod.batch_first)
        flops, saved, mask = mha_cost(mod, n, l, s)
        return flops, saved * _out_element_size(node) + mask, "in"
    if isinstance(mod, (nn.LSTM, nn.GRU, nn.RNN)):
        shape = _shape_of(args.get("input"))
        if not shape:  # PackedSequence: lengths unknown here
            return None
        t, n = _seq_batch(shape, mod.batch_first)
        flops, saved = rnn_cost(mod, t, n)
        return flops, saved * _out_element_size(node), "in"
    if isinstance(mod, (nn.LSTMCell, nn.GRUCell, nn.RNNCell)):
        shape = _shape_of(args.get("input"))
        if not shape:
            return None
        flops, saved = rnn_cost(mod, 1, shape[0] if len(shape) == 2 else 1)
        return flops, saved * _out_element_size(node), "in"
    if isinstance(mod, TRANSFORMER_LAYERS):
        first = "src" if isinstance(mod, nn.TransformerEncoderLayer) else "tgt"
        shape = _shape_of(args.get(first))
        if not shape:
            return None
        batch_first = mod.self_attn.batch_first
        l, n = _seq_batch(shape, batch_first)
        s = None
        if isinstance(mod, nn.TransformerDecoderLayer):
            s, _ = _seq_batch(_shape_of(args.get("memory")) or shape, batch_first)
        flops, saved, mask = transformer_layer_cost(mod, n, l, s)
        return flops, saved * _out_element_size(node) + mask, "in"
    return None


class _FlopCounter(TorchDispatchMode):
    """Counts matmul and convolution flops (2·M·K·N) of the aten ops run under it."""

    def __init__(self):
        super().__init__()
        self.flops = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        try:
            if name in ("mm", "bmm", "matmul"):
                self.flops += 2.0 * out.numel() * args[0].shape[-1]
            elif name in ("addmm", "baddbmm", "addbmm"):
                self.flops += 2.0 * out.numel() * args[1].shape[-1]
            elif name in ("convolution", "_convolution", "cudnn_convolution"):
                w = args[1]
                transposed = bool(args[6]) if len(args) > 6 else False
                if transposed:
                    self.flops += 2.0 * args[0].numel() * w.shape[1] * _numel(w.shape[2:])
                else:
                    self.flops += 2.0 * out.numel() * _numel(w.shape[1:])
            elif name in ("_softmax", "_log_softmax"):
                self.flops += 5.0 * out.numel()
        except (AttributeError, IndexError, TypeError):
            pass
        return out


class _NonFakeInputsAsFake(FakeTensorMode):
    """FakeTensorMode that turns the real tensors an op meets (the example inputs,
    the model's parameters and buffers) into fake ones of the same shape, dtype and
    device, as later torch's allow_non_fake_inputs does: the model itself is never
    copied, moved or changed. An op whose result depends on tensor values
    (`.item()`, `torch.equal`, `nonzero`) raises instead of reading zeros."""

    def __init__(self):
        super().__init__(throw_on_data_dependent_ops=True)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map_only(
            torch.Tensor, lambda t: t if isinstance(t, FakeTensor) else self.from_tensor(t),
            (args, kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


class _CostProp(torch.fx.Interpreter):
    """Runs the traced graph and records on every node the TensorMetadata of what it
    produces (`tensor_meta`, as ShapeProp does) and, for the call_module nodes in
    `count`, the matmul / conv / softmax flops counted while running it."""

    def __init__(self, gm, count):
        super().__init__(gm)
        self.count = count

    def run_node(self, n):
        try:
            if n.op == "call_module" and n.target in self.count:
                with _FlopCounter() as counter:
                    result = super().run_node(n)
                n.meta["pipeplan_counted_flops"] = counter.flops
            else:
                result = super().run_node(n)
        except Exception as e:  # any error of the model's code, named by its node
            raise ExportError("running the traced graph on the example inputs failed at "
                              "%s: %s" % (n.format_node(), e.__context__ or e)) from e
        found = []

        def extract(obj):
            if isinstance(obj, torch.Tensor):
                found.append(obj)
                return _extract_tensor_metadata(obj)
            return obj

        meta = map_aggregate(result, extract)
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result


def _clear_meta(gm):
    for node in gm.graph.nodes:
        for key in ("tensor_meta", "type", "pipeplan_counted_flops"):
            node.meta.pop(key, None)


def propagate(gm, example_inputs, count=(), real_forward=False):
    """Records every node's output shape and dtype (node.meta["tensor_meta"]) and the
    counted flops of the call_module nodes in `count`; returns the graph's output (a
    fake tensor unless the model ran for real).

    Shapes come from fake tensors (torch._subclasses.FakeTensorMode): no real
    arithmetic and no activation memory, so a GPT-2-sized model with 8 x 1,024 tokens
    takes seconds. Models whose code needs tensor values (`.item()`, data-dependent
    output shapes) or ops without a fake implementation are run for real on the
    example inputs instead, with a warning; `real_forward` always runs them for real.
    Raises ExportError naming the node that failed.
    """
    _clear_meta(gm)
    fake_error = None
    if not real_forward:
        try:
            with torch.no_grad(), _NonFakeInputsAsFake():
                return _CostProp(gm, set(count)).run(*example_inputs)
        except ExportError as e:
            fake_error = e
        _clear_meta(gm)
    with torch.no_grad():
        result = _CostProp(gm, set(count)).run(*example_inputs)
    if fake_error is not None:  # the model runs for real: the fake error was not its fault
        reason = str(fake_error).strip().splitlines()[0]
        warnings.warn("pipeplan_export: shapes from fake tensors failed (%s); ran the model on "
                      "the example inputs instead" % reason, stacklevel=2)
    return result


def _param_names(module):
    """id(parameter) -> canonical qualified name (first one named_parameters lists)."""
    return {id(p): name for name, p in module.named_parameters()}


def _get_attr(module, target):
    obj = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def export(module, example_inputs, name="model", batch_size=None, leaf_modules=(),
           leaf_names=(), default_leaves=True, transformer_layers_as_leaves=False,
           package=None, loss=None, real_forward=False):
    """Traces `module` on `example_inputs` and returns the graph as a dict.

    `example_inputs` is a tuple (or a single tensor) of positional inputs. The dict is
    the protobuf JSON form of pipeplan.v1.ModelGraph (snake_case field names).
    `leaf_modules` (classes or "pkg.mod.Class" strings), `leaf_names` (qualified module
    names), `default_leaves` and `transformer_layers_as_leaves` choose the modules kept
    as single nodes (see PipeplanTracer). Raises ExportError when tracing fails.
    With `package` (a directory) it also writes the model package
    (pipeplan_package.write_package, docs/model-package.md) with default loss `loss`.
    Shapes come from fake tensors (see propagate); `real_forward` runs the model on
    the example inputs instead. Only the inputs' shapes and dtypes matter.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    gm = trace(module, leaf_modules, leaf_names, default_leaves,
               transformer_layers_as_leaves)
    count = {n.target for n in gm.graph.nodes
             if n.op == "call_module" and _needs_counting(gm.get_submodule(n.target))}
    propagate(gm, example_inputs, count, real_forward)
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
        nodes.append(entry)
        for src in node.all_input_nodes:
            if src.op == "output":
                continue
            edges.append({"src": src.name, "dst": node.name,
                          "bytes": _edge_bytes(src, node)})
    graph = {"name": name, "batch_size": float(batch_size), "nodes": nodes, "edges": edges}
    # Bytes per element of the model's floating-point parameters: the memory
    # model scales the byte counts to the training precision from there.
    element = next((p.element_size() for p in module.parameters() if p.is_floating_point()), 4)
    if element != 4:
        graph["element_bytes"] = element
    if package is not None:
        if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
            sys.path.append(os.path.dirname(os.path.abspath(__file__)))
        import pipeplan_package  # it imports this module back (ReloadTracer)
        pipeplan_package.write_package(gm, graph, example_inputs, package, loss)
    return graph


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
            and isinstance(_meta(src), (tuple, list, dict))):
        return _tensor_bytes(dst)
    return _tensor_bytes(src)


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
        # Inputs are full-length sequences (plain torch.fx cannot slice a buffer by a
        # traced length in torch 1.13; the exporter's tracer can, see NanoGPT in tests).
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

_DTYPES = {"float32": torch.float32, "float": torch.float32, "float64": torch.float64,
           "double": torch.float64, "float16": torch.float16, "half": torch.float16,
           "bfloat16": torch.bfloat16, "int64": torch.int64, "long": torch.int64,
           "int32": torch.int32, "int": torch.int32, "int16": torch.int16,
           "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}

_INPUT_SPEC = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*):)?([A-Za-z0-9_]+)\[([0-9,\s]*)\]$")


def parse_input_spec(spec):
    """`name:dtype[d0,d1,...]` (name optional) -> (name or None, torch dtype, shape).
    Raises ValueError saying what is wrong."""
    m = _INPUT_SPEC.match(spec.strip())
    if not m:
        raise ValueError("--input %r: write it as name:dtype[d0,d1,...], e.g. "
                         "input_ids:int64[8,1024]" % spec)
    name, dtype, dims = m.groups()
    if dtype not in _DTYPES:
        raise ValueError("--input %r: unknown dtype %r (use one of %s)"
                         % (spec, dtype, ", ".join(sorted(_DTYPES))))
    shape = tuple(int(d) for d in dims.split(",") if d.strip())
    return name, _DTYPES[dtype], shape


def example_tensor(shape, dtype):
    """An example input: normal floats, zero integers (valid indices), all-true
    booleans (masks that keep everything). Only shape and dtype reach the graph."""
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    return torch.zeros(shape, dtype=dtype)


def inputs_from_specs(module, specs):
    """Example inputs of `module` from --input specs, in the order of its forward's
    parameters: named specs go to the parameter of that name, unnamed ones fill the
    positions in order. Raises ValueError for an unknown or missing name."""
    parsed = [parse_input_spec(s) for s in specs]
    if all(name is None for name, _, _ in parsed):
        return tuple(example_tensor(shape, dt) for _, dt, shape in parsed)
    if any(name is None for name, _, _ in parsed):
        raise ValueError("--input: name all inputs or none (name:dtype[shape])")
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params]
    given = {}
    for name, dt, shape in parsed:
        if name not in names:
            raise ValueError("--input %s: %s.forward has no parameter %r (it takes %s)"
                             % (name, type(module).__name__, name, ", ".join(names)))
        if name in given:
            raise ValueError("--input %s given twice" % name)
        given[name] = example_tensor(shape, dt)
    last = max(names.index(n) for n in given)
    missing = [n for n in names[:last] if n not in given]
    if missing:
        raise ValueError("--input: %s.forward's parameter %r comes before %r and has no "
                         "--input" % (type(module).__name__, missing[0],
                                      names[last]))
    return tuple(given[n] for n in names[:last + 1])


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
        dt = _DTYPES[args.input_dtype]
        return tuple(example_tensor(tuple(int(v) for v in s.split(",")), dt)
                     for s in args.input_shape)
    if inputs is None:
        raise ValueError("%s: give --input (the module has no example_inputs())"
                         % args.model)
    return inputs


def main(argv=None):
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
    parser.add_argument("--input-dtype", default="float32", choices=sorted(_DTYPES))
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
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    if args.model in BUILTINS:
        module, inputs = builtin(args.model)
    else:
        module, inputs = _load(args.model)
    try:
        inputs = _inputs_from_args(args, module, inputs)
        graph = export(module, inputs, name=args.name or args.model,
                       batch_size=args.batch_size, leaf_modules=args.leaf_module,
                       leaf_names=args.leaf_name, default_leaves=not args.no_default_leaves,
                       transformer_layers_as_leaves=args.transformer_layers_as_leaves,
                       package=args.package, loss=args.loss,
                       real_forward=args.real_forward)
    except (ExportError, ValueError) as e:  # pipeplan_package.PackageError is a ValueError
        print("pipeplan_export: %s" % e, file=sys.stderr)
        return 2
    write_graph(graph, args.out)
    flops = sum(n.get("forward_flops", 0) for n in graph["nodes"])
    print("%s: %d nodes, %d edges, %.4g forward flops" % (args.out, len(graph["nodes"]),
                                                         len(graph["edges"]), flops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
