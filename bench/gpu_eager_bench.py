#!/usr/bin/env python3
"""A plain PyTorch eager training loop: the baseline scripts/gpu_check.sh holds
one pipeplan worker (the whole model, torch executor) against on the same GPU.

The model comes from a builder `module:function` as pipeplan_export.py takes it
(tests/models is on the path: gpt2:small is GPT-2 small with random weights,
tiny_models:gpt the tiny one); the builder is called with batch= and seq=, and
returns (module, example_inputs). The data is random tokens below the model's
vocabulary (its first nn.Embedding), next-token targets, cross-entropy. A step
is what the worker does for a batch: the batch split in order into
--microbatches, per microbatch forward, mean loss / microbatches, backward
(gradients accumulate), then AdamW and zero_grad(set_to_none) — nothing of
pipeplan. TF32 is off unless --tf32 (LibTorch's default: off too).

Prints one line of key=value pairs (or JSON with --json):
  median_step_seconds, mean_step_seconds, steps (timed, after --warmup),
  peak_memory_bytes (torch.cuda.max_memory_allocated on CUDA; 0 on CPU),
  parameters, device, torch.

  python3 bench/gpu_eager_bench.py --device cuda:0 [--model gpt2:small]
      [--batch 8] [--seq 1024] [--microbatches 4] [--steps 20] [--warmup 5]
"""

import argparse
import importlib
import json
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def build(spec, batch, seq):
    module_name, _, fn = spec.partition(":")
    if not fn:
        raise SystemExit("--model %r: use module:function, e.g. gpt2:small" % spec)
    builder = getattr(importlib.import_module(module_name), fn)
    try:
        return builder(batch=batch, seq=seq)
    except TypeError:  # builders without seq (e.g. tiny_models.gpt has seq=)
        return builder(batch=batch)


def vocabulary(module):
    for m in module.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    raise SystemExit("the model has no nn.Embedding: cannot make token data")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2:small")
    p.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.batch % args.microbatches:
        raise SystemExit("--batch %d is not a multiple of --microbatches %d"
                         % (args.batch, args.microbatches))
    return args


def make_step(args, device):
    """The model, its parameters and one training step (microbatches, then AdamW)."""
    torch.manual_seed(0)
    module, example = build(args.model, args.batch, args.seq)
    seq = example[0].shape[1]
    vocab = vocabulary(module)
    model = module.to(device).train()
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (args.batch, seq + 1), generator=g)
    inputs = tokens[:, :-1].contiguous().to(device)
    targets = tokens[:, 1:].contiguous().to(device)
    mb = args.batch // args.microbatches

    def step():
        for m in range(args.microbatches):
            x = inputs.narrow(0, m * mb, mb)
            y = targets.narrow(0, m * mb, mb)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            (loss / args.microbatches).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return params, step


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    params, step = make_step(args, device)
    for _ in range(args.warmup):
        step()
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    out = {
        "median_step_seconds": statistics.median(times) if times else 0.0,
        "mean_step_seconds": statistics.fmean(times) if times else 0.0,
        "steps": len(times),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device)
        if device.type == "cuda" else 0,
        "parameters": sum(q.numel() for q in {id(q): q for q in params}.values()),
        "device": str(device),
        "torch": torch.__version__,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(" ".join("%s=%s" % (k, v) for k, v in out.items()))
    return 0

if __name__ == "__main__":
    sys.exit(main())
