"""Shape propagation: runs the traced graph once, on fake tensors of the example
inputs' shapes and dtypes (no arithmetic, no activation memory) or, when the
model's code needs tensor values, for real; records on every node the shape and
dtype of what it produces and, for opaque modules without a cost model, the
matmul / convolution / softmax flops counted while running them.
"""

import inspect
import warnings

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.node import map_aggregate
from torch.fx.passes.shape_prop import _extract_tensor_metadata
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from pipeplan.export.errors import ExportError
from pipeplan.export.tensor_meta import numel


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
                    self.flops += 2.0 * args[0].numel() * w.shape[1] * numel(w.shape[2:])
                else:
                    self.flops += 2.0 * out.numel() * numel(w.shape[1:])
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
        # torch 1.13 reads zeros for data-dependent ops unless told to throw;
        # later releases throw by default and no longer take the argument.
        params = inspect.signature(FakeTensorMode.__init__).parameters
        if "throw_on_data_dependent_ops" in params:
            super().__init__(throw_on_data_dependent_ops=True)
        else:
            super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map_only(
            torch.Tensor, lambda t: t if isinstance(t, FakeTensor) else self.from_tensor(t),
            (args, kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


class _CostProp(torch.fx.Interpreter):
    """Runs the traced graph and records on every node the TensorMetadata of what it
    produces (`tensor_meta`, as ShapeProp does) and, for the call_module nodes in
    `count`, the matmul / conv / softmax flops counted while running it."""

    def __init__(self, gm, count, phase):
        super().__init__(gm)
        self.count = count
        self.phase = phase

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

        if self.phase is not None:
            self.phase.advance()
        meta = map_aggregate(result, extract)
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result


def _clear_meta(gm):
    for node in gm.graph.nodes:
        for key in ("tensor_meta", "type", "pipeplan_counted_flops"):
            node.meta.pop(key, None)


def propagate(gm, example_inputs, count=(), real_forward=False, phase=None):
    """Records every node's output shape and dtype (node.meta["tensor_meta"]) and the
    counted flops of the call_module nodes in `count`; returns the graph's output (a
    fake tensor unless the model ran for real).

    Shapes come from fake tensors (torch._subclasses.FakeTensorMode): no real
    arithmetic and no activation memory, so a GPT-2-sized model with 8 x 1,024 tokens
    takes seconds. Models whose code needs tensor values (`.item()`, data-dependent
    output shapes) or ops without a fake implementation are run for real on the
    example inputs instead, with a warning; `real_forward` always runs them for real.
    Raises ExportError naming the node that failed. `phase` (a pipeplan.progress
    phase, optional) advances once per node run.
    """
    _clear_meta(gm)
    fake_error = None
    if not real_forward:
        try:
            with torch.no_grad(), _NonFakeInputsAsFake():
                return _CostProp(gm, set(count), phase).run(*example_inputs)
        except ExportError as e:
            fake_error = e
        _clear_meta(gm)
    if phase is not None and fake_error is not None:
        phase.restart("shapes (running the model for real)")
    with torch.no_grad():
        result = _CostProp(gm, set(count), phase).run(*example_inputs)
    if fake_error is not None:  # the model runs for real: the fake error was not its fault
        reason = str(fake_error).strip().splitlines()[0]
        warnings.warn("pipeplan_export: shapes from fake tensors failed (%s); ran the model on "
                      "the example inputs instead" % reason, stacklevel=2)
    return result
