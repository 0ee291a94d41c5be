"""The model package: the traced model, its initial parameters and a manifest
(docs/model-package.md), written by the exporter and read by the stage compiler
and the reference trainer.

A package is a directory:
  manifest.json     format, graph name, digest, node names (the graph JSON's node
                    ids, in order), inputs, output, parameters, default loss
  graph_module.pt   torch.save of the traced torch.fx.GraphModule
  params.pt         torch.save of {canonical name: initial value} of every trainable
                    parameter

Canonical parameter names are the names the saved GraphModule's
named_parameters() lists (a tied parameter once, under its first name); fx keeps
the model's own qualified names, so these are the names the model uses.

graph_module.pt loads with torch.load(weights_only=False): torch.fx rebuilds the graph by
tracing the saved code. A model that calls a torch factory with a traced size
(`torch.arange(T)`) needs the exporter's tracer patches for that, so its pickle
names ReloadTracer (pipeplan.export.package; packages written before the exporter
became a package name pipeplan_package.ReloadTracer, which stays importable) and
loading needs the `pipeplan` package importable (client/python on sys.path).
Loading imports this module and tracer_patches only, not the tracer or the cost
model: the stage compiler and the trainers read packages.

API:
  write_package(gm, graph, example_inputs, out_dir, loss=None) -> manifest dict
  load_package(path) -> Package(path, manifest, module, params)   (raises PackageError)
  install_dir(tmp, out_dir): atomically put a directory written under a temporary name
  default_loss(manifest-like inputs/output) / DTYPE_NAMES / dtype_of(name)
  get_attr(module, "a.b.c"): the attribute a get_attr node reads
"""

import collections
import hashlib
import json
import os
import shutil
import tempfile

import torch
import torch.fx
import torch.nn as nn

from pipeplan.export.tracer_patches import FACTORIES, patched_proxy_iter
from pipeplan.loss import LOSSES

FORMAT = "pipeplan-model-package/1"
MANIFEST, GRAPH_MODULE, PARAMS = "manifest.json", "graph_module.pt", "params.pt"

DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
               torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
               torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
               torch.bool: "bool"}
_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


class PackageError(ValueError):
    """The package is missing, malformed or inconsistent; the message names the part."""


Package = collections.namedtuple("Package", "path manifest module params")


def dtype_name(dtype):
    if dtype not in DTYPE_NAMES:
        raise PackageError("dtype %s is not supported (use one of %s)"
                           % (dtype, ", ".join(DTYPE_NAMES.values())))
    return DTYPE_NAMES[dtype]


def dtype_of(name):
    if name not in _DTYPES:
        raise PackageError("unknown dtype %r (use one of %s)" % (name, ", ".join(_DTYPES)))
    return _DTYPES[name]


def sha256_files(paths):
    """sha256 hex of the files' bytes, concatenated in order."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def canonical_parameters(module):
    """[(canonical name, parameter)] of the trainable parameters, named_parameters()
    order; a tied parameter once."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def parameter_paths(module):
    """[(path, parameter)] of every trainable parameter slot, tied ones under each of
    their paths."""
    out = []
    for prefix, m in module.named_modules(remove_duplicate=False):
        for name, p in m._parameters.items():
            if p is not None and p.requires_grad:
                out.append((prefix + "." + name if prefix else name, p))
    return out


class ReloadTracer(torch.fx.Tracer):
    """The tracer torch.fx uses to rebuild a saved GraphModule whose code calls a
    torch factory with a traced size: it applies the exporter's patches."""

    def trace(self, root, concrete_args=None):
        with patched_proxy_iter():
            return super().trace(root, concrete_args)


def _needs_patched_reload(gm):
    factories = {getattr(torch, n) for n in FACTORIES if hasattr(torch, n)}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in factories and node.all_input_nodes:
            return True
    return False


def _first_embedding_size(gm, placeholder):
    """num_embeddings of the first embedding that `placeholder` feeds, or None."""
    seen, queue = {placeholder}, [placeholder]
    while queue:
        node = queue.pop(0)
        for user in node.users:
            if user.op == "call_module":
                mod = gm.get_submodule(user.target)
                if isinstance(mod, (nn.Embedding, nn.EmbeddingBag)) and user.args \
                        and user.args[0] is node:
                    return mod.num_embeddings
            if user.op == "call_function" and user.target is torch.nn.functional.embedding \
                    and user.args and user.args[0] is node:
                weight = user.args[1]
                if isinstance(weight, torch.fx.Node) and weight.op == "get_attr":
                    return int(get_attr(gm, weight.target).shape[0])
            if user not in seen:
                seen.add(user)
                queue.append(user)
    return None


def _check_reload(gm, nodes):
    """torch.load rebuilds the graph by tracing the saved code: check, without
    copying a tensor, that it gives back the same node names (the plan's keys)."""
    rebuild, args = gm.__reduce__()
    try:
        names = [n.name for n in rebuild(*args).graph.nodes if n.op != "output"]
    except Exception as e:  # tracing raises anything the model's code raises
        raise PackageError("torch.fx cannot reload the traced module: %s: %s"
                           % (type(e).__name__, e)) from e
    if names != nodes:
        pad = max(len(names), len(nodes))
        names, nodes = names + [None] * pad, nodes + [None] * pad
        i = next(i for i in range(pad) if names[i] != nodes[i])
        raise PackageError(_reload_mismatch(gm, i, nodes[i], names[i]))


def _reload_mismatch(gm, index, name, reloaded):
    """Names the node a reload loses or adds, the code that made it and the module it
    was traced in, with the way out: a leaf module is one node, its code not retraced."""
    node = next((n for n in gm.graph.nodes if n.name == name), None)
    what, module = repr(name), ""
    if node is not None:
        target = getattr(node.target, "__name__", node.target)
        what = "%r (%s %s)" % (name, node.op, target)
        module = node.meta.get("pipeplan_module", "")
    hint = ("mark the module a leaf: --leaf-name %s (export(..., leaf_names=[%r]))"
            % (module, module)) if module else \
        "make the model's forward build the same nodes when its saved code is traced again"
    return ("torch.fx gives node %d %s back as %r when it reloads the traced module%s: the "
            "saved code does not rebuild the graph it was saved from\n  hint: %s"
            % (index, what, reloaded, " (in module %r)" % module if module else "", hint))


def get_attr(module, target):
    """The attribute `target` ("a.b.c", a get_attr node's target) of `module`."""
    for part in target.split("."):
        module = getattr(module, part)
    return module


def default_loss(inputs, output):
    """`mse` when the output is floating and has the first input's shape (a
    regression / autoencoder), else `cross_entropy` (classes or tokens in the last
    dimension)."""
    floating = dtype_of(output["dtype"]).is_floating_point
    if floating and inputs and list(output["shape"]) == list(inputs[0]["shape"]):
        return "mse"
    return "cross_entropy"


def _tensor_entry(t):
    return {"shape": [int(d) for d in t.shape], "dtype": dtype_name(t.dtype)}


def _input_entries(gm, example_inputs):
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # Arguments left out keep their defaults (nn.TransformerEncoder's mask=None).
    required = [n for n in placeholders if not n.args]
    if not len(required) <= len(example_inputs) <= len(placeholders):
        raise PackageError("the model takes %d inputs but %d example inputs were given"
                           % (len(required), len(example_inputs)))
    entries = []
    for node, x in zip(placeholders, example_inputs):
        if not isinstance(x, torch.Tensor):
            raise PackageError("input %r: a package needs tensor inputs, got %s"
                               % (node.name, type(x).__name__))
        entry = dict(name=node.name, **_tensor_entry(x))
        if not x.dtype.is_floating_point:
            entry["high"] = int(_first_embedding_size(gm, node) or 2)
        entries.append(entry)
    return entries


def _not_one_tensor(kind):
    """The error for a model whose output the package's loss cannot take, with the ways
    out (the graph alone plans; only the package needs one tensor)."""
    return ("the model's output must be one tensor (the loss takes it), got %s: export a "
            "module whose forward returns that tensor (wrap the model, or turn the extra "
            "outputs off: torchvision's googlenet and inception_v3 take aux_logits=False); "
            "without --package the graph exports and plans as it is" % kind.__name__)


def _output_entry(gm, example_inputs):
    """Shape and dtype of the model's output: from the exporter's shape propagation
    (the output node's tensor_meta) when it ran, else by running the module."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    kind = output.meta.get("type")
    if kind is not None:
        if not issubclass(kind, torch.Tensor):
            raise PackageError(_not_one_tensor(kind))
        return _tensor_entry(output.meta["tensor_meta"])
    with torch.no_grad():
        y = gm(*example_inputs)
    if not isinstance(y, torch.Tensor):
        raise PackageError(_not_one_tensor(type(y)))
    return _tensor_entry(y)


def _own_storage(p):
    """p's values, detached; copied only when p is a view into a larger storage
    (torch.save writes whole storages), so a large model is not held twice."""
    t = p.detach()
    if t.storage_offset() != 0 or t.storage().size() != t.numel() or not t.is_contiguous():
        t = t.clone()
    return t


def write_package(gm, graph, example_inputs, out_dir, loss=None):
    """Writes the package of the traced `gm` (the GraphModule `graph` was exported
    from) into directory `out_dir`, replacing it; returns the manifest.

    `loss` is `cross_entropy`, `mse` or None (default_loss). The directory is written
    under a temporary name and renamed, so readers never see half a package.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    nodes = [n["id"] for n in graph["nodes"]]
    fx_nodes = [n.name for n in gm.graph.nodes if n.op != "output"]
    if nodes != fx_nodes:
        raise PackageError("the graph's node ids differ from the traced module's nodes")
    inputs = _input_entries(gm, tuple(example_inputs))
    output = _output_entry(gm, tuple(example_inputs))
    loss = loss or default_loss(inputs, output)
    if loss not in LOSSES:
        raise PackageError("loss %r: use one of %s" % (loss, ", ".join(LOSSES)))
    params = canonical_parameters(gm)
    # Name a tracer that a fresh process can import (never __main__'s copy).
    gm._tracer_cls = ReloadTracer if _needs_patched_reload(gm) else None
    _check_reload(gm, nodes)
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".tmp-", dir=parent)
    try:
        torch.save(gm, os.path.join(tmp, GRAPH_MODULE))
        torch.save({name: _own_storage(p) for name, p in params}, os.path.join(tmp, PARAMS))
        manifest = {
            "format": FORMAT,
            "graph_name": graph.get("name", "model"),
            "digest": sha256_files([os.path.join(tmp, GRAPH_MODULE),
                                    os.path.join(tmp, PARAMS)]),
            "nodes": nodes,
            "inputs": inputs,
            "output": output,
            "batch_dim": 0,
            "parameters": [dict(name=name, **_tensor_entry(p)) for name, p in params],
            "loss": loss,
        }
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        install_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def install_dir(tmp, out_dir, keep_existing=None):
    """Renames directory `tmp` to `out_dir`, so readers see the old directory or the
    new one, never a mix. An existing `out_dir` is moved aside and deleted, unless
    keep_existing(out_dir) says it already holds what `tmp` does (a concurrent writer
    finished first): then `tmp` is deleted. Returns whether `tmp` was installed."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private
    try:
        os.rename(tmp, out_dir)  # replaces nothing but an empty directory
        return True
    except OSError:
        if not os.path.lexists(out_dir):
            raise
    if keep_existing is not None and keep_existing(out_dir):
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    old = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".old-",
                           dir=os.path.dirname(os.path.abspath(out_dir)))
    os.rename(out_dir, os.path.join(old, "x"))
    os.rename(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
    return True


def read_manifest(path):
    """The package's manifest, checked for the fields readers use."""
    file = os.path.join(path, MANIFEST)
    if not os.path.isdir(path):
        raise PackageError("package %s: not a directory" % path)
    try:
        with open(file) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise PackageError("package %s: cannot read %s: %s" % (path, MANIFEST, e)) from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PackageError("package %s: %s: format is not %r" % (path, MANIFEST, FORMAT))
    for key, kind in (("digest", str), ("nodes", list), ("inputs", list), ("output", dict),
                      ("parameters", list), ("loss", str)):
        if not isinstance(manifest.get(key), kind):
            raise PackageError("package %s: %s: field %r is missing or not a %s"
                               % (path, MANIFEST, key, kind.__name__))
    return manifest


def load_package(path):
    """Reads and checks a package: the digest matches the files, the module's nodes
    are the manifest's `nodes`, params.pt holds exactly its trainable parameters."""
    manifest = read_manifest(path)
    files = [os.path.join(path, GRAPH_MODULE), os.path.join(path, PARAMS)]
    for f in files:
        if not os.path.isfile(f):
            raise PackageError("package %s: %s is missing" % (path, os.path.basename(f)))
    digest = sha256_files(files)
    if digest != manifest["digest"]:
        raise PackageError("package %s: digest %s in %s does not match the files (%s)"
                           % (path, manifest["digest"], MANIFEST, digest))
    try:
        # A pickled GraphModule, which torch >= 2.6's weights-only default
        # refuses; the digest above has already tied it to the manifest.
        module = torch.load(files[0], weights_only=False)
        params = torch.load(files[1])
    except Exception as e:  # unpickling raises anything a model's classes raise
        raise PackageError("package %s: cannot load: %s: %s"
                           % (path, type(e).__name__, e)) from e
    names = [n.name for n in module.graph.nodes if n.op != "output"]
    if names != manifest["nodes"]:
        raise PackageError("package %s: %s nodes differ from the manifest's `nodes`"
                           % (path, GRAPH_MODULE))
    canonical = [name for name, _ in canonical_parameters(module)]
    if sorted(canonical) != sorted(params) or \
            canonical != [p["name"] for p in manifest["parameters"]]:
        raise PackageError("package %s: %s does not hold the module's parameters"
                           % (path, PARAMS))
    return Package(path, manifest, module, params)
