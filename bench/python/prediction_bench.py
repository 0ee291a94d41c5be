#!/usr/bin/env python3
"""Out-of-sample prediction: calibrate on plan A, predict plans B-E, run them.

Torch part (issue 22): a job trains tests/models' tiny gpt (and cnn) on four
`pipeplan-worker --executor torch` on CPU (OMP_NUM_THREADS=1 each). It runs
plan A (1F1B, 4 ranks) for --steps steps, then `pipeplan jobs replan` switches
it to plan X; the planner stores X's predicted step (and p50/p90 under the
measured spread of each action kind) under A's calibration before publishing
it (VersionedPlan.prediction). After --steps steps of X the job goes back to
A (so every X is predicted from A's calibration), and so on for:

  B  1F1B, 4 ranks, split by parameters (--method params: another cut)
  C  Interleaved1F1B, 4 ranks, 2 chunks per rank
  D  1F1B, 2 ranks x 2 replicas, 2 microbatches of 2 rows per replica
  E  ZB-H1 (InterleavedZeroBubble, 1 chunk per rank), 4 ranks

Measured: the planner's own figure for the version (median makespan over the
steps after --replan-warmup-steps, `jobs versions`); "under p90": the share of
the version's steps (`jobs reports`, longest rank per step, first two steps
after the switch left out) at or under the predicted p90.

Straggler part: the synthetic executor on the same four workers, a 16-node
chain, 1F1B with 8 microbatches, the planner's calibration replans on: one
worker runs 1.5x, 2x, 3x slower (--slowdown), or every worker varies +-10%
per step (--noise 0.1). Does it replan, and how does the predicted gain of
the switch compare with the measured one (`jobs versions`)?

  /usr/bin/python3 bench/python/prediction_bench.py [--models gpt,cnn] [--steps 40]
      [--parts torch,straggler] [--dump DIR] [--profile N]

--models takes tests/models' tiny "gpt" and "cnn" (microsecond actions:
per-message overheads dominate their steps) and "modelled:gpt",
"modelled:resnet18" (tests/models/modelled_models.py: milliseconds of
compute per action). The modelled models are exported with measured node
times (--profile, 5 timings per node; 0 keeps the flop-derived costs).

Besides the table it prints plan A's measured step in each of its runs (the
noise floor the errors are read against) and, per plan, the per-action
costs the prediction simulated (the planner's `version_predicted_costs` log
line: each action's time alone on its CPU pool) beside the measured
per-stage F and backward, read back to their time alone by processor
sharing over the pool's computes, and their wall time; --dump writes each
torch job's reports and plans as JSON, the graph it planned with
(MODEL_graph.json, with its measured node times) and the planner's log of
each part (planner-torch.log, planner-straggler.log).

Timings depend on the machine's load: four workers share its cores.
"""

import os
import shutil

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: one intra-op thread per worker

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The generated pipeplan.v1 modules (for --dump), before pipeplan is imported.
sys.path.insert(0, os.path.join(HERE, "..", "..", "build", "python"))

import fidelity_bench  # noqa: E402
import train_bench  # noqa: E402
from bench_common import require_built  # noqa: E402
from planner_process import PlannerProcess, planner_binary  # noqa: E402

# Every plan names its microbatches: a replan keeps the options it does not
# name from the version before (A after D would run D's two).
PLAN_A = ("A", ["--ranks", "4", "--replicas", "1", "--schedule", "1F1B", "--microbatches", "4",
                "--method", "auto"])
TARGETS = [
    ("B split", ["--ranks", "4", "--replicas", "1", "--schedule", "1F1B", "--microbatches", "4",
                 "--method", "params"]),
    ("C interleaved", ["--ranks", "4", "--replicas", "1", "--schedule", "Interleaved1F1B",
                       "--chunks-per-rank", "2", "--microbatches", "4", "--method", "auto"]),
    # Two microbatches per replica keep A's 2 rows per microbatch: at 1 row
    # LibTorch's CPU convolutions run 4x slower per row (resnet18, one
    # thread: 81 ms a forward at batch 1, 19 ms at batch 2), a cliff no
    # calibration at 2 rows can know (docs/observability.md).
    ("D 2x2 replicas", ["--ranks", "2", "--replicas", "2", "--schedule", "1F1B",
                        "--microbatches", "2", "--method", "auto"]),
    ("E ZB-H1", ["--ranks", "4", "--replicas", "1", "--schedule", "InterleavedZeroBubble",
                 "--chunks-per-rank", "1", "--microbatches", "4", "--method", "auto"]),
]
SKIP_AFTER_SWITCH = 2


def cli(planner, *args):
    return fidelity_bench.cli(planner, *args, "--json")


def start_workers(planner, job, work, extra=lambda r: []):
    return [subprocess.Popen(
        [train_bench.WORKER, "--planner", planner.address, "--job", job, "--worker-id",
         "w%d" % r, "--device", "cpu%d" % r, "--stage-cache", os.path.join(work, "stages")]
        + extra(r), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(4)]


def stop(workers):
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        w.wait(timeout=300)


def wait_steps(planner, job, version, steps, workers, timeout=900):
    """Until the job's observation of `version` counts `steps` steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(w.poll() is not None for w in workers):
            sys.exit("a worker exited early; planner log: %s" % planner.stderr_path)
        o = cli(planner, "jobs", "show", job).get("observation", {})
        # int64 fields arrive as JSON strings.
        if int(o.get("plan_version", 0)) == version and o.get("steps", 0) >= steps:
            return o
        time.sleep(1)
    sys.exit("job %s: version %d did not reach %d steps" % (job, version, steps))


def switch(planner, job, label, options, steps, workers):
    """Replans `job` with `options`; returns the new version once it ran."""
    vp = cli(planner, "jobs", "replan", job, "--reason", label, *options)
    version = int(vp["version"])
    wait_steps(planner, job, version, steps, workers)
    return version


def version_row(planner, job, version):
    rows = cli(planner, "jobs", "versions", job)
    row = next(r for r in rows if r["version"] == version)
    steps = [r["step_seconds"] for r in cli(planner, "jobs", "reports", job)
             if r["plan_version"] == version]
    steps = steps[SKIP_AFTER_SWITCH:]
    p90 = row["predicted_p90_step_seconds"]
    under = sum(s <= p90 for s in steps) / len(steps) if steps and p90 > 0 else float("nan")
    return dict(row, under_p90=under, counted=len(steps))


ACTION = re.compile(r"^(\d+)(F|B|I|W)(\d+)$")


def compute_runs(r):
    """A report's computes as (stage, kind, wall start, wall end) in seconds
    since the epoch. A compute that waits for its input is stamped when the
    rank reached it and charged its compute alone; it ends where the rank
    reached its next action (core/cpu_pools.cc reads them the same way)."""
    t0 = r.start_unix_us * 1e-6
    out, timings = [], list(r.timings)
    for k, t in enumerate(timings):
        m = ACTION.match(t.action)
        if not m or t.seconds <= 0:
            continue
        end = t.start_seconds + t.seconds
        if k + 1 < len(timings):
            end = max(end, timings[k + 1].start_seconds)
        out.append((int(m.group(1)), m.group(2), t0 + end - t.seconds, t0 + end))
    return out


# The CPU a ring all-reduce's process keeps busy (core/runtime_model.h's
# kRingCpuLoad).
RING_CPU_LOAD = 0.5


def ring_run(r):
    """A report's exposed all-reduce as a pool run (stage -1, "ring", wall
    start, wall end, load): EndStep starts with it; None without one."""
    if not r.HasField("allreduce_exposed_seconds") or r.allreduce_exposed_seconds <= 0:
        return None
    start = r.start_unix_us * 1e-6 + r.step_seconds - r.optimizer_seconds
    return (-1, "ring", start, start + r.allreduce_exposed_seconds, RING_CPU_LOAD)


def alone_seconds(run, pool_runs, cpus):
    """The part of `run` its pool's CPUs gave it: its wall time with each
    instant weighted by min(1, cpus / load running then) (processor
    sharing: one per compute, RING_CPU_LOAD per exposed ring), its seconds
    alone on the pool."""
    cuts = sorted({x for o in pool_runs for x in o[2:4] if run[2] < x < run[3]}
                  | {run[2], run[3]})
    out = 0.0
    for a, b in zip(cuts, cuts[1:]):
        mid = (a + b) / 2
        load = sum(o[4] if len(o) > 4 else 1 for o in pool_runs if o[2] <= mid < o[3])
        out += (b - a) * min(1.0, cpus / max(load, 1))
    return out


def measured_stages(reports, version, skip=SKIP_AFTER_SWITCH):
    """Per stage of `version`: median F and full backward (B, or I + W) per
    microbatch over its reports, the first `skip` steps left out, each as
    (wall, alone): its wall time, and its time alone on its CPU pool read
    back by processor sharing over the step's computes and exposed rings of
    every worker that shares the pool (what the prediction's per-action
    figure is)."""
    import statistics
    reports = [r for r in reports if r.plan_version == version]
    first = min((r.step for r in reports), default=0) + skip
    by_step = {}
    for r in reports:
        if r.step >= first:
            by_step.setdefault(r.step, []).append(r)
    f, b = {}, {}
    for step_reports in by_step.values():
        runs = {id(r): compute_runs(r) for r in step_reports}
        loads = {id(r): runs[id(r)] + [x for x in [ring_run(r)] if x] for r in step_reports}
        for r in step_reports:
            pool = [o for q in step_reports if q.cpu_use.pool == r.cpu_use.pool
                    for o in loads[id(q)]]
            cpus = r.cpu_use.cpus if r.cpu_use.pool and r.cpu_use.cpus > 0 else float("inf")
            per = {}
            for run in runs[id(r)]:
                acc = per.setdefault(run[0], [0.0, 0.0, 0, 0.0, 0.0, 0])
                wall, alone = run[3] - run[2], alone_seconds(run, pool, cpus)
                i = 0 if run[1] == "F" else 3
                acc[i] += wall
                acc[i + 1] += alone
                acc[i + 2] += run[1] != "W"  # microbatches: an I and its W are one
            for s, acc in per.items():
                if acc[2]:
                    f.setdefault(s, []).append((acc[0] / acc[2], acc[1] / acc[2]))
                if acc[5]:
                    b.setdefault(s, []).append((acc[3] / acc[5], acc[4] / acc[5]))

    def med(xs):
        return tuple(statistics.median(x[i] for x in xs) for i in range(2)) if xs else (0, 0)
    return [(med(f.get(s)), med(b.get(s))) for s in range(max(f, default=-1) + 1)]


def measured_exposed(reports, version, skip=SKIP_AFTER_SWITCH):
    """Per rank of `version`: the median exposed all-reduce (ms) its workers
    reported, the first `skip` steps left out; empty without replicas."""
    import statistics
    reports = [r for r in reports if r.plan_version == version]
    first = min((r.step for r in reports), default=0) + skip
    by_rank = {}
    for r in reports:
        if r.step >= first and r.HasField("allreduce_exposed_seconds"):
            by_rank.setdefault(r.rank, []).append(1e3 * r.allreduce_exposed_seconds)
    return [statistics.median(by_rank[k]) for k in sorted(by_rank)]


def predicted_costs(planner):
    """Each `version_predicted_costs` line of the planner's log, in order:
    per stage (F ms, full B ms), tail ms, exposed all-reduce ms per rank, and
    the kind fit's extra costs (forward;backward: fixed ms, ms per node, ms
    per MB of parameters), and the expected wait for the slowest replica."""
    out = []
    for line in planner.stderr_text().splitlines():
        if "event=version_predicted_costs" not in line:
            continue
        fields = dict(re.findall(r'(\w+)="?([^" ]*)"?', line))

        def nums(key):
            return [float(x) for x in fields.get(key, "").split(",") if x]
        out.append(dict(stages=list(zip(nums("stage_forward_ms"), nums("stage_backward_ms"))),
                        tail=float(fields.get("tail_ms") or 0),
                        exposed=nums("allreduce_exposed_ms"),
                        wait=float(fields.get("replica_wait_ms") or 0),
                        extras=fields.get("kind_extras", "-")))
    return out


def dump_job(planner, job, path):
    """Writes the job's step reports (action timings included) and every
    plan version as JSON, for comparing predicted with measured per action."""
    from google.protobuf import json_format
    from pipeplan.client import Client
    with Client(planner.address) as c:
        reports = [json_format.MessageToDict(r) for r in c.step_reports(job)]
        plans = []
        for v in cli(planner, "jobs", "versions", job):
            plans.append(json_format.MessageToDict(c.get_plan(job, int(v["version"]))))
    with open(path, "w") as f:
        json.dump({"reports": reports, "plans": plans}, f)


# Model name -> plan A's measured step (seconds) in each of its runs.
A_RUNS = {}
# (model, plan, predicted per stage, measured per stage, tail ms, (exposed ms per
# rank predicted, measured, replica wait ms), extras).
STAGE_ROWS = []


def stage_rows(planner, job, name, versions):
    """Per target version: the per-action costs its prediction simulated
    (the planner's log, one line per replan: versions 2, 3, ... in order)
    beside the measured ones."""
    from pipeplan.client import Client
    with Client(planner.address) as c:
        reports = c.step_reports(job)
    logged = predicted_costs(planner)[-(2 * len(TARGETS)):]
    out = []
    for (label, _), version in zip(TARGETS, versions):
        i = int(version) - 2
        if 0 <= i < len(logged):
            p = logged[i]
            out.append((name, label, p["stages"], measured_stages(reports, int(version)),
                        p["tail"], (p["exposed"], measured_exposed(reports, int(version)),
                                    p["wait"]), p["extras"]))
    return out


def print_stages(rows):
    print("per action, ms per microbatch (F, full backward): predicted / measured alone "
          "(wall); with workers sharing CPUs the predicted figure is the action's time "
          "alone on its pool (the simulation stretches it while others compute), "
          "measured alone is its wall time read back by processor sharing over the "
          "pool's computes, wall what it took; the predicted EndStep tail; the exposed "
          "all-reduce per rank, predicted / measured; with replicas, + the expected "
          "wait for the slowest one; "
          "the kind fit's extras: forward;backward fixed ms per action, ms "
          "per node, ms per MB of the stage's parameters")
    print("| model | plan | stage: F pred/alone (wall), B pred/alone (wall) | tail ms | "
          "all-reduce ms | extras |")
    print("|---|---|---|---|---|---|")
    for name, label, pred, meas, tail, exposed, extras in rows:
        cells = []
        for s, (pf, pb) in enumerate(pred):
            (fw, fa), (bw, ba) = meas[s] if s < len(meas) else ((0, 0), (0, 0))
            cells.append("s%d %.2f/%.2f (%.2f), %.2f/%.2f (%.2f)" % (
                s, pf, 1e3 * fa, 1e3 * fw, pb, 1e3 * ba, 1e3 * bw))
        ring, got, wait = exposed
        ring = ",".join("%.1f" % x for x in ring) or "-"
        if got:
            ring += " / " + ",".join("%.1f" % x for x in got)
        print("| %s | %s | %s | %.1f | %s | %s |" % (
            name, label, "; ".join(cells), tail, ring + (" + wait %.1f" % wait if wait else ""),
            extras))


def fixture(name, work, profile=0):
    """Graph, package and data of `name`: a tiny model of tests/models'
    make_fixtures ("gpt", "cnn") or, as "modelled:NAME", one of
    modelled_models.py (its gpt at width 128, torchvision's resnet18), whose
    actions take milliseconds on a core rather than microseconds; exported with
    measured node times when `profile` (timings per node) is above 0."""
    if not name.startswith("modelled:"):
        return dict(train_bench.make_fixtures.make_fixture(name, work, rows=64),
                    loss=train_bench.make_fixtures.LOSS[name])
    import modelled_models  # tests/models, on the path through train_bench
    model = name.split(":", 1)[1]
    modelled_models.main([model, work, "2", "64", str(profile)])  # microbatches of 2 rows
    return {"graph": os.path.join(work, model + ".json"),
            "package": os.path.join(work, model + ".ptpkg"),
            "data": os.path.join(work, model + "_data.pt")}


def torch_rows(planner, name, work, steps, dump=None, profile=0):
    fx = fixture(name, work, profile)
    cluster = os.path.join(work, "cluster4.json")
    train_bench.cluster(cluster, 4)
    job = cli(planner, "jobs", "create", "--graph", fx["graph"], "--cluster", cluster,
              *PLAN_A[1], "--model-package", fx["package"], "--data",
              "tensors:" + fx["data"], "--batch-size", "8", "--optimizer", "adamw", "--lr",
              "1e-3", "--max-steps", "1000000")["id"]
    workers = start_workers(planner, job, work, lambda r: ["--executor", "torch"])
    rows, a_versions = [], [1]
    try:
        wait_steps(planner, job, 1, steps, workers)
        for label, options in TARGETS:
            version = switch(planner, job, label, options, steps, workers)
            rows.append((name, label, version_row(planner, job, version)))
            a_versions.append(switch(planner, job, "back to A", PLAN_A[1], steps, workers))
        # The noise floor: plan A itself, run after each X in the same job.
        measured = {r["version"]: r["measured_step_seconds"]
                    for r in cli(planner, "jobs", "versions", job)}
        A_RUNS[name] = [measured.get(v, 0) for v in a_versions]
        for i, (_, _, row) in enumerate(rows):  # A just before and just after each X
            row["a_around"] = A_RUNS[name][i:i + 2]
        STAGE_ROWS.extend(stage_rows(planner, job, name, [r[2]["version"] for r in rows]))
        if dump:
            os.makedirs(dump, exist_ok=True)
            base = os.path.join(dump, name.replace(":", "_"))
            dump_job(planner, job, base + ".json")
            shutil.copyfile(fx["graph"], base + "_graph.json")  # the costs it planned with
    finally:
        stop(workers)
        subprocess.run([train_bench.CLI, "--planner", planner.address, "jobs", "cancel", job],
                       capture_output=True)
    return rows


def straggler_row(planner, work, label, extra, steps):
    graph, cluster = fidelity_bench.write_inputs(work, 1e3)
    job = cli(planner, "jobs", "create", "--graph", graph, "--cluster", cluster, "--ranks",
              "4", "--schedule", "1F1B", "--microbatches", "8")["id"]
    workers = [subprocess.Popen(
        [train_bench.WORKER, "--planner", planner.address, "--job", job, "--worker-id",
         "w%d" % r, "--device", "gpu%d" % r, "--steps", str(steps)] + extra(r),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(4)]
    try:
        for w in workers:
            w.wait(timeout=900)
    finally:
        stop(workers)
    versions = cli(planner, "jobs", "versions", job)
    return label, versions, last_skip(planner, job)


def last_skip(planner, job):
    """The reason of the planner's last `replan_skipped` for `job`."""
    reason = ""
    for line in planner.stderr_text().splitlines():
        if "event=replan_skipped" in line and "job=" + job in line:
            m = re.search(r'reason="([^"]*)"', line)
            reason = m.group(1) if m else line
    return reason


def print_torch(rows):
    # "A around": plan A's measured step just before X (what X is predicted
    # from) and just after it; where they differ, the machine's load moved
    # while X ran and X's error carries that drift.
    print("| model | plan | predicted s | p50 s | p90 s | measured s | error | steps under p90 "
          "| A around, ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, label, r in rows:
        err = r["prediction_error_ratio"]
        print("| %s | %s | %.4f | %.4f | %.4f | %.4f | %s | %.0f%% of %d | %s |" % (
            name, label, r["predicted_step_seconds"], r["predicted_p50_step_seconds"],
            r["predicted_p90_step_seconds"], r["measured_step_seconds"],
            "%.1f%%" % (100 * err) if err is not None else "-", 100 * r["under_p90"],
            r["counted"], " / ".join("%.0f" % (1e3 * x) for x in r.get("a_around", []))))
    for name, runs in A_RUNS.items():
        ok = [x for x in runs if x > 0]
        if ok:
            print("%s plan A, its %d runs in the job: %s ms (max / min %.2f)" % (
                name, len(ok), " ".join("%.1f" % (1e3 * x) for x in ok), max(ok) / min(ok)))


def percent(x):
    return "%.1f%%" % (100 * x) if x is not None else "-"


def print_straggler(rows):
    print("| case | replans | predicted gain | measured gain | gain error | predicted s | "
          "measured s | last skip |")
    print("|---|---|---|---|---|---|---|---|")
    for label, versions, skip in rows:
        replans = [v for v in versions if v["version"] > 1]
        if not replans:
            print("| %s | 0 | - | - | - | - | %.4f | %s |" % (
                label, versions[0]["measured_step_seconds"], skip))
        for v in replans:
            pg, mg = v["predicted_gain_ratio"], v["measured_gain_ratio"]
            gerr = abs(mg - pg) / pg if pg and mg is not None else None
            print("| %s | v%d (%s) | %s | %s | %s | %.4f | %.4f | %s |" % (
                label, v["version"], v["trigger"], percent(pg), percent(mg), percent(gerr),
                v["predicted_step_seconds"], v["measured_step_seconds"], skip))


def keep_log(planner, dump, part):
    """With --dump: the planner's log of `part` as DIR/planner-PART.log (its
    replan decisions and the costs each prediction simulated)."""
    if dump:
        os.makedirs(dump, exist_ok=True)
        shutil.copyfile(planner.stderr_path, os.path.join(dump, "planner-%s.log" % part))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,cnn")
    parser.add_argument("--steps", type=int, default=40,
                        help="steps of each version before the next switch")
    parser.add_argument("--straggler-steps", type=int, default=120)
    parser.add_argument("--parts", default="torch,straggler")
    parser.add_argument("--dump", metavar="DIR",
                        help="write each torch job's reports and plans to DIR/MODEL.json "
                             "and the planner's log of each part to DIR/planner-PART.log")
    parser.add_argument("--profile", type=int, default=5, metavar="N",
                        help="export the modelled models with each node timed N times "
                             "(pipeplan_export.py --profile; 0: flop-derived costs)")
    args = parser.parse_args()
    require_built()
    work = tempfile.mkdtemp(prefix="pipeplan-prediction-bench-")
    parts = args.parts.split(",")
    if "torch" in parts:
        rows = []
        with PlannerProcess(planner_binary(), ["--replan=off", "--replan-warmup-steps=2"]) as p:
            try:
                for name in args.models.split(","):
                    rows += torch_rows(p, name, work, args.steps, args.dump, args.profile)
            finally:
                keep_log(p, args.dump, "torch")
        print("torch executor, 4 workers on CPU, batch 8 in 4 microbatches; every plan "
              "predicted under plan A's calibration")
        print_torch(rows)
        print_stages(STAGE_ROWS)
    if "straggler" in parts:
        rows = []
        flags = ["--replan=on", "--replan-min-interval-seconds=3", "--replan-min-steps=10",
                 "--replan-warmup-steps=2", "--replan-horizon-steps=100000"]
        with PlannerProcess(planner_binary(), flags) as p:
            try:
                for x in (1.5, 2.0, 3.0):
                    rows.append(straggler_row(
                        p, work, "w2 %.1fx slower" % x,
                        lambda r, x=x: ["--slowdown", str(x)] if r == 2 else [],
                        args.straggler_steps))
                rows.append(straggler_row(p, work, "+-10% noise", lambda r: ["--noise", "0.1"],
                                          args.straggler_steps))
            finally:
                keep_log(p, args.dump, "straggler")
        print("synthetic executor, 16-node chain, 1F1B, 4 ranks, 8 microbatches")
        print_straggler(rows)


if __name__ == "__main__":
    main()
