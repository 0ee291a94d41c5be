#!/usr/bin/env python3
"""State moves, peer snapshots and checkpoints in MB/s, and what snapshots
cost a step (docs/snapshots.md), with real processes on 127.0.0.1.

1. `pipeplan-state-move-bench` (two ranks over Gloo on loopback, --mb of
   parameters and AdamW state): a plan switch, a peer snapshot round, a
   checkpoint write and read, before (pickled) and after (tensor records).
2. 4 `pipeplan-worker --executor torch` processes train the gpt fixture
   (4 ranks, 1F1B) for --steps steps with a peer snapshot every 1, 10 and
   50 steps and with snapshots off: wall seconds per step (from step 10 to
   the end, all workers), and the median pause of a snapshot round
   (`event=snapshot blocking_seconds`).

Usage:
  bench/python/state_move_bench.py --build build [--mb 1170] [--steps 110]
      [--skip-move-bench]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import elastic_bench as eb  # noqa: E402  (the planner, workers and event helpers)


def start_job(args, work, planner, snapshot_every):
    return eb.create_gpt_job(args, work, planner, args.steps,
                             "--snapshot-every", str(snapshot_every))


def step_cost(args, work, planner, every):
    """(wall seconds per step, median round pause in s, largest rank's snapshot bytes)."""
    job = start_job(args, work, planner, every)
    workers = [eb.start_worker(args, work, planner, job, r, "s%d" % every) for r in range(4)]
    try:
        eb.wait_until(lambda: all(eb.last_step(p) >= 10 for _, p in workers), 300, "step 10")
        start = time.time()
        for p, _ in workers:
            p.wait(timeout=600)
        per_step = (time.time() - start) / (args.steps - 11)
        rounds = [e for _, p in workers for e in eb.events(p, "snapshot")]
        pause = statistics.median(float(e["blocking_seconds"]) for e in rounds) if rounds else 0
        size = max((int(e["bytes"]) for e in rounds), default=0)
        return per_step, pause, size
    finally:
        eb.end_trial(args, planner, job, workers)


def main():
    ap = eb.arg_parser(__doc__)
    ap.add_argument("--mb", type=float, default=1170)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=110)
    ap.add_argument("--lease", type=float, default=2.0)
    ap.add_argument("--skip-move-bench", action="store_true",
                    help="only the step-time table")
    args = ap.parse_args()
    if not args.skip_move_bench:
        subprocess.run([os.path.join(args.build, "bench/pipeplan-state-move-bench"), "--mb",
                        str(args.mb), "--reps", str(args.reps)], check=True)
    work = tempfile.mkdtemp(prefix="pipeplan-state-move-bench-")
    try:
        subprocess.run([sys.executable, os.path.join(SRC, "tests/models/make_fixtures.py"),
                        "--out-dir", work, "--model", "gpt", "--rows", "48"],
                       check=True, capture_output=True)
        with open(os.path.join(work, "cluster.json"), "w") as f:
            json.dump({"devices": [{"id": "cpu%d" % d, "host": "h0", "flops": 1e12,
                                    "memory_bytes": 8e9} for d in range(4)]}, f)
        planner = eb.Planner(args.build, work, args.lease)
        rows = [(every, step_cost(args, work, planner, every)) for every in (0, 50, 10, 1)]
        planner.kill()
        base = rows[0][1][0]
        print("\n4 torch workers, gpt fixture, %d steps; wall seconds per step from step 10"
              % args.steps)
        print("| snapshot every | s/step | vs off | round pause (ms, median) | largest snapshot (bytes) |")
        print("|---|---:|---:|---:|---:|")
        for every, (per_step, pause, size) in rows:
            print("| %s | %.4f | %+.1f%% | %.2f | %d |" % (
                every or "off", per_step, 100 * (per_step / base - 1), 1000 * pause, size))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
