#!/usr/bin/env python3
"""Generate the example model graphs and clusters in tests/data/.

Usage:
    python3 scripts/gen_example_graphs.py            # regenerate every committed file
    python3 scripts/gen_example_graphs.py --out-dir DIR
    python3 scripts/gen_example_graphs.py --synthetic-transformer 100000 --out big.json

Python 3 standard library only; the output is deterministic (no randomness, fixed
parameters), so running it twice gives byte-identical files.

The files use the protobuf JSON mapping of pipeplan.v1.ModelGraph and
pipeplan.v1.ClusterTopology (see docs/graph-format.md). Costs are per microbatch of
`batch_size` samples: forward_flops counts 2*M*K*N for a matmul, param_bytes the
trainable parameters a node owns, output_bytes the bytes of the node's output tensor,
activation_bytes what autograd keeps alive for the backward pass, and every edge carries
the bytes of the tensor it moves.

Conventions used for activation_bytes: a tensor kept for backward is charged once, to
the node that produces it (an nn.Linear saves its input, so the node feeding three q/k/v
projections is charged its output once, not three times); a node adds whatever extra
state it saves itself (dropout masks, layernorm statistics, max-pool indices). Because
the format reads 0 as "same as output_bytes", a node that keeps nothing alive (views,
transposes, residual adds whose output nobody saves) states ACT_NONE = 1 byte.
Likewise weight_grad_fraction 0 means one half, so parameter-free nodes, whose backward
is all input gradient, state WGF_NONE = 1e-6.

Graphs written:
  gpt_1k.json          GPT decoder, hidden 2048, 16 heads, seq 2048, vocab 50257, 32 layers,
                       microbatch 1, bf16; operator granularity as torch.fx traces it
                       (q/k/v as separate parallel branches with view/transpose nodes,
                       explicit masked softmax attention), LM head tied to the token
                       embedding (same param_key). ~1,034 nodes.
  gpt_4k.json          the same generator, hidden 2560, 20 heads, seq 1024, 125 layers:
                       4,010 nodes, ~9.9B parameters (20 GB in bf16), ~24 GB of saved
                       activations per microbatch. Sized so that memory caps bind on
                       cluster_16_small_mem.json (16 x 16 GB) without making it
                       infeasible: with 1F1B and 16 microbatches an equal split puts
                       ~27 GB on the first stage (params + grads + activations), yet
                       skewed splits fit; with Adam state (optimizer_state_multiplier 6)
                       it fits only with few microbatches in flight. Hidden 4096 at this
                       depth (25B parameters) would not fit 256 GB with Adam at all.
  resnet50.json        ResNet-50 (torchvision v1.5 layout) at layer granularity, batch 32 of
                       224x224, fp32: conv/bn/relu nodes, projection shortcuts on the first
                       block of each stage, identity shortcuts elsewhere.
  inception_like.json  GoogLeNet-style network: nine modules of 4 parallel branches
                       joined by a concat, batch 32 of 224x224, fp32.
  chain_small.json     a 12-node chain (an MLP) for the README quick start and tests.
Clusters written:
  cluster_8xa100.json, cluster_2x8_h100.json, cluster_4_mixed.json,
  cluster_16_small_mem.json
"""

import argparse
import json
import math
import os
import sys

ACT_NONE = 1.0  # "saves nothing": 0 would mean output_bytes
WGF_NONE = 1e-6  # "no weight gradient": 0 would mean one half

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT_DIR = os.path.join(REPO_ROOT, "tests", "data")

# The one Python copy of the planner's graph rules.
sys.path.insert(0, os.path.join(REPO_ROOT, "client", "python"))
from pipeplan_graph_check import validate  # noqa: E402


class GraphBuilder:
    """Collects nodes and edges in topological order."""

    def __init__(self, name, batch_size, element_bytes=4):
        self.name = name
        self.batch_size = batch_size
        self.element_bytes = element_bytes
        self.nodes = []
        self.edges = []
        self._out = {}

    def add(self, node_id, op, inputs=(), forward_flops=0.0, output_bytes=0.0,
            activation_bytes=None, param_bytes=0.0, param_key="", backward_flops=0.0,
            weight_grad_fraction=None):
        """Adds a node fed by `inputs` (node ids); returns its id.

        activation_bytes None means ACT_NONE; weight_grad_fraction None means 0.5 for
        nodes with parameters and WGF_NONE for nodes without.
        """
        if node_id in self._out:
            raise ValueError("duplicate node id %r" % node_id)
        node = {"id": node_id, "op": op}
        if forward_flops:
            node["forward_flops"] = forward_flops
        if backward_flops:
            node["backward_flops"] = backward_flops
        if param_bytes:
            node["param_bytes"] = param_bytes
            node["param_key"] = param_key or node_id
        node["activation_bytes"] = ACT_NONE if activation_bytes is None else activation_bytes
        if output_bytes:
            node["output_bytes"] = output_bytes
        if weight_grad_fraction is None:
            weight_grad_fraction = 0.5 if param_bytes else WGF_NONE
        if forward_flops and weight_grad_fraction != 0.5:
            node["weight_grad_fraction"] = weight_grad_fraction
        self.nodes.append(node)
        self._out[node_id] = output_bytes
        for src in inputs:
            if src not in self._out:
                raise ValueError("%r feeds %r before it exists" % (src, node_id))
            self.edges.append({"src": src, "dst": node_id, "bytes": self._out[src]})
        return node_id

    def to_dict(self):
        out = {"name": self.name, "batch_size": self.batch_size}
        if self.element_bytes != 4:
            out["element_bytes"] = self.element_bytes
        out.update({"nodes": self.nodes, "edges": self.edges})
        return out


# ---------------------------------------------------------------------------
# GPT-style decoder
# ---------------------------------------------------------------------------

GPT_NODES_PER_LAYER = 32
GPT_EXTRA_NODES = 10  # embeddings (6) + final layernorm, LM head, targets, loss (4)


def gpt_graph(name, layers, hidden, heads, seq, vocab=50257, micro_batch=1, dtype_bytes=2):
    """A GPT decoder at the granularity torch.fx traces a nanoGPT-style model.

    Nodes per layer (32): ln_1; q/k/v projections, each followed by view + transpose
    (k also by the transpose(-2, -1) for k^T); scores matmul, scale, causal-mask
    get_attr + slice + eq + masked_fill, softmax, dropout, attention @ v, transpose,
    contiguous, view, output projection, dropout, residual add; ln_2, fc1, gelu, fc2,
    dropout, residual add.
    """
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    b, s, h, a, v = micro_batch, seq, hidden, heads, vocab
    t = b * s  # tokens per microbatch
    e = dtype_bytes
    act = t * h * e  # one (b, s, h) activation tensor
    scores = b * a * s * s  # elements of one attention score tensor
    g = GraphBuilder(name, micro_batch, element_bytes=dtype_bytes)

    # Embeddings.
    ids = g.add("input_ids", "placeholder", output_bytes=t * 8)
    pos = g.add("arange", "arange", output_bytes=s * 8)
    wte = g.add("transformer.wte", "embedding", [ids], forward_flops=t * h, output_bytes=act,
                activation_bytes=t * 8, param_bytes=v * h * e,
                param_key="transformer.wte.weight", weight_grad_fraction=1.0)
    wpe = g.add("transformer.wpe", "embedding", [pos], forward_flops=t * h,
                output_bytes=s * h * e, activation_bytes=s * 8, param_bytes=s * h * e,
                param_key="transformer.wpe.weight", weight_grad_fraction=1.0)
    x = g.add("add", "add", [wte, wpe], forward_flops=t * h, output_bytes=act)
    x = g.add("transformer.drop", "dropout", [x], forward_flops=t * h, output_bytes=act,
              activation_bytes=t * h + act)  # mask + output (saved by ln_1)

    ln_flops = 5 * t * h
    ln_params = 2 * h * e
    ln_stats = 2 * t * 4  # fp32 mean and rstd
    for i in range(layers):
        p = "transformer.h.%d." % i
        ln1 = g.add(p + "ln_1", "layer_norm", [x], forward_flops=ln_flops, output_bytes=act,
                    activation_bytes=act + ln_stats, param_bytes=ln_params,
                    weight_grad_fraction=0.2)
        heads_out = {}
        for proj in ("q", "k", "v"):
            lin = g.add(p + "attn.%s_proj" % proj, "linear", [ln1],
                        forward_flops=2 * t * h * h, output_bytes=act, activation_bytes=act,
                        param_bytes=(h * h + h) * e)
            y = g.add(p + "attn.view_%s" % proj, "view", [lin], output_bytes=act)
            y = g.add(p + "attn.transpose_%s" % proj, "transpose", [y], output_bytes=act)
            heads_out[proj] = y
        kt = g.add(p + "attn.transpose_kt", "transpose", [heads_out["k"]], output_bytes=act)
        sc = g.add(p + "attn.matmul_qk", "matmul", [heads_out["q"], kt],
                   forward_flops=2 * b * a * s * s * (h // a), output_bytes=scores * e)
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
        dr = g.add(p + "attn.attn_dropout", "dropout", [sm], forward_flops=scores,
                   output_bytes=scores * e, activation_bytes=scores + scores * e)
        av = g.add(p + "attn.matmul_av", "matmul", [dr, heads_out["v"]],
                   forward_flops=2 * b * a * s * s * (h // a), output_bytes=act)
        y = g.add(p + "attn.transpose_out", "transpose", [av], output_bytes=act)
        y = g.add(p + "attn.contiguous", "contiguous", [y], output_bytes=act,
                  activation_bytes=act)  # saved by c_proj
        y = g.add(p + "attn.view_out", "view", [y], output_bytes=act)
        y = g.add(p + "attn.c_proj", "linear", [y], forward_flops=2 * t * h * h,
                  output_bytes=act, param_bytes=(h * h + h) * e)
        y = g.add(p + "attn.resid_dropout", "dropout", [y], forward_flops=t * h,
                  output_bytes=act, activation_bytes=t * h)
        x = g.add(p + "add", "add", [x, y], forward_flops=t * h, output_bytes=act,
                  activation_bytes=act)  # saved by ln_2
        ln2 = g.add(p + "ln_2", "layer_norm", [x], forward_flops=ln_flops, output_bytes=act,
                    activation_bytes=act + ln_stats, param_bytes=ln_params,
                    weight_grad_fraction=0.2)
        y = g.add(p + "mlp.c_fc", "linear", [ln2], forward_flops=2 * t * h * 4 * h,
                  output_bytes=4 * act, activation_bytes=4 * act, param_bytes=(4 * h * h + 4 * h) * e)
        y = g.add(p + "mlp.gelu", "gelu", [y], forward_flops=8 * t * 4 * h,
                  output_bytes=4 * act, activation_bytes=4 * act)
        y = g.add(p + "mlp.c_proj", "linear", [y], forward_flops=2 * t * 4 * h * h,
                  output_bytes=act, param_bytes=(4 * h * h + h) * e)
        y = g.add(p + "mlp.dropout", "dropout", [y], forward_flops=t * h, output_bytes=act,
                  activation_bytes=t * h)
        x = g.add(p + "add_1", "add", [x, y], forward_flops=t * h, output_bytes=act,
                  activation_bytes=act)  # saved by the next layernorm

    x = g.add("transformer.ln_f", "layer_norm", [x], forward_flops=ln_flops, output_bytes=act,
              activation_bytes=act + ln_stats, param_bytes=ln_params, weight_grad_fraction=0.2)
    logits = g.add("lm_head", "linear", [x], forward_flops=2 * t * h * v, output_bytes=t * v * e,
                   param_bytes=v * h * e, param_key="transformer.wte.weight")
    tgt = g.add("targets", "placeholder", output_bytes=t * 8)
    # cross_entropy: log_softmax (saves its fp32 output) + nll_loss.
    g.add("cross_entropy", "cross_entropy", [logits, tgt], forward_flops=5 * t * v,
          output_bytes=4, activation_bytes=t * v * 4)
    expected = layers * GPT_NODES_PER_LAYER + GPT_EXTRA_NODES
    assert len(g.nodes) == expected, (len(g.nodes), expected)
    return g.to_dict()


def synthetic_transformer(nodes, hidden=2048, heads=16, seq=2048, name=None):
    """A GPT graph of about `nodes` nodes (the same structure as gpt_1k)."""
    layers = max(1, int(round((nodes - GPT_EXTRA_NODES) / float(GPT_NODES_PER_LAYER))))
    return gpt_graph(name or "synthetic_transformer_%d" % nodes, layers=layers,
                     hidden=hidden, heads=heads, seq=seq)


# ---------------------------------------------------------------------------
# CNNs (fp32, NCHW)
# ---------------------------------------------------------------------------

class CnnBuilder:
    """Layer-granularity CNN nodes with shapes tracked per node."""

    def __init__(self, name, batch, image=224, dtype_bytes=4):
        self.g = GraphBuilder(name, batch, element_bytes=dtype_bytes)
        self.n = batch
        self.e = dtype_bytes
        self.shape = {}  # id -> (C, H, W)
        x = self.g.add("x", "placeholder", output_bytes=self._bytes((3, image, image)))
        self.shape[x] = (3, image, image)
        self.input = x

    def _bytes(self, chw):
        c, h, w = chw
        return self.n * c * h * w * self.e

    def _numel(self, chw):
        c, h, w = chw
        return self.n * c * h * w

    def conv(self, node_id, src, cout, k, stride=1, pad=None, saved_output=True):
        cin, hi, wi = self.shape[src]
        pad = k // 2 if pad is None else pad
        ho = (hi + 2 * pad - k) // stride + 1
        wo = (wi + 2 * pad - k) // stride + 1
        out = (cout, ho, wo)
        self.g.add(node_id, "conv2d", [src], forward_flops=2.0 * cin * k * k * self._numel(out),
                   output_bytes=self._bytes(out),
                   activation_bytes=self._bytes(out) if saved_output else None,
                   param_bytes=cin * cout * k * k * self.e)  # no bias (followed by BN)
        self.shape[node_id] = out
        return node_id

    def bn(self, node_id, src):
        c = self.shape[src][0]
        # BN saves its input (charged to the conv) plus per-channel mean/invstd; its own
        # output is overwritten by the in-place ReLU or consumed by an add.
        self.g.add(node_id, "batch_norm", [src], forward_flops=4.0 * self._numel(self.shape[src]),
                   output_bytes=self._bytes(self.shape[src]), activation_bytes=2 * c * 4,
                   param_bytes=2 * c * self.e, weight_grad_fraction=0.25)
        self.shape[node_id] = self.shape[src]
        return node_id

    def relu(self, node_id, src):
        shape = self.shape[src]
        self.g.add(node_id, "relu", [src], forward_flops=self._numel(shape),
                   output_bytes=self._bytes(shape), activation_bytes=self._bytes(shape))
        self.shape[node_id] = shape
        return node_id

    def conv_bn_relu(self, prefix, src, cout, k, stride=1, pad=None):
        x = self.conv(prefix + "conv", src, cout, k, stride, pad)
        x = self.bn(prefix + "bn", x)
        return self.relu(prefix + "relu", x)

    def pool(self, node_id, src, k, stride, pad, op="max_pool2d", ceil=False):
        c, hi, wi = self.shape[src]
        rnd = math.ceil if ceil else math.floor
        ho = int(rnd((hi + 2 * pad - k) / float(stride))) + 1
        wo = int(rnd((wi + 2 * pad - k) / float(stride))) + 1
        out = (c, ho, wo)
        indices = self._numel(out) * 8 if op == "max_pool2d" else None  # int64 argmax
        self.g.add(node_id, op, [src], forward_flops=k * k * self._numel(out),
                   output_bytes=self._bytes(out), activation_bytes=indices)
        self.shape[node_id] = out
        return node_id

    def add(self, node_id, a, b):
        shape = self.shape[a]
        assert shape == self.shape[b], (node_id, shape, self.shape[b])
        self.g.add(node_id, "add", [a, b], forward_flops=self._numel(shape),
                   output_bytes=self._bytes(shape))
        self.shape[node_id] = shape
        return node_id

    def cat(self, node_id, srcs):
        c = sum(self.shape[s][0] for s in srcs)
        _, h, w = self.shape[srcs[0]]
        out = (c, h, w)
        self.g.add(node_id, "cat", srcs, output_bytes=self._bytes(out))
        self.shape[node_id] = out
        return node_id

    def head(self, src, classes=1000, dropout=False):
        c, h, w = self.shape[src]
        feat = self.n * c * self.e
        self.g.add("avgpool", "adaptive_avg_pool2d", [src], forward_flops=self._numel((c, h, w)),
                   output_bytes=feat, activation_bytes=feat)  # saved by fc
        x = self.g.add("flatten", "flatten", ["avgpool"], output_bytes=feat)
        if dropout:
            x = self.g.add("dropout", "dropout", [x], forward_flops=self.n * c, output_bytes=feat,
                           activation_bytes=self.n * c + feat)
        logits = self.n * classes * self.e
        self.g.add("fc", "linear", [x], forward_flops=2.0 * self.n * c * classes,
                   output_bytes=logits, param_bytes=(c * classes + classes) * self.e)
        self.g.add("targets", "placeholder", output_bytes=self.n * 8)
        self.g.add("cross_entropy", "cross_entropy", ["fc", "targets"],
                   forward_flops=5.0 * self.n * classes, output_bytes=4, activation_bytes=logits)


def resnet50_graph(batch=32):
    c = CnnBuilder("resnet50", batch)
    x = c.conv("conv1", c.input, 64, 7, stride=2, pad=3)
    x = c.bn("bn1", x)
    x = c.relu("relu", x)
    x = c.pool("maxpool", x, 3, 2, 1)
    cin = 64
    for stage, (blocks, width, stride) in enumerate(
            [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], start=1):
        for blk in range(blocks):
            p = "layer%d.%d." % (stage, blk)
            s = stride if blk == 0 else 1
            identity = x
            y = c.conv(p + "conv1", x, width, 1)
            y = c.bn(p + "bn1", y)
            y = c.relu(p + "relu1", y)
            y = c.conv(p + "conv2", y, width, 3, stride=s)  # v1.5: stride on the 3x3
            y = c.bn(p + "bn2", y)
            y = c.relu(p + "relu2", y)
            y = c.conv(p + "conv3", y, width * 4, 1)
            y = c.bn(p + "bn3", y)
            if blk == 0:
                identity = c.conv(p + "downsample.0", x, width * 4, 1, stride=s)
                identity = c.bn(p + "downsample.1", identity)
            y = c.add(p + "add", y, identity)
            x = c.relu(p + "relu3", y)
        cin = width * 4
    assert cin == 2048
    c.head(x)
    return c.g.to_dict()


def deep_resnet_graph(blocks=(3, 16, 72, 3), batch=32, name="cnn_1k"):
    """A bottleneck ResNet deeper than ResNet-152 (about 1K nodes by default)."""
    c = CnnBuilder(name, batch)
    x = c.conv("conv1", c.input, 64, 7, stride=2, pad=3)
    x = c.relu("relu", c.bn("bn1", x))
    x = c.pool("maxpool", x, 3, 2, 1)
    for stage, (count, width, stride) in enumerate(
            zip(blocks, (64, 128, 256, 512), (1, 2, 2, 2)), start=1):
        for blk in range(count):
            p = "layer%d.%d." % (stage, blk)
            s = stride if blk == 0 else 1
            identity = x
            y = c.relu(p + "relu1", c.bn(p + "bn1", c.conv(p + "conv1", x, width, 1)))
            y = c.relu(p + "relu2", c.bn(p + "bn2", c.conv(p + "conv2", y, width, 3, stride=s)))
            y = c.bn(p + "bn3", c.conv(p + "conv3", y, width * 4, 1))
            if blk == 0:
                identity = c.bn(p + "downsample.1",
                                c.conv(p + "downsample.0", x, width * 4, 1, stride=s))
            x = c.relu(p + "relu3", c.add(p + "add", y, identity))
    c.head(x)
    return c.g.to_dict()


def inception_like_graph(batch=32):
    """GoogLeNet layout (torchvision's, 3x3 in the third branch), no aux heads."""
    c = CnnBuilder("inception_like", batch)
    x = c.conv_bn_relu("conv1.", c.input, 64, 7, stride=2, pad=3)
    x = c.pool("maxpool1", x, 3, 2, 0, ceil=True)
    x = c.conv_bn_relu("conv2.", x, 64, 1)
    x = c.conv_bn_relu("conv3.", x, 192, 3)
    x = c.pool("maxpool2", x, 3, 2, 0, ceil=True)
    modules = [
        ("inception3a", 64, 96, 128, 16, 32, 32),
        ("inception3b", 128, 128, 192, 32, 96, 64),
        "maxpool3",
        ("inception4a", 192, 96, 208, 16, 48, 64),
        ("inception4b", 160, 112, 224, 24, 64, 64),
        ("inception4c", 128, 128, 256, 24, 64, 64),
        ("inception4d", 112, 144, 288, 32, 64, 64),
        ("inception4e", 256, 160, 320, 32, 128, 128),
        "maxpool4",
        ("inception5a", 256, 160, 320, 32, 128, 128),
        ("inception5b", 384, 192, 384, 48, 128, 128),
    ]
    for m in modules:
        if isinstance(m, str):
            k = 3 if m == "maxpool3" else 2
            x = c.pool(m, x, k, 2, 0, ceil=True)
            continue
        name, c1, c3r, c3, c5r, c5, pp = m
        p = name + "."
        b1 = c.conv_bn_relu(p + "branch1.", x, c1, 1)
        b2 = c.conv_bn_relu(p + "branch2.0.", x, c3r, 1)
        b2 = c.conv_bn_relu(p + "branch2.1.", b2, c3, 3)
        b3 = c.conv_bn_relu(p + "branch3.0.", x, c5r, 1)
        b3 = c.conv_bn_relu(p + "branch3.1.", b3, c5, 3)
        b4 = c.pool(p + "branch4.0", x, 3, 1, 1, ceil=True)
        b4 = c.conv_bn_relu(p + "branch4.1.", b4, pp, 1)
        x = c.cat(p + "cat", [b1, b2, b3, b4])
    c.head(x, dropout=True)
    return c.g.to_dict()


def chain_small_graph():
    """A 12-node MLP chain: input, 5 x (linear, gelu), loss. Batch 64, bf16."""
    n, e = 64, 2
    widths = [4096, 8192, 8192, 16384, 8192, 4096]
    g = GraphBuilder("chain_small", n, element_bytes=e)
    x = g.add("input", "placeholder", output_bytes=n * widths[0] * e)
    for i in range(5):
        k, m = widths[i], widths[i + 1]
        x = g.add("fc%d" % i, "linear", [x], forward_flops=2.0 * n * k * m, output_bytes=n * m * e,
                  activation_bytes=n * m * e, param_bytes=(k * m + m) * e)
        x = g.add("gelu%d" % i, "gelu", [x], forward_flops=8.0 * n * m, output_bytes=n * m * e,
                  activation_bytes=n * m * e)
    g.add("loss", "mse_loss", [x], forward_flops=3.0 * n * widths[-1], output_bytes=4)
    assert len(g.nodes) == 12
    return g.to_dict()


# ---------------------------------------------------------------------------
# Clusters
# ---------------------------------------------------------------------------

def cluster_8xa100():
    return {"devices": [{"id": "gpu%d" % i, "host": "host0", "flops": 1.5e14,
                         "memory_bytes": 80e9} for i in range(8)],
            "intra_host_bandwidth": 1.5e11}


def cluster_2x8_h100():
    return {"devices": [{"id": "node%d-gpu%d" % (h, i), "host": "node%d" % h, "flops": 4e14,
                         "memory_bytes": 80e9} for h in range(2) for i in range(8)],
            "intra_host_bandwidth": 3e11, "inter_host_bandwidth": 2.5e10}


def cluster_4_mixed():
    """Two hosts, four devices of different speed and memory, one explicit PCIe link."""
    return {"devices": [
        {"id": "a100-80g", "host": "hostA", "flops": 1.5e14, "memory_bytes": 80e9},
        {"id": "a100-40g", "host": "hostA", "flops": 1.5e14, "memory_bytes": 40e9},
        {"id": "l40s", "host": "hostB", "flops": 9e13, "memory_bytes": 48e9},
        {"id": "a10", "host": "hostB", "flops": 4e13, "memory_bytes": 24e9}],
        "links": [{"src": "l40s", "dst": "a10", "bandwidth_bytes_per_second": 2.5e10,
                   "latency_seconds": 1e-5}],
        "intra_host_bandwidth": 2e11, "inter_host_bandwidth": 1.25e10,
        "intra_host_latency": 5e-6, "inter_host_latency": 2e-5}


def cluster_8x8_h100():
    """64 H100s on 8 hosts: the planner's scale benchmark (bench/search_bench.cc)."""
    return {"devices": [{"id": "node%d-gpu%d" % (h, i), "host": "node%d" % h, "flops": 4e14,
                         "memory_bytes": 80e9} for h in range(8) for i in range(8)],
            "intra_host_bandwidth": 3e11, "inter_host_bandwidth": 2.5e10}


def bench_files():
    """Inputs of bench/search_bench.cc, generated on demand (not committed)."""
    return [
        ("gpt2_xl.json", lambda: gpt_graph("gpt2_xl", layers=48, hidden=1600, heads=25, seq=1024)),
        ("cnn_1k.json", deep_resnet_graph),
        ("cluster_8x8_h100.json", cluster_8x8_h100),
    ]


def cluster_16_small_mem():
    return {"devices": [{"id": "node%d-gpu%d" % (h, i), "host": "node%d" % h, "flops": 1e14,
                         "memory_bytes": 16e9} for h in range(2) for i in range(8)],
            "intra_host_bandwidth": 1.5e11, "inter_host_bandwidth": 1.25e10}


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

def _num(x):
    if isinstance(x, float) and x.is_integer() and abs(x) < 2 ** 53:
        return int(x)
    return x


def _compact(obj):
    if isinstance(obj, dict):
        return {k: _compact(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_compact(v) for v in obj]
    return _num(obj)


def dumps(obj):
    """Compact JSON with one node / edge / device per line (small and diffable)."""
    obj = _compact(obj)
    lines = ["{"]
    items = list(obj.items())
    for i, (key, value) in enumerate(items):
        sep = "," if i + 1 < len(items) else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(" %s:[" % json.dumps(key))
            for j, item in enumerate(value):
                lines.append("  " + json.dumps(item, separators=(",", ":"), sort_keys=False)
                             + ("," if j + 1 < len(value) else ""))
            lines.append(" ]" + sep)
        else:
            lines.append(" %s:%s%s" % (json.dumps(key), json.dumps(value), sep))
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(path, obj):
    if "nodes" in obj:
        validate(obj)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(obj))
    os.replace(tmp, path)


def graph_summary(graph):
    fwd = sum(n.get("forward_flops", 0) for n in graph["nodes"])
    params = {}
    for n in graph["nodes"]:
        if n.get("param_bytes"):
            key = n.get("param_key") or n["id"]
            params[key] = max(params.get(key, 0), n["param_bytes"])
    return "%d nodes, %d edges, %.3g fwd flops, %.3g param bytes" % (
        len(graph["nodes"]), len(graph["edges"]), fwd, sum(params.values()))


def all_files():
    return [
        ("gpt_1k.json", lambda: gpt_graph("gpt_1k", layers=32, hidden=2048, heads=16, seq=2048)),
        ("gpt_4k.json", lambda: gpt_graph("gpt_4k", layers=125, hidden=2560, heads=20, seq=1024)),
        ("resnet50.json", resnet50_graph),
        ("inception_like.json", inception_like_graph),
        ("chain_small.json", chain_small_graph),
        ("cluster_8xa100.json", cluster_8xa100),
        ("cluster_2x8_h100.json", cluster_2x8_h100),
        ("cluster_4_mixed.json", cluster_4_mixed),
        ("cluster_16_small_mem.json", cluster_16_small_mem),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR,
                        help="where to write the committed examples (default tests/data)")
    parser.add_argument("--synthetic-transformer", type=int, metavar="NODES",
                        help="write only a synthetic transformer of about NODES nodes to --out")
    parser.add_argument("--hidden", type=int, default=2048,
                        help="hidden size of --synthetic-transformer (default 2048)")
    parser.add_argument("--out", help="output file of --synthetic-transformer")
    parser.add_argument("--bench-dir", help="write only the search benchmark's inputs "
                        "(GPT-2-XL-like graph, 1K-node CNN, 64-device cluster) to this directory")
    args = parser.parse_args(argv)

    if args.bench_dir:
        os.makedirs(args.bench_dir, exist_ok=True)
        for filename, make in bench_files():
            write(os.path.join(args.bench_dir, filename), make())
        return 0

    if args.synthetic_transformer is not None:
        if not args.out:
            parser.error("--synthetic-transformer needs --out FILE")
        if args.synthetic_transformer < 1:
            parser.error("NODES must be positive")
        heads = max(1, args.hidden // 128)
        graph = synthetic_transformer(args.synthetic_transformer, hidden=args.hidden, heads=heads)
        write(args.out, graph)
        print("%s: %s" % (args.out, graph_summary(graph)))
        return 0

    os.makedirs(args.out_dir, exist_ok=True)
    for filename, make in all_files():
        obj = make()
        path = os.path.join(args.out_dir, filename)
        write(path, obj)
        if "nodes" in obj:
            print("%s: %s" % (filename, graph_summary(obj)))
        else:
            print("%s: %d devices" % (filename, len(obj["devices"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
