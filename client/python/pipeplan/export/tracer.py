"""Tracing an nn.Module into a torch.fx GraphModule: PipeplanTracer with
configurable leaf modules, traceable stand-ins for torch.nn's transformer
containers, and errors that name the module that failed and the --leaf-module
that would make it opaque.
"""

import importlib
import os
import sys
import traceback

import torch
import torch.fx
import torch.nn as nn

from pipeplan.export.errors import ExportError
from pipeplan.export.op_tables import RNN_LEAVES, TRANSFORMER_LAYERS
from pipeplan.export.tracer_patches import patched_proxy_iter


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


def _drop_unread_attributes(graph):
    """Erases the `getattr` nodes nothing reads; returns how many.

    torch.fx creates an attribute's node (`x.shape`) only when something uses the
    proxy. Formatting it into a string (torchvision's ViT: `torch._assert(...,
    f"... got {x.shape}")`) creates the node, but the saved code then holds the text
    `Proxy(getattr_3)`, so torch.load's retrace never uses the attribute and has no
    node for it. An unread attribute of a tensor computes nothing, so dropping it
    changes no result.
    """
    unread = [n for n in graph.nodes
              if n.op == "call_function" and n.target is getattr and not n.users]
    for node in unread:
        graph.erase_node(node)
    return len(unread)


class _KeepModules(torch.fx.Tracer):
    """What torch.fx traces a saved GraphModule's code with: every module is a leaf."""

    def is_leaf_module(self, m, module_qualified_name):
        return True


def _name_like_a_reload(gm):
    """Gives gm's nodes the names torch.load's retrace of its code gives them.

    An erased node's name stays taken in the graph, but a retrace hands it to the next
    node of that kind (`getattr_4` comes back as `getattr_3`), and the names are the
    graph JSON's node ids and the plan's keys. Nodes are matched by position, op and
    target; on any other difference nothing is renamed (the package's reload check
    names the node).
    """
    with patched_proxy_iter():  # the saved code may call torch.arange(T) & co.
        reloaded = list(_KeepModules().trace(gm).nodes)
    nodes = list(gm.graph.nodes)
    if len(reloaded) != len(nodes) or any(
            (a.op, a.target) != (b.op, b.target) for a, b in zip(nodes, reloaded)):
        return
    for node, again in zip(nodes, reloaded):
        node.name = again.name  # a fresh namespace's names: unique and legal
    gm.recompile()


def _class_path(cls):
    return "%s.%s" % (cls.__module__, cls.__qualname__)


# What torch.fx's errors mean in the user's terms: (text of the error, the construct).
_CONSTRUCTS = (
    ("cannot be used as inputs to control flow",
     "data-dependent control flow (if, while, and/or or bool() on a tensor's value)"),
    ("cannot be iterated",
     "iteration over a traced value (a tensor, or a shape of unknown length)"),
    ("len(", "len() of a traced value"),
)

_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                      for m in (torch, sys.modules[__name__.rpartition(".")[0]]))


def _construct(e):
    """What the model's code did that torch.fx cannot trace, with the source line: the
    innermost frame of the traceback outside torch and this package."""
    text = str(e).split(". ")[0].strip()
    what = next((c for key, c in _CONSTRUCTS if key in text), None)
    what = "%s (%s: %s)" % (what, type(e).__name__, text) if what else \
        "%s: %s" % (type(e).__name__, text)
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not os.path.abspath(f.filename).startswith(_LIBRARY_DIRS)]
    if frames and frames[-1].line:
        what += " at %s:%d: `%s`" % (frames[-1].filename, frames[-1].lineno,
                                     frames[-1].line.strip())
    return what


def _untraceable(e, failed_module, root_class):
    """The ExportError message: where tracing failed, what, and the ways out."""
    if failed_module is not None:
        name, cls = failed_module
        where = "module %r (%s)" % (name, _class_path(cls))
        hint = ("mark it as a leaf: --leaf-module %s or --leaf-name %s (export(..., "
                "leaf_modules=[%s]) or leaf_names=[%r]); a leaf is one graph node, run "
                "for its shapes and flops, and the planner never cuts inside it (as "
                "`pipeplan plan --cut-granularity module:DEPTH` keeps modules whole)"
                % (_class_path(cls), name, cls.__qualname__, name))
    else:
        where = "the top-level forward of %s" % _class_path(root_class)
        hint = ("make that forward traceable by torch.fx (no Python control flow on "
                "tensor values, no iteration over tensors or unknown-length shapes), or "
                "move the construct into a submodule and mark that a leaf (--leaf-module)")
    return "torch.fx could not trace %s: %s\n  hint: %s" % (where, _construct(e), hint)


def trace(module, leaf_modules=(), leaf_names=(), default_leaves=True,
          transformer_layers_as_leaves=False):
    """Symbolically traces `module` with PipeplanTracer; returns a GraphModule.

    Raises ExportError naming the module whose forward could not be traced, the
    construct and its source line, and the --leaf-module argument that would make it
    opaque.
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
        raise ExportError(_untraceable(e, tracer.failed_module, saved_class)) from e
    finally:
        module.__class__ = saved_class
    erased = _drop_unread_attributes(graph)
    gm = torch.fx.GraphModule(tracer.root, graph, module.__class__.__name__)
    if erased:
        _name_like_a_reload(gm)
    return gm
