"""What the exporter knows about ops and modules: flops per element of the ops it
costs, which ops save their inputs or outputs for backward, the snake_case op name
of a node, and the module families that have a cost model of their own.

Names are fx call_function __name__s / call_method names.
"""

import re

import torch.nn as nn

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


MODULE_KINDS = {"ReLU": "relu", "ReLU6": "relu6", "LeakyReLU": "leaky_relu", "PReLU": "prelu",
                 "GELU": "gelu", "SiLU": "silu", "ELU": "elu", "SELU": "selu",
                 "GLU": "glu", "Mish": "mish", "Hardswish": "hardswish"}


def snake(name):
    if name in MODULE_KINDS:
        return MODULE_KINDS[name]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def op_kind(node, modules):
    """A snake_case op name for the node."""
    if node.op in ("placeholder", "get_attr"):
        return node.op
    if node.op == "call_module":
        return snake(type(modules[node.target]).__name__)
    if node.op == "call_method":
        return str(node.target)
    name = getattr(node.target, "__name__", str(node.target))
    return name


RNN_LEAVES = (nn.LSTM, nn.GRU, nn.RNN, nn.LSTMCell, nn.GRUCell, nn.RNNCell)
TRANSFORMER_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
