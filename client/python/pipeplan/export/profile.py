"""Measured per-node costs: each node of the traced graph timed on its real inputs.

The flop-derived time of a node is wrong by its shape: on CPU, ResNet-18's last
convolutions take 10-20x longer for their weight gradient than for their forward
at a microbatch of 2 (docs/observability.md), while its first ones are even. A
per-kind correction cannot know that, and a split that moves those layers is then
mispriced. So `profile_nodes` runs the graph once on the example inputs and, as
each node is reached, times it on the very tensors it receives:

  forward_seconds       the node's call with autograd recording, as in training
  backward_seconds      one backward through the node: gradients of its
                        differentiable tensor inputs and of its parameters
  weight_grad_fraction  the parameters' gradient alone over input + parameter
                        gradients timed apart (the W of zero-bubble schedules)

Each figure is the median over `repeats` passes of the whole graph, after one
warm-up pass: a node is timed once per pass, between the other nodes' timings, as a
training step runs it (its weights and inputs no longer hot in the caches from its
own previous call), and a disturbance that lasts a few milliseconds (another
process, the allocator growing, a frequency step) spoils one pass of a node, not
every timing of it. Timing `repeats` calls in a row instead gave the same export
two answers up to 1.6x apart for one node on this project's 2-core machine
(docs/observability.md). The model is
copied first, and the random generators are restored after, so the export (and the
package's parameters and buffers, e.g. BatchNorm's running statistics) is the same
with or without profiling. Times are on the inputs' device (or `device`) with
torch's current thread count: profile where, and with the threads with which, the
workers run.
"""

import copy
import statistics
import time

import torch
import torch.fx
from torch.fx.node import map_aggregate

from pipeplan.export.errors import ExportError


def profile_nodes(gm, example_inputs, repeats=5, phase=None, device=None):
    """{fx node name: (forward_seconds, backward_seconds, weight_grad_fraction or None)}
    for every call_module / call_function / call_method node; the fraction is None
    where the node has no parameter gradient to time. With `device` ("cuda:0"), a copy
    of the model and the inputs are timed there; else where the inputs are. `phase`
    advances once per node per pass (repeats + 1 passes). Raises ExportError naming
    the node that failed."""
    if repeats < 1:
        raise ExportError("profile repeats must be at least 1, got %d" % repeats)
    copied = copy.deepcopy(gm)
    if device is not None:
        try:
            copied.to(device)
            example_inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x
                                   for x in example_inputs)
        except (RuntimeError, AssertionError) as e:  # no such device, no CUDA build
            raise ExportError("profile device %s: %s" % (device, e)) from e
    samples = {}
    with torch.random.fork_rng(devices=_cuda_devices(example_inputs)):
        for index in range(repeats + 1):  # pass 0 warms up: its timings are dropped
            runner = _Profiler(copied, phase, {} if index == 0 else samples)
            runner.run(*example_inputs)
    return {name: _summary(timings) for name, timings in samples.items()}


def _cuda_devices(example_inputs):
    return sorted({x.device.index or 0 for x in example_inputs
                   if isinstance(x, torch.Tensor) and x.is_cuda})


def _summary(timings):
    """(forward, backward, weight fraction or None) from one node's per-pass
    (forward, backward, weight, data) timings: medians of each."""
    forward, backward, weight, data = (
        statistics.median(t[i] for t in timings) if timings[0][i] is not None else None
        for i in range(4))
    if weight is None:
        return forward, backward, None
    data = data or 0.0
    return forward, backward, weight / (weight + data) if weight + data > 0 else None


class _Profiler(torch.fx.Interpreter):
    """One pass: runs the graph without gradients and times each callable node once
    on its inputs, appending (forward, backward, weight, data) seconds to
    `samples[node name]` (None where a part does not exist)."""

    def __init__(self, gm, phase, samples):
        super().__init__(gm)
        self.phase = phase
        self.samples = samples
        self.differentiable = set()  # nodes whose output carries a gradient in training

    def run_node(self, n):
        with torch.no_grad():
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            result = getattr(self, n.op)(n.target, args, kwargs)
        if n.op in ("call_module", "call_function", "call_method"):
            try:
                timing = self._time_node(n, args, kwargs)
            except Exception as e:  # the model's own code, named by its node
                raise ExportError("profiling %s failed: %s" % (n.format_node(), e)) from e
            self.samples.setdefault(n.name, []).append(timing)
        if self.phase is not None:
            self.phase.advance()
        return result

    def _time_node(self, n, args, kwargs):
        grads_in = {a.name for a in n.all_input_nodes if a in self.differentiable
                    or (a.op == "get_attr" and _is_trained(self.fetch_attr(a.target)))}
        call = _NodeCall(self, n, args, kwargs, grads_in)
        outputs = call.outputs()
        forward = _seconds(call.forward, call.sync)
        inputs, params = call.input_leaves(), call.param_leaves() + self._params(n)
        if not outputs or not (inputs or params):
            return forward, 0.0, None, None
        self.differentiable.add(n)
        backward = _seconds(lambda: call.backward(inputs + params), call.sync)
        if not params:
            return forward, backward, None, None
        weight = _seconds(lambda: call.backward(params), call.sync)
        data = _seconds(lambda: call.backward(inputs), call.sync) if inputs else None
        return forward, backward, weight, data

    def _params(self, n):
        if n.op == "call_module":
            return [p for p in self.module.get_submodule(n.target).parameters()
                    if p.requires_grad]
        return []


def _is_trained(value):
    return isinstance(value, torch.nn.Parameter) and value.requires_grad


class _NodeCall:
    """One node's call on private copies of its real inputs (the interpreter's values
    stay as they are, whatever the node does in place): the tensors that carry a
    gradient in training become leaves that require it."""

    def __init__(self, runner, n, args, kwargs, grad_names):
        self.runner, self.n = runner, n
        self.leaves, self.params = [], []  # gradients of inputs, of parameters read
        self.devices = set()
        self.grad_names = grad_names
        self.args = self._copy(args, n.args)
        self.kwargs = {k: self._copy(v, n.kwargs.get(k)) for k, v in kwargs.items()}
        self.sync_cuda = any(d.type == "cuda" for d in self.devices)
        self.clone_leaves = False
        self.graph_out, self.grads = [], []

    def _copy(self, value, arg):
        """`value` with its tensors copied; `arg` is the fx argument it came from (a
        node whose value is a tuple, e.g. `split`'s, passes its node to each element)."""
        if isinstance(value, torch.Tensor):
            self.devices.add(value.device)
            copied = value.detach().clone()
            if (isinstance(arg, torch.fx.Node) and arg.name in self.grad_names
                    and copied.is_floating_point()):
                copied.requires_grad_(True)
                (self.params if arg.op == "get_attr" else self.leaves).append(copied)
            return copied
        if isinstance(value, (list, tuple)):
            args = arg if isinstance(arg, (list, tuple)) else [arg] * len(value)
            return type(value)(self._copy(v, a) for v, a in zip(value, args))
        if isinstance(value, dict):
            args = arg if isinstance(arg, dict) else {k: arg for k in value}
            return {k: self._copy(v, args.get(k)) for k, v in value.items()}
        return value

    def call(self):
        args, kwargs = self.args, self.kwargs
        if self.clone_leaves:
            # In-place ops (ReLU(inplace=True)) refuse a leaf: a clone of it each call.
            args = map_aggregate(args, self._clone_leaf)
            kwargs = map_aggregate(kwargs, self._clone_leaf)
        return getattr(self.runner, self.n.op)(self.n.target, args, kwargs)

    def _clone_leaf(self, value):
        if isinstance(value, torch.Tensor) and any(value is t for t in self.leaves + self.params):
            return value.clone()
        return value

    def forward(self):
        self.call()

    def outputs(self):
        """The outputs that carry a gradient (calls once, learning whether leaves
        must be cloned)."""
        try:
            result = self.call()
        except RuntimeError:
            if not self.leaves and not self.params:
                raise
            self.clone_leaves = True
            result = self.call()
        self.graph_out = [t for t in _tensors(result) if t.requires_grad]
        self.grads = [torch.ones_like(t) for t in self.graph_out]
        return self.graph_out

    def input_leaves(self):
        return list(self.leaves)

    def param_leaves(self):
        return list(self.params)

    def backward(self, targets):
        torch.autograd.grad(self.graph_out, targets, self.grads, retain_graph=True,
                            allow_unused=True)

    def sync(self):
        if self.sync_cuda:
            torch.cuda.synchronize()


def _tensors(result):
    found = []
    map_aggregate(result, lambda x: found.append(x) if isinstance(x, torch.Tensor) else None)
    return [t for t in found if t.is_floating_point()]


def _seconds(fn, sync):
    """Seconds of one call of `fn`, the device idle before and after."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start
