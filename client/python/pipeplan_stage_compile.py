#!/usr/bin/env python3
"""Compile a model package into one TorchScript module per pipeline stage.

  /usr/bin/python3 client/python/pipeplan_stage_compile.py --package model.ptpkg \\
      --node-stage plan.json --microbatch-size 4 --out stages/

`--node-stage` is a JSON file holding the plan's `node_stage` list, or a plan JSON
with a top-level `node_stage` field, or either inline (`[0,0,1,1]`). Writes
`stage_<s>.pt` (torch.jit.save of a scripted module) and `stages.json`
(docs/model-package.md) into a temporary directory beside `--out`, then renames it:
readers never see half a result. When `--out` already holds the stages of the same
package digest, assignment and microbatch size it does nothing (a cache).

Stage s is a torch.fx graph of exactly the nodes the plan gives it. Its forward takes
the tensors live across boundary s-1 (stage 0: the model inputs) and returns the
tensors live across boundary s (the last stage: the model output), in graph order;
a tensor used stages later passes through the stages between (RELAY). Non-tensor
values crossing a cut (sizes from `x.size(0)`) are baked as the constants a run at
the microbatch size gives; a device crossing a cut becomes the device of the
consumer's first input. Parameters and buffers are read where used: get_attr nodes
go to every stage that uses them, whatever stage the plan gives them, so a tied
parameter sits in each stage that uses it under one canonical name.

Exit status: 0 done (or cached), 2 bad input (package, node_stage, microbatch size;
stderr names the field), 1 a stage TorchScript cannot compile (stderr names it).

API: compile_stages(package, node_stage, microbatch_size) -> (stages_json, modules)
     write_stages(package_path, node_stage, microbatch_size, out) -> "compiled"|"cached"
"""

import argparse
import hashlib
import json
import operator
import os
import shutil
import sys
import tempfile
import warnings

import torch
import torch.fx

from pipeplan import rng
from pipeplan.export import package as pp

FORMAT = "pipeplan-stages/1"
STAGES_JSON = "stages.json"


class CompileError(ValueError):
    """Bad input: the message names the field."""


class ScriptError(RuntimeError):
    """TorchScript could not compile a stage."""


class TensorSpec:
    """A tensor's shape and dtype, recorded from a run at the microbatch size."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(int(d) for d in shape), dtype


class Seq:
    """A tuple or list value that holds tensors."""

    def __init__(self, kind, items):
        self.kind, self.items = kind, items


class Const:
    """A value without tensors: baked into the stages that use it."""

    def __init__(self, value):
        self.value = value


def _describe(value):
    if isinstance(value, torch.Tensor):
        return TensorSpec(value.shape, value.dtype)
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        items = [_describe(v) for v in value]
        if any(not isinstance(i, Const) for i in items):
            return Seq(list if isinstance(value, list) else tuple, items)
    if isinstance(value, dict) and any(isinstance(v, torch.Tensor) for v in value.values()):
        raise CompileError("a dict of tensors crossing stages is not supported")
    return Const(value)


class _Recorder(torch.fx.Interpreter):
    """Runs the module and keeps what each node produced (shapes, not data)."""

    def __init__(self, module):
        super().__init__(module)
        self.specs = {}

    def run_node(self, n):
        result = super().run_node(n)
        self.specs[n] = _describe(result)
        return result


def example_inputs(manifest, microbatch_size):
    """Inputs of the manifest's shapes and dtypes at `microbatch_size` rows."""
    g = torch.Generator().manual_seed(0)
    dim = manifest.get("batch_dim", 0)
    out = []
    for entry in manifest["inputs"]:
        shape = list(entry["shape"])
        shape[dim] = microbatch_size
        dtype = pp.dtype_of(entry["dtype"])
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dtype))
        else:
            out.append(torch.randint(0, int(entry.get("high", 2)), shape, generator=g,
                                     dtype=dtype))
    return out


def read_node_stage(arg):
    """The node_stage list from a file (list or plan JSON) or an inline JSON list."""
    text = arg
    if not arg.lstrip().startswith(("[", "{")):
        try:
            with open(arg) as f:
                text = f.read()
        except OSError as e:
            raise CompileError("--node-stage: cannot read %s: %s" % (arg, e)) from e
    try:
        value = json.loads(text)
    except ValueError as e:
        raise CompileError("--node-stage: %s is not JSON: %s" % (arg, e)) from e
    if isinstance(value, dict):
        value = value.get("node_stage", value.get("nodeStage"))
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise CompileError("node_stage: want a list of stage indices (integers >= 0) "
                           "or a plan JSON with a node_stage field")
    return value


def assignment_digest(node_stage):
    """sha256 hex of the node_stage list written as compact JSON (`[0,0,1]`)."""
    return hashlib.sha256(json.dumps(list(node_stage), separators=(",", ":"))
                          .encode()).hexdigest()


def _producer_stage(node, stage_of):
    """Where a value comes from: model inputs enter at stage 0; get_attr values are
    read where used (None)."""
    if node.op == "placeholder":
        return 0
    if node.op == "get_attr":
        return None
    return stage_of[node]


def validate(gm, nodes, node_stage, microbatch_size):
    """Checks the assignment against the module; returns (stage_of, num_stages)."""
    if not isinstance(microbatch_size, int) or microbatch_size < 1:
        raise CompileError("microbatch_size: must be an integer >= 1, got %r"
                           % (microbatch_size,))
    if len(node_stage) != len(nodes):
        raise CompileError("node_stage: has %d entries but the package has %d nodes"
                           % (len(node_stage), len(nodes)))
    num_stages = max(node_stage) + 1 if node_stage else 0
    empty = sorted(set(range(num_stages)) - set(node_stage))
    if not num_stages or empty:
        raise CompileError("node_stage: stage %s has no nodes (stages must be 0..S-1, "
                           "each with a node)" % (empty[0] if empty else 0))
    fx_nodes = [n for n in gm.graph.nodes if n.op != "output"]
    stage_of = {n: s for n, s in zip(fx_nodes, node_stage)}
    for n in fx_nodes:
        if n.op in ("placeholder", "get_attr"):
            continue
        for a in n.all_input_nodes:
            src = _producer_stage(a, stage_of)
            if src is not None and src > stage_of[n]:
                raise CompileError(
                    "node_stage: node %r (stage %d) uses %r of stage %d; a node may only "
                    "use values of its own or earlier stages" % (n.name, stage_of[n],
                                                                 a.name, src))
    return stage_of, num_stages


def _last_use(gm, stage_of, num_stages):
    """Value node -> the last stage that uses it (the output counts as the last stage)."""
    last = {}
    for n in gm.graph.nodes:
        user_stage = num_stages - 1 if n.op == "output" else stage_of.get(n)
        for a in n.all_input_nodes:
            if a.op != "get_attr":
                last[a] = max(last.get(a, -1), user_stage)
    return last


def _leaves(spec, name, path=()):
    """[(name, path, TensorSpec)] of the tensors in a value, in order."""
    if isinstance(spec, TensorSpec):
        return [(name, path, spec)]
    if isinstance(spec, Seq):
        out = []
        for i, item in enumerate(spec.items):
            out.extend(_leaves(item, "%s__%d" % (name, i), path + (i,)))
        return out
    return []


def _bake(value, device_of):
    """A recorded constant as an fx argument: sizes as lists, a device as the
    device of the stage's first input (device_of() creates that node)."""
    if isinstance(value, torch.device):
        return device_of()
    if isinstance(value, torch.Size):
        return list(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_bake(v, device_of) for v in value)
    return value


def _rebuild(spec, placeholders, device_of):
    """The fx argument for a crossing value: its tensors from `placeholders` (an
    iterator, in leaf order), the rest baked."""
    if isinstance(spec, TensorSpec):
        return next(placeholders)
    if isinstance(spec, Seq):
        return spec.kind(_rebuild(i, placeholders, device_of) for i in spec.items)
    return _bake(spec.value, device_of)


def _pick(graph, value, path):
    """Element `path` of a value: python indexing of a rebuilt tuple, getitem nodes
    on a node's output."""
    for i in path:
        if isinstance(value, torch.fx.Node):
            value = graph.call_function(operator.getitem, (value, i))
        else:
            value = value[i]
    return value


class _Plan:
    """What crosses each boundary: the values (graph order) and their tensor leaves."""

    def __init__(self, gm, stage_of, num_stages, specs):
        self.gm, self.stage_of, self.num_stages, self.specs = gm, stage_of, num_stages, specs
        self.index = {n: i for i, n in enumerate(gm.graph.nodes)}  # pipeplan.rng's node index
        last = _last_use(gm, stage_of, num_stages)
        self.inputs = [n for n in gm.graph.nodes if n.op == "placeholder" and n in last]
        self.crossing = []  # boundary b -> [value node]
        for b in range(num_stages - 1):
            self.crossing.append([n for n in gm.graph.nodes if n in last and
                                  _producer_stage(n, stage_of) <= b < last[n] and
                                  not isinstance(specs[n], Const)])

    def leaves(self, values):
        out = []
        for v in values:
            out.extend((v, path, name, spec) for name, path, spec in
                       _leaves(self.specs[v], v.name))
        return out

    def stage_inputs(self, s):
        return self.leaves(self.inputs if s == 0 else self.crossing[s - 1])


def build_stage(plan, s):
    """The fx GraphModule of stage s."""
    gm, graph, env = plan.gm, torch.fx.Graph(), {}
    in_leaves = plan.stage_inputs(s)
    placeholders = [graph.placeholder(name) for _, _, name, _ in in_leaves]
    device = []

    def device_of():
        if not placeholders:
            raise CompileError("stage %d receives no tensors but uses a device from an "
                               "earlier stage" % s)
        if not device:
            device.append(graph.call_function(getattr, (placeholders[0], "device")))
        return device[0]

    it = iter(placeholders)
    for v in (plan.inputs if s == 0 else plan.crossing[s - 1]):
        env[v] = _rebuild(plan.specs[v], it, device_of)

    def lookup(a):
        if a not in env:
            if a.op == "get_attr":
                env[a] = graph.node_copy(a)
            else:  # a value without tensors from an earlier stage
                env[a] = _bake(plan.specs[a].value, device_of)
        return env[a]

    output = None
    for n in gm.graph.nodes:
        if n.op == "output":
            output = n
        elif n.op not in ("placeholder", "get_attr") and plan.stage_of[n] == s:
            if rng.is_random(gm, n):  # seeded as the reference trainer seeds it
                env[n] = rng.copy_random(graph, n, lookup, plan.index[n])
            else:
                env[n] = graph.node_copy(n, lookup)
    if s == plan.num_stages - 1:
        result = (lookup(output.args[0]),)
    else:
        result = tuple(_pick(graph, lookup(v), path)
                       for v, path, _, _ in plan.leaves(plan.crossing[s]))
        if not result:
            raise CompileError("node_stage: nothing that later stages use crosses from "
                               "stage %d to %d" % (s, s + 1))
    graph.output(result)
    module = torch.fx.GraphModule(gm, graph, class_name="Stage%d" % s)
    module.train()
    return module


def _tensor_entries(leaves, first_stage_inputs=False):
    return [{"name": name, "shape": list(spec.shape), "dtype": pp.dtype_name(spec.dtype),
             "requires_grad": spec.dtype.is_floating_point and not first_stage_inputs}
            for _, _, name, spec in leaves]


def _prepare(module):
    """Frozen parameters become buffers (only trainable ones are stage parameters);
    in-place activations are turned off (an in-place op on a received activation,
    a leaf that requires grad, fails autograd)."""
    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None and not p.requires_grad:
                del m._parameters[name]
                m.register_buffer(name, p.detach())
        if getattr(m, "inplace", None) is True:
            m.inplace = False


def compile_stages(package, node_stage, microbatch_size):
    """Builds and scripts every stage of `package` (pipeplan.export.package.Package) under
    the assignment. Returns (the stages.json dict, [ScriptModule]).
    Raises CompileError on bad input, ScriptError when TorchScript fails."""
    gm = package.module
    stage_of, num_stages = validate(gm, package.manifest["nodes"], node_stage,
                                    microbatch_size)
    _prepare(gm)
    setattr(gm, rng.ATTRIBUTE, 0)  # a stage with random nodes reads it (pipeplan.rng)
    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*example_inputs(package.manifest, microbatch_size))
    plan = _Plan(gm, stage_of, num_stages, recorder.specs)
    canonical = {id(p): name for name, p in pp.canonical_parameters(gm)}
    entries, modules = [], []
    for s in range(num_stages):
        stage = build_stage(plan, s)
        params = [{"name": canonical[id(p)], "path": path}
                  for path, p in pp.parameter_paths(stage)]
        try:
            with warnings.catch_warnings():
                # torch.jit reads GraphModule.__init__'s annotations and warns about them
                warnings.filterwarnings("ignore", message="The TorchScript type system")
                scripted = torch.jit.script(stage)
        except Exception as e:  # TorchScript raises many kinds
            raise ScriptError("stage %d: TorchScript cannot compile it: %s: %s\n%s"
                              % (s, type(e).__name__, e, stage.code)) from e
        out_leaves = (_output_leaves(plan) if s == num_stages - 1
                      else plan.leaves(plan.crossing[s]))
        entries.append({"index": s, "file": "stage_%d.pt" % s,
                        "inputs": _tensor_entries(plan.stage_inputs(s), s == 0),
                        "outputs": _tensor_entries(out_leaves),
                        "parameters": params})
        modules.append(scripted)
    manifest = {"format": FORMAT, "package_digest": package.manifest["digest"],
                "assignment_digest": assignment_digest(node_stage),
                "microbatch_size": microbatch_size, "num_stages": num_stages,
                "compiler": compiler_digest(), "stages": entries}
    return manifest, modules


def _output_leaves(plan):
    output = next(n for n in plan.gm.graph.nodes if n.op == "output")
    value = output.args[0]
    spec = plan.specs[value]
    if not isinstance(spec, TensorSpec):
        raise CompileError("the model's output must be one tensor")
    return [(value, (), value.name, spec)]


def compiler_digest():
    """sha256 of this script, the pipeplan package beside it and torch's version:
    stages an older compiler wrote (before dropout was seeded, say) are not reused."""
    here = os.path.dirname(os.path.abspath(__file__))
    files = [os.path.abspath(__file__)]
    for root, dirs, names in os.walk(os.path.join(here, "pipeplan")):
        dirs.sort()
        files += sorted(os.path.join(root, n) for n in names if n.endswith(".py"))
    h = hashlib.sha256(torch.__version__.encode())
    for path in files:
        h.update(os.path.relpath(path, here).encode() + b"\n")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _is_complete(out, digest, assignment, microbatch_size):
    """Whether `out` holds every stage of this package, assignment and size."""
    try:
        with open(os.path.join(out, STAGES_JSON)) as f:
            have = json.load(f)
    except (OSError, ValueError):
        return False
    return (isinstance(have, dict) and have.get("format") == FORMAT
            and have.get("package_digest") == digest
            and have.get("assignment_digest") == assignment
            and have.get("microbatch_size") == microbatch_size
            and have.get("compiler") == compiler_digest()
            and isinstance(have.get("stages"), list)
            and all(isinstance(st, dict) and
                    os.path.isfile(os.path.join(out, str(st.get("file"))))
                    for st in have["stages"]))


def write_stages(package_path, node_stage, microbatch_size, out):
    """Compiles the stages into directory `out` unless it already holds them.
    Returns "cached" or "compiled"; raises CompileError / ScriptError /
    pipeplan.export.package.PackageError."""
    manifest = pp.read_manifest(package_path)
    key = (manifest["digest"], assignment_digest(node_stage), microbatch_size)
    if _is_complete(out, *key):
        return "cached"
    stages, modules = compile_stages(pp.load_package(package_path), node_stage,
                                     microbatch_size)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(out) + ".tmp-", dir=parent)
    try:
        for entry, module in zip(stages["stages"], modules):
            torch.jit.save(module, os.path.join(tmp, entry["file"]))
        with open(os.path.join(tmp, STAGES_JSON), "w") as f:  # last: marks completion
            json.dump(stages, f, indent=1)
            f.write("\n")
        if not pp.install_dir(tmp, out, lambda d: _is_complete(d, *key)):
            return "cached"  # a concurrent compile of the same stages finished first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return "compiled"


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Compile a model package into TorchScript pipeline stages.")
    parser.add_argument("--package", required=True, help="model package directory")
    parser.add_argument("--node-stage", required=True, metavar="S",
                        help="JSON file with the node_stage list or a plan JSON, or an "
                             "inline list like [0,0,1]")
    parser.add_argument("--microbatch-size", required=True, type=int,
                        help="rows per microbatch (shapes and baked sizes depend on it)")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args(argv)
    try:
        node_stage = read_node_stage(args.node_stage)
        result = write_stages(args.package, node_stage, args.microbatch_size, args.out)
    except (CompileError, pp.PackageError) as e:
        print("pipeplan_stage_compile: %s" % e, file=sys.stderr)
        return 2
    except ScriptError as e:
        print("pipeplan_stage_compile: %s" % e, file=sys.stderr)
        return 1
    print("%s: %d stages (%s)" % (args.out, max(node_stage) + 1, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
