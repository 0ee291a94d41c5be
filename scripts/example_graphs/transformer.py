"""The GPT decoder graph (gpt_1k, gpt_4k, gpt2_xl) and the synthetic transformer.

Operator granularity is what torch.fx traces for a nanoGPT-style model: q/k/v as
separate parallel branches with view/transpose nodes, explicit masked softmax
attention, and the LM head tied to the token embedding (same param_key). Each block
of the model (embeddings, attention, MLP, head and loss) is its own helper; they add
nodes in the order the trace has them, which the committed files depend on.
"""

from .builder import GraphBuilder

GPT_NODES_PER_LAYER = 32
GPT_EXTRA_NODES = 10  # embeddings (6) + final layernorm, LM head, targets, loss (4)


class GptDims:
    """Sizes of one microbatch, and the per-tensor byte counts derived from them."""

    def __init__(self, hidden, heads, seq, vocab, micro_batch, dtype_bytes):
        if hidden % heads:
            raise ValueError("hidden must be a multiple of heads")
        self.b, self.s, self.h, self.a, self.v = micro_batch, seq, hidden, heads, vocab
        self.t = micro_batch * seq  # tokens per microbatch
        self.e = dtype_bytes
        self.act = self.t * hidden * dtype_bytes  # one (b, s, h) activation tensor
        self.scores = micro_batch * heads * seq * seq  # elements of one score tensor
        self.ln_flops = 5 * self.t * hidden
        self.ln_params = 2 * hidden * dtype_bytes
        self.ln_stats = 2 * self.t * 4  # fp32 mean and rstd


def _embeddings(g, d):
    """Token + position embeddings and dropout; returns the residual stream's start."""
    t, h, s, e, act = d.t, d.h, d.s, d.e, d.act
    ids = g.add("input_ids", "placeholder", output_bytes=t * 8)
    pos = g.add("arange", "arange", output_bytes=s * 8)
    wte = g.add("transformer.wte", "embedding", [ids], forward_flops=t * h, output_bytes=act,
                activation_bytes=t * 8, param_bytes=d.v * h * e,
                param_key="transformer.wte.weight", weight_grad_fraction=1.0)
    wpe = g.add("transformer.wpe", "embedding", [pos], forward_flops=t * h,
                output_bytes=s * h * e, activation_bytes=s * 8, param_bytes=s * h * e,
                param_key="transformer.wpe.weight", weight_grad_fraction=1.0)
    x = g.add("add", "add", [wte, wpe], forward_flops=t * h, output_bytes=act)
    return g.add("transformer.drop", "dropout", [x], forward_flops=t * h, output_bytes=act,
                 activation_bytes=t * h + act)  # mask + output (saved by ln_1)


def _layer_norm(g, d, node_id, x):
    # Saves its input plus fp32 statistics, hence act + ln_stats.
    return g.add(node_id, "layer_norm", [x], forward_flops=d.ln_flops, output_bytes=d.act,
                 activation_bytes=d.act + d.ln_stats, param_bytes=d.ln_params,
                 weight_grad_fraction=0.2)


def _qkv(g, d, p, ln1):
    """The q, k and v projections, each viewed and transposed into heads."""
    h, act = d.h, d.act
    heads_out = {}
    for proj in ("q", "k", "v"):
        lin = g.add(p + "attn.%s_proj" % proj, "linear", [ln1],
                    forward_flops=2 * d.t * h * h, output_bytes=act, activation_bytes=act,
                    param_bytes=(h * h + h) * d.e)
        y = g.add(p + "attn.view_%s" % proj, "view", [lin], output_bytes=act)
        y = g.add(p + "attn.transpose_%s" % proj, "transpose", [y], output_bytes=act)
        heads_out[proj] = y
    return heads_out


def _attention_probs(g, d, p, q, k):
    """q @ k^T, scaled, causally masked, softmaxed and dropped out."""
    s, e, scores = d.s, d.e, d.scores
    kt = g.add(p + "attn.transpose_kt", "transpose", [k], output_bytes=d.act)
    sc = g.add(p + "attn.matmul_qk", "matmul", [q, kt],
               forward_flops=2 * d.b * d.a * s * s * (d.h // d.a), output_bytes=scores * e)
    sc = g.add(p + "attn.mul_scale", "mul", [sc], forward_flops=scores,
               output_bytes=scores * e)
    mask = g.add(p + "attn.bias", "get_attr", output_bytes=s * s)
    mask = g.add(p + "attn.getitem_mask", "getitem", [mask], output_bytes=s * s)
    mask = g.add(p + "attn.eq_mask", "eq", [mask], forward_flops=s * s, output_bytes=s * s,
                 activation_bytes=s * s)  # saved by masked_fill
    sc = g.add(p + "attn.masked_fill", "masked_fill", [sc, mask], forward_flops=scores,
               output_bytes=scores * e)
    sm = g.add(p + "attn.softmax", "softmax", [sc], forward_flops=5 * scores,
               output_bytes=scores * e, activation_bytes=scores * e)
    return g.add(p + "attn.attn_dropout", "dropout", [sm], forward_flops=scores,
                 output_bytes=scores * e, activation_bytes=scores + scores * e)


def _attention(g, d, p, ln1):
    """Self-attention up to its residual dropout; returns the branch to add back."""
    h, t, act = d.h, d.t, d.act
    heads_out = _qkv(g, d, p, ln1)
    probs = _attention_probs(g, d, p, heads_out["q"], heads_out["k"])
    av = g.add(p + "attn.matmul_av", "matmul", [probs, heads_out["v"]],
               forward_flops=2 * d.b * d.a * d.s * d.s * (h // d.a), output_bytes=act)
    y = g.add(p + "attn.transpose_out", "transpose", [av], output_bytes=act)
    y = g.add(p + "attn.contiguous", "contiguous", [y], output_bytes=act,
              activation_bytes=act)  # saved by c_proj
    y = g.add(p + "attn.view_out", "view", [y], output_bytes=act)
    y = g.add(p + "attn.c_proj", "linear", [y], forward_flops=2 * t * h * h,
              output_bytes=act, param_bytes=(h * h + h) * d.e)
    return g.add(p + "attn.resid_dropout", "dropout", [y], forward_flops=t * h,
                 output_bytes=act, activation_bytes=t * h)


def _mlp(g, d, p, ln2):
    """fc (4x wider), gelu, projection back, dropout; returns the branch to add back."""
    h, t, e, act = d.h, d.t, d.e, d.act
    y = g.add(p + "mlp.c_fc", "linear", [ln2], forward_flops=2 * t * h * 4 * h,
              output_bytes=4 * act, activation_bytes=4 * act, param_bytes=(4 * h * h + 4 * h) * e)
    y = g.add(p + "mlp.gelu", "gelu", [y], forward_flops=8 * t * 4 * h,
              output_bytes=4 * act, activation_bytes=4 * act)
    y = g.add(p + "mlp.c_proj", "linear", [y], forward_flops=2 * t * 4 * h * h,
              output_bytes=act, param_bytes=(4 * h * h + h) * e)
    return g.add(p + "mlp.dropout", "dropout", [y], forward_flops=t * h, output_bytes=act,
                 activation_bytes=t * h)


def _decoder_layer(g, d, i, x):
    """One pre-norm block: x + attn(ln_1(x)), then + mlp(ln_2(x)); 32 nodes."""
    p = "transformer.h.%d." % i
    th, act = d.t * d.h, d.act
    y = _attention(g, d, p, _layer_norm(g, d, p + "ln_1", x))
    x = g.add(p + "add", "add", [x, y], forward_flops=th, output_bytes=act,
              activation_bytes=act)  # saved by ln_2
    y = _mlp(g, d, p, _layer_norm(g, d, p + "ln_2", x))
    return g.add(p + "add_1", "add", [x, y], forward_flops=th, output_bytes=act,
                 activation_bytes=act)  # saved by the next layernorm


def _head_and_loss(g, d, x):
    """Final layernorm, the tied LM head, targets and cross-entropy loss."""
    t, h, v, e = d.t, d.h, d.v, d.e
    x = _layer_norm(g, d, "transformer.ln_f", x)
    logits = g.add("lm_head", "linear", [x], forward_flops=2 * t * h * v, output_bytes=t * v * e,
                   param_bytes=v * h * e, param_key="transformer.wte.weight")
    tgt = g.add("targets", "placeholder", output_bytes=t * 8)
    # cross_entropy: log_softmax (saves its fp32 output) + nll_loss.
    g.add("cross_entropy", "cross_entropy", [logits, tgt], forward_flops=5 * t * v,
          output_bytes=4, activation_bytes=t * v * 4)


def gpt_graph(name, layers, hidden, heads, seq, vocab=50257, micro_batch=1, dtype_bytes=2):
    """A GPT decoder at the granularity torch.fx traces a nanoGPT-style model.

    Nodes per layer (32): ln_1; q/k/v projections, each followed by view + transpose
    (k also by the transpose(-2, -1) for k^T); scores matmul, scale, causal-mask
    get_attr + slice + eq + masked_fill, softmax, dropout, attention @ v, transpose,
    contiguous, view, output projection, dropout, residual add; ln_2, fc1, gelu, fc2,
    dropout, residual add.
    """
    d = GptDims(hidden, heads, seq, vocab, micro_batch, dtype_bytes)
    g = GraphBuilder(name, micro_batch, element_bytes=dtype_bytes)
    x = _embeddings(g, d)
    for i in range(layers):
        x = _decoder_layer(g, d, i, x)
    _head_and_loss(g, d, x)
    expected = layers * GPT_NODES_PER_LAYER + GPT_EXTRA_NODES
    assert len(g.nodes) == expected, (len(g.nodes), expected)
    return g.to_dict()


def synthetic_transformer(nodes, hidden=2048, heads=16, seq=2048, name=None):
    """A GPT graph of about `nodes` nodes (the same structure as gpt_1k)."""
    layers = max(1, int(round((nodes - GPT_EXTRA_NODES) / float(GPT_NODES_PER_LAYER))))
    return gpt_graph(name or "synthetic_transformer_%d" % nodes, layers=layers,
                     hidden=hidden, heads=heads, seq=seq)
