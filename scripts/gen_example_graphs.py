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

This file is the command: which files are written and the flags. The generators live
in the example_graphs package beside it (scripts/example_graphs/).

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
import os
import sys

# Resolve the package beside this file, whatever the caller's working directory.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from example_graphs.chain import chain_small_graph  # noqa: E402
from example_graphs.clusters import (  # noqa: E402
    cluster_2x8_h100, cluster_4_mixed, cluster_8x8_h100, cluster_8xa100, cluster_16_small_mem)
from example_graphs.cnn import (  # noqa: E402
    deep_resnet_graph, inception_like_graph, resnet50_graph)
from example_graphs.json_out import graph_summary, write  # noqa: E402
from example_graphs.transformer import gpt_graph, synthetic_transformer  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT_DIR = os.path.join(REPO_ROOT, "tests", "data")


def all_files():
    """The committed files of tests/data/, in the order they are written."""
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


def bench_files():
    """Inputs of bench/search_bench.cc, generated on demand (not committed)."""
    return [
        ("gpt2_xl.json", lambda: gpt_graph("gpt2_xl", layers=48, hidden=1600, heads=25, seq=1024)),
        ("cnn_1k.json", deep_resnet_graph),
        ("cluster_8x8_h100.json", cluster_8x8_h100),
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
