"""Forward flops and saved activations of one traced node: (forward_flops,
extra_saved_bytes, saves), where `saves` says what autograd keeps for backward
("in": the node's tensor inputs, "out": its output, "none", or a list of input
nodes). Modules with a cost model are costed from shapes (leaf_costs.py for the
attention, recurrent and transformer leaves); any other opaque module from the
flops counted while propagation ran it (needs_counting says which).
"""

import torch
import torch.fx
import torch.nn as nn

from pipeplan.export.leaf_costs import leaf_cost
from pipeplan.export.op_tables import (ELEMENTWISE, LOSSES, MATMUL, NORMS, REDUCTIONS,
                                       SAVES_NOTHING, SAVES_OUTPUT, SOFTMAX, ZERO_FLOP,
                                       op_kind, snake)
from pipeplan.export.tensor_meta import first_shape, numel, tensor_args, tensor_bytes, tensor_numel


def _matmul_flops(node):
    """2*M*K*N summed over the batch: 2 * numel(out) * K."""
    args = tensor_args(node)
    out = tensor_numel(node)
    name = op_kind(node, {})
    if name in ("addmm", "baddbmm", "addbmm") and len(args) >= 3:
        a = first_shape(args[1])
    elif name == "linear":
        a = first_shape(args[0]) if args else None
    elif name == "einsum":
        return 0.0  # not estimated
    else:
        a = first_shape(args[0]) if args else None
    if not a:
        return 0.0
    return 2.0 * out * a[-1]


def module_flops(node, mod, kind):
    """Returns (forward_flops, extra_saved_bytes, saves) for a call_module node."""
    out = tensor_numel(node)
    args = tensor_args(node)
    in_numel = tensor_numel(args[0]) if args else 0
    if isinstance(mod, nn.Linear):
        return 2.0 * out * mod.in_features, 0.0, "in"
    if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        k = numel(mod.kernel_size)
        return 2.0 * out * (mod.in_channels // mod.groups) * k, 0.0, "in"
    if isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        k = numel(mod.kernel_size)
        return 2.0 * in_numel * (mod.out_channels // mod.groups) * k, 0.0, "in"
    if isinstance(mod, nn.Embedding):
        return float(out), 0.0, "in"
    if isinstance(mod, nn.EmbeddingBag):
        return float(out), 0.0, "in"
    cost = leaf_cost(node, mod)
    if cost is not None:
        return cost
    if isinstance(mod, (nn.LayerNorm, nn.GroupNorm)) or "norm" in kind:
        rows = in_numel / max(1, numel(getattr(mod, "normalized_shape", (1,))))
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
        saved = tensor_bytes(args[0]) if base == "cross_entropy" and args else 0.0
        return per * float(in_numel), saved, "in"
    if kind in ELEMENTWISE:
        return ELEMENTWISE[kind] * float(out), 0.0, "in"
    # Any other module: the matmul / conv / softmax flops counted while running it.
    return float(node.meta.get("pipeplan_counted_flops", 0.0)), 0.0, "in"


# Modules whose cost module_flops states without running them.
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


def needs_counting(mod):
    return not (isinstance(mod, _STATIC_COST) or snake(type(mod).__name__) in ELEMENTWISE
                or "norm" in snake(type(mod).__name__))


def function_flops(node, kind):
    """Returns (forward_flops, extra_saved_bytes, saves) for call_function/call_method."""
    out = tensor_numel(node)
    args = tensor_args(node)
    in_numel = tensor_numel(args[0]) if args else 0
    if kind in MATMUL or kind == "matmul":
        return _matmul_flops(node), 0.0, "in"
    if kind in ("conv1d", "conv2d", "conv3d") and len(args) >= 2:
        w = first_shape(args[1])
        return 2.0 * out * numel(w[1:]), 0.0, "in"
    if kind == "embedding":
        return float(out), 0.0, "in"
    if kind in NORMS:
        return 5.0 * out, 0.0, "in"
    if kind in SOFTMAX:
        return 5.0 * out, 0.0, "out"
    if kind in LOSSES:
        saved = tensor_bytes(args[0]) if kind == "cross_entropy" and args else 0.0
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
