#!/usr/bin/env python3
"""Prediction error before and after calibration, per schedule and cluster.

Four `pipeplan-worker` processes (synthetic executor, Gloo on 127.0.0.1) run
a uniform 16-node chain on four devices declared at 10 TFLOP/s, 8 microbatches:

  compute-bound: 1 KB crosses each stage boundary (compute is the step);
  comm-visible:  8 MB crosses each boundary; loopback moves it at ~1 GB/s,
                 not the modelled 150 GB/s, so communication is a large part.

For GPipe, 1F1B, Interleaved1F1B (2 chunks per rank) and ZB-H1 the planner
(--replan off) is polled with `pipeplan jobs show --json` while the job runs:
"before" is the plan's own (uncalibrated) step time against the measured one,
"after" the observation's calibrated prediction (device factors, fitted links,
host time per message, all fitted from this run's reports) after the last
step. Convergence: the first observed step count from which the calibrated
error stayed within 15%.

  /usr/bin/python3 bench/python/fidelity_bench.py [--steps 30] [--schedules 1F1B,...]

Timings depend on the host's load: the workers share its cores.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from bench_common import CLI, WORKER, require_built  # noqa: E402  (and the helpers' sys.path)
from planner_process import PlannerProcess, planner_binary  # noqa: E402
SCHEDULES = [("GPipe", "GPipe", 1), ("1F1B", "1F1B", 1),
             ("Interleaved1F1B", "Interleaved1F1B", 2),
             ("ZB-H1", "InterleavedZeroBubble", 1)]
CLUSTERS = [("compute-bound", 1e3), ("comm-visible", 8e6)]


def write_inputs(work, output_bytes):
    nodes = [{"id": "n%d" % i, "forward_flops": 5e9, "param_bytes": 1e6,
              "output_bytes": output_bytes} for i in range(16)]
    edges = [{"src": "n%d" % (i - 1), "dst": "n%d" % i} for i in range(1, 16)]
    graph = os.path.join(work, "chain16-%d.json" % output_bytes)
    with open(graph, "w") as f:
        json.dump({"name": "chain16", "nodes": nodes, "edges": edges}, f)
    cluster = os.path.join(work, "cluster4.json")
    with open(cluster, "w") as f:
        json.dump({"devices": [{"id": "gpu%d" % d, "host": "h0", "flops": 10e12,
                                "memory_bytes": 80e9} for d in range(4)]}, f)
    return graph, cluster


def cli(planner, *args, tries=5):
    for attempt in range(tries):
        r = subprocess.run([CLI, "--planner", planner.address, "--timeout", "30"] + list(args),
                           capture_output=True, text=True)
        if r.returncode == 0:
            return json.loads(r.stdout)
        if r.returncode != 3 or attempt + 1 == tries:  # 3: unavailable, retrying may help
            sys.exit("pipeplan %s: exit %d: %s\n%s" % (" ".join(args), r.returncode, r.stderr,
                                                       planner.stderr_text()[-2000:]))
        time.sleep(1)


def observation(planner, job):
    j = cli(planner, "jobs", "show", job, "--json")
    return j.get("observation", {})


def run(planner, work, output_bytes, schedule, chunks, steps):
    graph, cluster = write_inputs(work, output_bytes)
    job = cli(planner, "jobs", "create", "--graph", graph, "--cluster", cluster, "--ranks", "4",
              "--schedule", schedule, "--chunks-per-rank", str(chunks), "--microbatches", "8",
              "--json")["id"]
    workers = [subprocess.Popen(
        [WORKER, "--planner", planner.address, "--job", job, "--worker-id", "w%d" % r,
         "--device", "gpu%d" % r, "--transport", "gloo", "--listen-host", "127.0.0.1",
         "--max-message-bytes", str(64 << 20), "--steps", str(steps)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(4)]
    trail = []  # (steps observed, calibrated error)
    try:
        deadline = time.monotonic() + 600
        while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
            o = observation(planner, job)
            if o.get("steps", 0) > 0:
                trail.append((o["steps"], o.get("prediction_error_ratio", 0)))
            time.sleep(0.5)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(timeout=120)
    o = observation(planner, job)
    measured = o["measured_step_seconds"]
    before = abs(o["planned_step_seconds"] - measured) / measured
    converged = None
    for i, (n, err) in enumerate(trail):
        if all(e <= 0.15 for _, e in trail[i:]) and o["prediction_error_ratio"] <= 0.15:
            converged = n
            break
    return {"steps": o["steps"], "measured": measured, "planned": o["planned_step_seconds"],
            "predicted": o["predicted_step_seconds"], "before": before,
            "after": o["prediction_error_ratio"],
            "bubble": (o.get("measured_bubble_ratio", 0), o.get("predicted_bubble_ratio", 0)),
            "converged": converged}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--schedules", default=",".join(s[0] for s in SCHEDULES))
    args = parser.parse_args()
    require_built(CLI, WORKER)
    wanted = args.schedules.split(",")
    work = tempfile.mkdtemp(prefix="pipeplan-fidelity-bench-")
    rows = []
    with PlannerProcess(planner_binary(), ["--replan=off"]) as planner:
        for cname, output_bytes in CLUSTERS:
            for label, schedule, chunks in SCHEDULES:
                if label in wanted:
                    rows.append((cname, label, run(planner, work, output_bytes, schedule,
                                                   chunks, args.steps)))
    print("| cluster | schedule | measured s | planned s | error before | calibrated s | "
          "error after | bubble measured / predicted | within 15% after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cname, label, r in rows:
        conv = "%d steps" % r["converged"] if r["converged"] is not None else "no"
        print("| %s | %s | %.4f | %.4f | %.0f%% | %.4f | %.1f%% | %.3f / %.3f | %s |" % (
            cname, label, r["measured"], r["planned"], 100 * r["before"], r["predicted"],
            100 * r["after"], r["bubble"][0], r["bubble"][1], conv))


if __name__ == "__main__":
    main()
