#!/usr/bin/env python3
"""Training throughput through pipeplan vs a plain PyTorch loop, on CPU.

For each model of tests/models/tiny_models.py: a real pipeplan-planner on
127.0.0.1, a job with one rank (the whole model on one worker, --executor
torch) and then two ranks, trained for --steps steps; samples/s from the
workers' own step times (`jobs reports --json`, median after a warm-up) against
the eager PyTorch loop of pipeplan_reference_train.py on the same package, data
and optimizer (per-step time = (t(2N) - t(N)) / N, so start-up cancels). Prints
a table; run it on an idle machine:

  /usr/bin/python3 bench/train_bench.py [--steps 60] [--model gpt --model cnn]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import make_fixtures  # noqa: E402
import pipeplan_data  # noqa: E402
import pipeplan_package  # noqa: E402
import pipeplan_reference_train  # noqa: E402
from planner_process import PlannerProcess, planner_binary  # noqa: E402

CLI = os.path.join(ROOT, "build", "client", "pipeplan")
WORKER = os.path.join(ROOT, "build", "worker_daemon", "pipeplan-worker")
BATCH, MICROBATCHES = 8, 4


def cluster(path, ranks):
    devices = [{"id": "cpu%d" % r, "host": "h0", "flops": 1e12, "memory_bytes": 8e9}
               for r in range(ranks)]
    with open(path, "w") as f:
        json.dump({"devices": devices}, f)


def pipelined_step_seconds(planner, fx, work, ranks, steps):
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
         os.path.join(work, "stages")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for r in range(ranks)]
    for w in workers:
        w.wait(timeout=600)
    reports = json.loads(subprocess.run(
        [CLI, "--planner", planner.address, "jobs", "reports", job, "--json"],
        check=True, capture_output=True, text=True).stdout)
    return statistics.median(r["step_seconds"] for r in reports if r["step"] >= 5)


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
    if not planner_binary():
        sys.exit("build first: ./scripts/setup.sh")
    work = tempfile.mkdtemp(prefix="pipeplan-train-bench-")
    rows = []
    with PlannerProcess(planner_binary(), ["--replan=off"]) as planner:
        for name in args.model or ["gpt", "cnn"]:
            fx = dict(make_fixtures.make_fixture(name, work, rows=64),
                      loss=make_fixtures.LOSS[name])
            eager = eager_step_seconds(fx, args.steps)
            one = pipelined_step_seconds(planner, fx, work, 1, args.steps)
            two = pipelined_step_seconds(planner, fx, work, 2, args.steps)
            rows.append((name, BATCH / eager, BATCH / one, one / eager, BATCH / two))
    print("%-6s %14s %16s %10s %16s" % ("model", "eager samples/s", "1 rank samples/s",
                                        "1 rank/eager", "2 ranks samples/s"))
    for name, eager, one, ratio, two in rows:
        print("%-6s %14.1f %16.1f %9.2fx %16.1f" % (name, eager, one, ratio, two))


if __name__ == "__main__":
    main()
