#!/usr/bin/env python3
"""Predicted vs measured step time after calibration, per schedule (2 workers, CPU).

For each schedule (GPipe, 1F1B, Interleaved1F1B with 2 chunks per rank, ZB-H1 =
InterleavedZeroBubble with 1): a job training gpt256 (bench/python/train_bench.py's
gpt at width 256, 4 layers, 64 tokens; batch 8 in 4 microbatches, AdamW) on two
`pipeplan-worker --executor torch`. The planner runs its calibration policy
(--replan=on, one evaluation per job: --replan-min-interval-seconds 600,
--replan-min-steps 10): from the workers' step reports it fits each device's
measured/modelled compute factor, then predicts the running plan's step time
under the calibrated model (its simulator: the schedule's bubbles, sends and
receives included). The planner logs that prediction (`event=replan_skipped
... predicted gain x% (A s -> B s)`, or the reason of a published version:
`predicted step A s -> B s`); A is compared with the median step time the
workers measured for the same plan version (its steps after the first two).

  /usr/bin/python3 bench/python/calibration_bench.py [--model gpt256|gpt]
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import train_bench  # noqa: E402
from bench_common import require_built  # noqa: E402
from planner_process import PlannerProcess, planner_binary  # noqa: E402

SCHEDULES = [("GPipe", "GPipe", 1), ("1F1B", "1F1B", 1),
             ("Interleaved1F1B", "Interleaved1F1B", 2),
             ("ZB-H1", "InterleavedZeroBubble", 1)]
PREDICTED = re.compile(r"predicted (?:gain [^(]*\(|step )([0-9.e+-]+) s -> ([0-9.e+-]+) s")


def calibrated_prediction(planner, job, timeout=600):
    """A, from the planner's log line about `job`'s calibration."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(planner.stderr_path) as f:
            for line in f:
                if "job=" + job in line and ("event=replan_skipped" in line or
                                             "calibration" in line):
                    m = PREDICTED.search(line)
                    if m:
                        return float(m.group(1)), line.strip()
        time.sleep(0.5)
    sys.exit("no calibration of %s in %s" % (job, planner.stderr_path))


def run(planner, fx, work, label, schedule, chunks):
    cli = [train_bench.CLI, "--planner", planner.address]
    train_bench.cluster(os.path.join(work, "cluster2.json"), 2)
    job = json.loads(subprocess.run(
        cli + ["jobs", "create", "--graph", fx["graph"], "--cluster",
               os.path.join(work, "cluster2.json"), "--ranks", "2", "--schedule", schedule,
               "--chunks-per-rank", str(chunks), "--microbatches", "4", "--model-package",
               fx["package"], "--data", "tensors:" + fx["data"], "--batch-size", "8",
               "--optimizer", "adamw", "--lr", "1e-3", "--max-steps", "100000", "--json"],
        check=True, capture_output=True, text=True).stdout)["id"]
    workers = [subprocess.Popen(
        [train_bench.WORKER, "--planner", planner.address, "--job", job, "--worker-id",
         "w%d" % r, "--device", "cpu%d" % r, "--executor", "torch", "--stage-cache",
         os.path.join(work, "stages")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for r in range(2)]
    try:
        predicted, line = calibrated_prediction(planner, job)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=300)
    reports = json.loads(subprocess.run(cli + ["jobs", "reports", job, "--json"], check=True,
                                        capture_output=True, text=True).stdout)
    measured = statistics.median(r["step_seconds"] for r in reports
                                 if r["plan_version"] == 1 and r["step"] >= 2)
    return label, predicted, measured, line


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("gpt256", "gpt"), default="gpt256",
                        help="gpt: tests/models' tiny gpt (faster, step dominated by overhead)")
    args = parser.parse_args()
    require_built()
    work = tempfile.mkdtemp(prefix="pipeplan-calibration-bench-")
    if args.model == "gpt256":
        fx = train_bench.gpt256_fixture(work)
    else:
        fx = dict(train_bench.make_fixtures.make_fixture("gpt", work, rows=64),
                  loss="cross_entropy")
    rows = []
    with PlannerProcess(planner_binary(), ["--replan=on", "--replan-min-interval-seconds=600",
                                           "--replan-min-steps=10"]) as planner:
        for label, schedule, chunks in SCHEDULES:
            rows.append(run(planner, fx, work, label, schedule, chunks))
    print("%s on 2 workers, batch 8 in 4 microbatches; step seconds" % args.model)
    print("%-16s %10s %10s %8s" % ("schedule", "predicted", "measured", "error"))
    for label, predicted, measured, _ in rows:
        print("%-16s %10.4f %10.4f %+7.1f%%" % (label, predicted, measured,
                                               100 * (predicted / measured - 1)))
    for label, _, _, line in rows:
        print("# %s: %s" % (label, line))


if __name__ == "__main__":
    main()
