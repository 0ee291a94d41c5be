#!/usr/bin/env python3
"""Training throughput through pipeplan vs plain training loops, on CPU.

For each model (tests/models/tiny_models.py's gpt and cnn, and gpt256, the gpt
at width 256, 4 layers, 64 tokens): a real pipeplan-planner on 127.0.0.1, a
job with one rank (the whole model on one worker, --executor torch) and then
two ranks, trained for --steps steps; samples/s from the workers' own step
times (`jobs reports --json`, median after a warm-up) and, for one rank, from
the wall time between the worker's consecutive `event=step` lines as they
arrive (median: this one includes the step report RPC and the boundary
votes). Every process runs with OMP_NUM_THREADS=1 (one intra-op thread: the
comparison is per core, and a loaded 2-core machine oversubscribed by two
thread pools measures nothing). The baselines, on the same package, data,
microbatches and AdamW:

* LibTorch: bench/libtorch_train_loop.cc (`pipeplan-libtorch-train-loop`), a
  plain C++ loop over the same scripted model (a one-stage compile) — the
  overhead target of issue 9 is 1 rank / LibTorch < 10%;
* eager: the PyTorch loop of pipeplan_reference_train.py (per step:
  (t(2N) - t(N)) / N, so start-up cancels).

Prints a table; run it on an idle machine:

  /usr/bin/python3 bench/python/train_bench.py [--steps 60] [--model gpt --model cnn --model gpt256]
"""

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: one intra-op thread everywhere

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from bench_common import CLI, ROOT, WORKER, require_built  # noqa: E402  (and the helpers' sys.path)
import make_fixtures  # noqa: E402
import pipeplan_data  # noqa: E402
import pipeplan_package  # noqa: E402
import pipeplan_reference_train  # noqa: E402
from planner_process import PlannerProcess, planner_binary  # noqa: E402
LOOP = os.path.join(ROOT, "build", "bench", "pipeplan-libtorch-train-loop")
COMPILER = os.path.join(ROOT, "client", "python", "pipeplan_stage_compile.py")
BATCH, MICROBATCHES = 8, 4


def cluster(path, ranks):
    devices = [{"id": "cpu%d" % r, "host": "h0", "flops": 1e12, "memory_bytes": 8e9}
               for r in range(ranks)]
    with open(path, "w") as f:
        json.dump({"devices": devices}, f)


def gpt256_fixture(work, rows=64):
    """The gpt of tiny_models at width 256, 4 layers, 64 tokens (about 3.4M
    parameters), with next-token data built as make_fixtures builds gpt's."""
    import tiny_models
    import pipeplan_export
    import torch
    module, inputs = tiny_models.gpt(batch=4, vocab=512, d=256, heads=8, layers=4, seq=64)
    paths = {"graph": os.path.join(work, "gpt256.json"),
             "package": os.path.join(work, "gpt256.ptpkg"),
             "data": os.path.join(work, "gpt256_data.pt"), "loss": "cross_entropy"}
    graph = pipeplan_export.export(module, inputs, name="gpt256", package=paths["package"],
                                   loss="cross_entropy")
    pipeplan_export.write_graph(graph, paths["graph"])
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 512, (rows, 65), generator=g)
    torch.save({"inputs": tokens[:, :-1].clone(), "targets": tokens[:, 1:].clone()},
               paths["data"])
    return paths


def run_job(planner, fx, work, ranks, steps):
    """Trains a new job; returns (its step reports, the wall time between
    worker 0's consecutive `event=step` lines, as they arrived)."""
    cluster(os.path.join(work, "cluster%d.json" % ranks), ranks)
    out = subprocess.run(
        [CLI, "--planner", planner.address, "jobs", "create", "--graph", fx["graph"],
         "--cluster", os.path.join(work, "cluster%d.json" % ranks), "--ranks", str(ranks),
         "--schedule", "1F1B", "--microbatches", str(MICROBATCHES), "--model-package",
         fx["package"], "--data", "tensors:" + fx["data"], "--batch-size", str(BATCH),
         "--optimizer", "adamw", "--lr", "1e-3", "--max-steps", str(steps), "--json"],
        check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["id"]
    workers = [subprocess.Popen(
        [WORKER, "--planner", planner.address, "--job", job, "--worker-id", "w%d" % r,
         "--device", "cpu%d" % r, "--executor", "torch", "--stage-cache",
         os.path.join(work, "stages")],
        stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        text=True) for r in range(ranks)]
    arrivals = [time.perf_counter() for line in workers[0].stdout
                if line.startswith("event=step ")]
    for w in workers:
        w.wait(timeout=600)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    reports = json.loads(subprocess.run(
        [CLI, "--planner", planner.address, "jobs", "reports", job, "--json"],
        check=True, capture_output=True, text=True).stdout)
    return reports, gaps


def pipelined_step_seconds(planner, fx, work, ranks, steps):
    """(median step_seconds the workers report, median wall time per step)."""
    reports, gaps = run_job(planner, fx, work, ranks, steps)
    return (statistics.median(r["step_seconds"] for r in reports if r["step"] >= 5),
            statistics.median(gaps[4:]))


def libtorch_step_seconds(fx, work, steps):
    """The plain C++ loop over the one-stage compile of the same package."""
    package = pipeplan_package.load_package(fx["package"])
    stages = os.path.join(work, os.path.basename(fx["package"]) + ".one-stage")
    subprocess.run([sys.executable, COMPILER, "--package", fx["package"], "--node-stage",
                    json.dumps([0] * len(package.manifest["nodes"])), "--microbatch-size",
                    str(BATCH // MICROBATCHES), "--out", stages], check=True,
                   capture_output=True)
    out = subprocess.run([LOOP, "--stage", os.path.join(stages, "stage_0.pt"), "--data",
                          fx["data"], "--loss", fx["loss"], "--batch-size", str(BATCH),
                          "--microbatches", str(MICROBATCHES), "--steps", str(steps)],
                         check=True, capture_output=True, text=True).stdout
    fields = dict(kv.split("=") for kv in out.split())
    return float(fields["median_step_seconds"])


def eager_step_seconds(fx, steps):
    package = pipeplan_package.load_package(fx["package"])
    data = pipeplan_data.open_data("tensors:" + fx["data"], package.manifest, fx["loss"])

    def run(n):
        start = time.perf_counter()
        pipeplan_reference_train.train(package, data, fx["loss"], "adamw", 1e-3, BATCH,
                                       MICROBATCHES, n)
        return time.perf_counter() - start
    return (run(2 * steps) - run(steps)) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--model", action="append", default=[])
    args = parser.parse_args()
    require_built(LOOP, targets=["pipeplan-libtorch-train-loop"])
    work = tempfile.mkdtemp(prefix="pipeplan-train-bench-")
    print("samples/s (batch %d, %d microbatches, AdamW, CPU; --steps %d)" % (
        BATCH, MICROBATCHES, args.steps))
    print("%-7s %9s %9s %11s %11s %13s %13s %11s" % (
        "model", "LibTorch", "eager", "1 rank", "1 rank", "overhead", "overhead", "2 ranks"))
    print("%-7s %9s %9s %11s %11s %13s %13s %11s" % (
        "", "loop", "PyTorch", "(step)", "(wall)", "(step)", "(wall)", "(step)"), flush=True)
    with PlannerProcess(planner_binary(), ["--replan=off"]) as planner:
        for name in args.model or ["gpt", "cnn", "gpt256"]:
            if name == "gpt256":
                fx = gpt256_fixture(work)
            else:
                fx = dict(make_fixtures.make_fixture(name, work, rows=64),
                          loss=make_fixtures.LOSS[name])
            libtorch = libtorch_step_seconds(fx, work, args.steps)
            eager = eager_step_seconds(fx, args.steps)
            one, one_wall = pipelined_step_seconds(planner, fx, work, 1, args.steps)
            two, _ = pipelined_step_seconds(planner, fx, work, 2, args.steps)
            print("%-7s %9.1f %9.1f %11.1f %11.1f %12.1f%% %12.1f%% %11.1f" % (
                name, BATCH / libtorch, BATCH / eager, BATCH / one, BATCH / one_wall,
                100 * (one / libtorch - 1), 100 * (one_wall / libtorch - 1), BATCH / two),
                flush=True)


if __name__ == "__main__":
    main()
