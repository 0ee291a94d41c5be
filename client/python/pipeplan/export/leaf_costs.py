"""Cost models of the leaf modules the exporter keeps whole without running them:
nn.MultiheadAttention, the recurrent family (LSTM / GRU / RNN and their cells)
and transformer encoder / decoder layers kept as leaves. Each states forward
flops and what autograd saves, from the shapes of the call's arguments.
"""

import inspect

import torch.nn as nn

from pipeplan.export.op_tables import ELEMENTWISE, TRANSFORMER_LAYERS, snake
from pipeplan.export.tensor_meta import out_element_size, shape_of


def _bind(node, mod):
    """The call's arguments by parameter name (fx nodes or constants)."""
    try:
        bound = inspect.signature(mod.forward).bind(*node.args, **node.kwargs)
    except TypeError:
        return {}
    return dict(bound.arguments)


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
    return ELEMENTWISE.get(snake(type(act).__name__) if isinstance(act, nn.Module) else name, 1)


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
        qshape = shape_of(args.get("query"))
        kshape = shape_of(args.get("key")) or qshape
        if not qshape:
            return None
        l, n = _seq_batch(qshape, mod.batch_first)
        s, _ = _seq_batch(kshape, mod.batch_first)
        flops, saved, mask = mha_cost(mod, n, l, s)
        return flops, saved * out_element_size(node) + mask, "in"
    if isinstance(mod, (nn.LSTM, nn.GRU, nn.RNN)):
        shape = shape_of(args.get("input"))
        if not shape:  # PackedSequence: lengths unknown here
            return None
        t, n = _seq_batch(shape, mod.batch_first)
        flops, saved = rnn_cost(mod, t, n)
        return flops, saved * out_element_size(node), "in"
    if isinstance(mod, (nn.LSTMCell, nn.GRUCell, nn.RNNCell)):
        shape = shape_of(args.get("input"))
        if not shape:
            return None
        flops, saved = rnn_cost(mod, 1, shape[0] if len(shape) == 2 else 1)
        return flops, saved * out_element_size(node), "in"
    if isinstance(mod, TRANSFORMER_LAYERS):
        first = "src" if isinstance(mod, nn.TransformerEncoderLayer) else "tgt"
        shape = shape_of(args.get(first))
        if not shape:
            return None
        batch_first = mod.self_attn.batch_first
        l, n = _seq_batch(shape, batch_first)
        s = None
        if isinstance(mod, nn.TransformerDecoderLayer):
            s, _ = _seq_batch(shape_of(args.get("memory")) or shape, batch_first)
        flops, saved, mask = transformer_layer_cost(mod, n, l, s)
        return flops, saved * out_element_size(node) + mask, "in"
    return None
