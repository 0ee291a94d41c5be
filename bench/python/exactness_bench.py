#!/usr/bin/env python3
"""Does a fault-free pipelined job train exactly as one process? (docs/elastic.md,
"Which losses differ, and why"), with real processes on 127.0.0.1.

One job of --ranks ranks (4 `pipeplan-worker --executor torch` processes at
most, one per rank) trains the gpt fixture for --steps steps on the planner's
fixed plan (no calibration replans; with --defaults the planner's defaults,
calibration replans on), or with `jobs replan` asked at each step of
--replan-at (plan switches without a fault). Every loss the last stage
reported (full precision) is compared with the single-process reference
trainer twice: in its default mode (one process's rounding) and in its
--pipelined mode (the tied embedding's gradient summed per stage after the
microbatches, as the ranks do). For each: the first step that differs, how
many agree bit for bit, the largest difference and the steps off by more
than 1e-3. Usage:

  /usr/bin/python3 bench/python/exactness_bench.py --build build --steps 2200 [--ranks 3]
      [--replan-at 150 450 750]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

import drill_losses
import elastic_bench as eb


def splits(args, planner, job, versions):
    """Per version, its stages as device:nodes (from `jobs show`)."""
    out = []
    for v in versions:
        shown = subprocess.run([os.path.join(args.build, "client/pipeplan"), "--planner",
                                planner.address, "jobs", "show", job, "--version", str(v)],
                               capture_output=True, text=True).stdout
        rows = [line.split() for line in shown.splitlines()]
        out.append("v%d %s" % (v, " ".join("%s:%s" % (r[1], r[2]) for r in rows
                                           if len(r) > 2 and r[0].isdigit()
                                           and r[1].startswith("cpu"))))
    return out


def run_job(args, work):
    """{step: (loss, plan version)} of a fault-free job; its versions' splits."""
    # Without --defaults the planner replans only when asked.
    planner = eb.Planner(args.build, work, 2.0, defaults=args.defaults)
    opts = types.SimpleNamespace(build=args.build, defaults=False)
    job = eb.create_gpt_job(opts, work, planner, args.steps, ranks=args.ranks)
    workers = [eb.start_worker(opts, work, planner, job, r, "exact") for r in range(args.ranks)]
    pending = sorted(args.replan_at)
    try:
        while any(p.poll() is None for p, _ in workers):
            if pending and max(eb.last_step(p) for _, p in workers) >= pending[0]:
                pending.pop(0)
                subprocess.run([os.path.join(args.build, "client/pipeplan"), "--planner",
                                planner.address, "jobs", "replan", job], capture_output=True)
            time.sleep(0.2)
        losses = {}
        for _, path in workers:
            for e in eb.events(path, "step"):
                if "loss" in e:
                    losses[int(e["step"])] = (float(e["loss"]), int(e["plan_version"]))
        return losses, splits(args, planner, job, sorted({v for _, v in losses.values()}))
    finally:
        eb.end_trial(opts, planner, job, workers)
        planner.kill()


def compare(name, losses, reference):
    """Prints how `losses` ({step: (loss, version)}) agree with `reference`."""
    steps = sorted(s for s in losses if s in reference)
    diff = {s: abs(losses[s][0] - reference[s]) for s in steps}
    differ = [s for s in steps if diff[s] != 0.0]
    over = [s for s in steps if diff[s] > 1e-3 * max(1.0, abs(reference[s]))]
    print("%s: %d steps, %d bit for bit, first different step %s, largest difference %.3g, "
          "%d off by > 1e-3%s" % (
              name, len(steps), len(steps) - len(differ),
              "none" if not differ else "%d (%r vs %r)" % (
                  differ[0], losses[differ[0]][0], reference[differ[0]]),
              max(diff.values(), default=0.0), len(over),
              (": steps " + " ".join(str(s) for s in over[:20])) if over else ""))
    for first in range(0, max(steps, default=-1) + 1, 500):
        part = [diff[s] for s in steps if first <= s < first + 500]
        if part:
            print("  steps %d-%d: largest %.3g, median %.3g" % (
                first, first + len(part) - 1, max(part), sorted(part)[len(part) // 2]))


def main():
    ap = eb.arg_parser(__doc__)
    ap.add_argument("--steps", type=int, default=2200)
    ap.add_argument("--ranks", type=int, default=4, choices=(2, 3, 4))
    ap.add_argument("--replan-at", type=int, nargs="*", default=[])
    ap.add_argument("--defaults", action="store_true",
                    help="the planner's default flags: calibration replans on")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pipeplan-exactness-bench-")
    try:
        eb.write_inputs(work, args.ranks)
        started = time.time()
        losses, versions = run_job(args, work)
        print("%d ranks, %d steps in %.0f s; plan versions (device:nodes per stage): %s" % (
            args.ranks, len(losses), time.time() - started, "; ".join(versions)))
        compare("reference (one process)", losses, drill_losses.reference_losses(work, args.steps, False))
        compare("reference --pipelined", losses, drill_losses.reference_losses(work, args.steps))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
