#!/usr/bin/env python3
"""Train a model package in one process, as a pipelined job would: the oracle of the
exactness tests (docs/model-package.md).

  /usr/bin/python3 client/python/pipeplan_reference_train.py --package model.ptpkg \\
      --data tensors:train.pt --optimizer adamw --lr 3e-4 --batch-size 32 \\
      --microbatches 4 --steps 100 --out losses.json

Step s takes the rows of step s (pipeplan_data), splits them in order into the
microbatches and, per microbatch, runs the model, takes the mean loss divided by the
number of microbatches and calls backward, accumulating gradients: what the
pipeline's stages do, in the same order (so the per-microbatch rounding matches a
pipelined run better than one full-batch backward would). The step's loss is the sum
of those terms (the batch's mean loss). Then the optional global-norm clipping over
every parameter (a tied one once) and the optimizer step. Parameters start from the
package's params.pt; `--dtype float64` converts parameters, buffers and floating
inputs. `--device cuda:0` trains on that device (TF32 off, deterministic
algorithms on: the oracle of a GPU job, scripts/gpu_check.sh); default cpu.

`--pipelined` does the arithmetic of a pipelined job bit for bit, where the
default rounds as one process does: each use of a tied parameter (each module that
holds it, e.g. a GPT's token embedding and LM head) accumulates its own gradient
over the microbatches and the uses' sums are added after the last microbatch, as
the ranks that hold the uses apart do (worker_daemon's SumTiedGradients); and the
step's loss is the float64 sum of the microbatches' float32 terms, as the last
stage reports it. It matches any plan of two or more stages that puts the uses on
different ranks (a chain's first and last layer always are); with two uses the
order of the sum does not matter. A long float32 run drifts from the default
reference by up to a few 1e-3 on ill-conditioned batches (docs/elastic.md,
"Which losses differ, and why"); with `--pipelined` it agrees exactly.

Writes a JSON list of {"step": s, "loss": x}, one per step, atomically. Exit status
0; 2 bad input (the message names the flag, package or data file); 1 a non-finite
loss (the steps before it are written).
"""

import argparse
import json
import math
import os
import sys
import tempfile

import torch

import pipeplan_data
from pipeplan import loss as pipeplan_loss
from pipeplan import rng
from pipeplan.export import package as pp

OPTIMIZERS = ("sgd", "adam", "adamw")


class TrainError(ValueError):
    """Bad arguments; the message names the flag."""


def make_optimizer(params, name, lr, weight_decay=None, momentum=0.0):
    """torch.optim's SGD (momentum 0 unless given), Adam or AdamW (betas 0.9/0.999,
    eps 1e-8); weight decay defaults to 0, for AdamW to 0.01, as in PyTorch."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum,
                               weight_decay=weight_decay or 0.0)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=weight_decay or 0.0)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                 weight_decay=0.01 if weight_decay is None else weight_decay)
    raise TrainError("--optimizer %r: use one of %s" % (name, ", ".join(OPTIMIZERS)))


def prepare_model(package, dtype=torch.float32):
    """The package's module with params.pt's values, in training mode, in `dtype`;
    with random operators, each seeded as the pipelined stages seed it
    (pipeplan.rng)."""
    model = package.module
    with torch.no_grad():
        for name, p in pp.canonical_parameters(model):
            p.copy_(package.params[name])
    model.train()
    if any(rng.is_random(model, n) for n in model.graph.nodes):
        model = rng.seed_before_random(model)
    return model.to(dtype)


def untie(model):
    """Gives each module that holds a tied parameter after the first its own leaf
    of the same value (the --pipelined mode); returns [(parameter, [its copies])],
    the copies in named_modules() order."""
    first, tied = {}, {}
    for _, module in model.named_modules(remove_duplicate=False):
        for name, p in list(module._parameters.items()):
            if p is None or not p.requires_grad:
                continue
            if id(p) not in first:
                first[id(p)] = p
                continue
            copy = torch.nn.Parameter(p.detach().clone())
            module._parameters[name] = copy
            entry = tied.setdefault(id(p), (p, [], []))
            entry[1].append(copy)
            entry[2].append((module, name))
    return list(tied.values())


def place_tied(tied, together):
    """Points each use of a tied parameter at the parameter itself when its name is
    in `together` (a step whose plan has all its uses on one stage, where autograd
    adds them per microbatch as in one process), else at the use's own copy."""
    for p, copies, slots in tied:
        one = id(p) in together
        for copy, (module, name) in zip(copies, slots):
            module._parameters[name] = p if one else copy


def read_together(path, model):
    """[(first step, last step, {id of parameter})] from --together's JSON:
    [{"from_step", "to_step", "parameters": [canonical names]}]."""
    if path is None:
        return []
    by_name = dict(pp.canonical_parameters(model))
    try:
        with open(path) as f:
            ranges = json.load(f)
    except (OSError, ValueError) as e:
        raise TrainError("--together %s: %s" % (path, e))
    try:
        return [(int(r["from_step"]), int(r["to_step"]),
                 {id(by_name[n]) for n in r["parameters"]}) for r in ranges]
    except (KeyError, TypeError, ValueError) as e:
        raise TrainError("--together %s: %r" % (path, e))


def together_at(ranges, step):
    for first, last, ids in ranges:
        if first <= step <= last:
            return ids
    return set()


def sum_tied_gradients(tied):
    """Each tied parameter's gradient: its uses' accumulated gradients added in
    order (a rank's sum of its microbatches per use, then the sum over ranks)."""
    for p, copies, _ in tied:
        total = p.grad.clone() if p.grad is not None else torch.zeros_like(p)
        for copy in copies:
            if copy.grad is not None:
                total.add_(copy.grad)
            copy.grad = None
        p.grad = total


def refresh_tied(tied):
    """The copies take their parameter's value after the optimizer's step."""
    with torch.no_grad():
        for p, copies, _ in tied:
            for copy in copies:
                copy.copy_(p)


def train_step(model, params, optimizer, loss, inputs, targets, microbatches,
               clip_grad_norm=None, seed=0, step=0, tied=None):
    """One step on a batch; returns the batch's mean loss (a 0-dim tensor).
    Random operators draw from (seed, step, microbatch) as in a pipelined job.
    `tied` (from untie): the --pipelined mode's gradient sums and float64 loss."""
    optimizer.zero_grad(set_to_none=True)
    total = None
    batches = pipeplan_data.microbatches(inputs, targets, microbatches)
    for m, (mb_inputs, mb_targets) in enumerate(batches):
        rng.set_base(model, seed, step, m)
        term = pipeplan_loss.compute(loss, model(*mb_inputs), mb_targets) / microbatches
        term.backward()
        value = term.detach().double() if tied is not None else term.detach()
        total = value if total is None else total + value
    if tied is not None:
        sum_tied_gradients(tied)
    if clip_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_grad_norm)
    optimizer.step()
    if tied is not None:
        refresh_tied(tied)
    return total


def _cast_inputs(inputs, dtype, device="cpu"):
    return [(x.to(dtype) if x.is_floating_point() else x).to(device) for x in inputs]


def use_device(device):
    """A torch.device for `device`; on CUDA also TF32 off and deterministic
    algorithms on, so a run compares with another to 1e-3 relative."""
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise TrainError("--device %r: %s" % (device, e))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise TrainError("--device %s: CUDA is not available" % device)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True)
    return dev


def train(package, data, loss, optimizer, lr, batch_size, microbatches, steps,
          start_step=0, weight_decay=None, momentum=0.0, clip_grad_norm=None,
          dtype=torch.float32, device="cpu", seed=0, pipelined=False, together=None):
    """Trains and returns [{"step", "loss"}]; stops at a non-finite loss (the list then
    ends with it). `pipelined`: a pipelined job's arithmetic (the module's doc)."""
    if batch_size < 1 or microbatches < 1 or batch_size % microbatches:
        raise TrainError("--batch-size %d must be a positive multiple of --microbatches %d"
                         % (batch_size, microbatches))
    if steps < 0 or start_step < 0:
        raise TrainError("--steps and --start-step must be >= 0")
    if together and not pipelined:
        raise TrainError("--together %s needs --pipelined (it names steps of a pipelined "
                         "job's arithmetic)" % together)
    dev = use_device(device)
    model = prepare_model(package, dtype).to(dev)
    params = [p for _, p in pp.canonical_parameters(model)]
    opt = make_optimizer(params, optimizer, lr, weight_decay, momentum)
    tied = untie(model) if pipelined else None  # after the optimizer took its parameters
    ranges = read_together(together, model)
    out = []
    for step in range(start_step, start_step + steps):
        if ranges:
            place_tied(tied, together_at(ranges, step))
        inputs, targets = data.batch(step, batch_size)
        value = train_step(model, params, opt, loss, _cast_inputs(inputs, dtype, dev),
                           targets.to(dev), microbatches, clip_grad_norm, seed, step,
                           tied).item()
        out.append({"step": step, "loss": value})
        if not math.isfinite(value):
            break
    return out


def write_losses(losses, path):
    """Writes the list, one step per line, to a temporary file beside `path`, then
    renames it. Floats are written in full (repr), so they read back exactly."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(x) for x in losses) + "\n]\n"
                    if losses else "[]\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(description="Train a model package in one process.")
    parser.add_argument("--package", required=True, help="model package directory")
    parser.add_argument("--data", required=True, help="tensors:FILE or synthetic:seed=N")
    parser.add_argument("--loss", choices=pipeplan_loss.LOSSES,
                        help="default: the package's loss")
    parser.add_argument("--optimizer", required=True, choices=OPTIMIZERS)
    parser.add_argument("--lr", required=True, type=float)
    parser.add_argument("--weight-decay", type=float,
                        help="default 0 (sgd, adam), 0.01 (adamw)")
    parser.add_argument("--momentum", type=float, default=0.0, help="sgd only")
    parser.add_argument("--clip-grad-norm", type=float, metavar="X",
                        help="clip the global gradient L2 norm to X")
    parser.add_argument("--batch-size", required=True, type=int, help="rows per step")
    parser.add_argument("--microbatches", required=True, type=int)
    parser.add_argument("--steps", required=True, type=int, help="steps to train")
    parser.add_argument("--start-step", type=int, default=0,
                        help="index of the first step (its data rows)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda:0 (cpu)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the job's seed (jobs create --seed): random operators' draws")
    parser.add_argument("--pipelined", action="store_true",
                        help="a pipelined job's arithmetic: tied parameters' gradients "
                        "summed per use after the microbatches, the loss summed in float64")
    parser.add_argument("--together", metavar="FILE",
                        help="with --pipelined: JSON [{from_step, to_step, parameters}], "
                        "the steps whose plan put every use of the named tied parameters "
                        "on one stage (they round as one process there)")
    parser.add_argument("--out", required=True, help="losses JSON")
    args = parser.parse_args(argv)
    try:
        package = pp.load_package(args.package)
        loss = args.loss or package.manifest["loss"]
        data = pipeplan_data.open_data(args.data, package.manifest, loss)
        losses = train(package, data, loss, args.optimizer, args.lr, args.batch_size,
                       args.microbatches, args.steps, args.start_step, args.weight_decay,
                       args.momentum, args.clip_grad_norm, pp.dtype_of(args.dtype),
                       args.device, args.seed, args.pipelined, args.together)
    except (TrainError, pp.PackageError, pipeplan_data.DataError) as e:
        print("pipeplan_reference_train: %s" % e, file=sys.stderr)
        return 2
    finite = all(math.isfinite(x["loss"]) for x in losses)
    write_losses([x if math.isfinite(x["loss"]) else {"step": x["step"], "loss": None}
                for x in losses], args.out)
    if not finite:
        print("pipeplan_reference_train: step %d: loss is %s" % (losses[-1]["step"],
                                                                   losses[-1]["loss"]),
              file=sys.stderr)
        return 1
    if losses:
        print("%s: %d steps, loss %.6g -> %.6g" % (args.out, len(losses), losses[0]["loss"],
                                                   losses[-1]["loss"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
