#!/usr/bin/env python3
"""Recovery of an elastic job (docs/elastic.md), with real processes on 127.0.0.1.

Worker kill: 4 `pipeplan-worker --executor torch` processes train the gpt
fixture (4 ranks, 1F1B, checkpoints every --checkpoint-every steps); one is
killed with SIGKILL at a step past the first checkpoints. Recovery is the time
from the kill to the first step every survivor completes on the new plan
version; steps lost are the steps after the checkpoint the ranks rolled back to.

Worker SIGTERM: the same with SIGTERM, a graceful leave (docs/elastic.md):
from the signal to the first step every other worker completes on the new
version; steps lost as above (0 when the leave's checkpoint was written).

Worker SIGSTOP: the same with SIGSTOP, a hung worker that closes no socket:
the planner loses it after its lease and the others' stall watch ends their
waits on it (docs/elastic.md).

Planner kill: the planner is killed with SIGKILL during training and started
again at once on the same data directory and port. Recovery is the time from
the kill until the planner has stored a report of a step completed after the
restart; steps lost are steps the workers dropped (they keep training).

Each is repeated --trials times (median printed). Usage:
  bench/python/elastic_bench.py --build build [--trials 5] [--lease 2]

--defaults measures what a user gets (issue 26): the planner's default flags
(10 s lease, calibration replans on), checkpoints every 50 steps. Worker kill
-9 of one of 4: the survivors' first step after the kill (median and p90),
steps redone; a lost host (cpu2 and cpu3 on host h1, both killed at once).

--drills N (with or without --defaults): one job, N kill drills: each kills a
random worker at a random moment (during steps, right after a replan was
asked for: during the plan switch and its rendezvous, or at a checkpoint
step: during the write), checks that the others step again within 180 s
(else a hang), then restarts the killed worker and waits for the job to
grow back. At the end: median and p90 of recovery and steps redone per
moment, and every loss any worker reported against the single-process
reference at its step, in the reference's --pipelined mode (the job's own
arithmetic), computed after the drills with --together for the steps whose
split held both uses of a tied parameter on one stage: how many agree bit
for bit, the largest difference, and how many are off by more than 1e-3
(wrong).

Each kill prints a timeline: when (after the kill) the first survivor
dropped its step, the planner suspected and lost the worker and published
the new version, the survivors switched (with the switch's compile wait
and state move) and stepped. --faults kill|host picks the --defaults
faults; --keep keeps the work folder (worker and planner logs).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

import drill_losses
from drill_losses import events

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


class Planner:
    def __init__(self, build, data, lease, port=0, defaults=False):
        self.out = open(os.path.join(data, "planner.out"), "a")
        self.err = open(os.path.join(data, "planner.err"), "a")
        flags = [os.path.join(build, "planner_service/server/pipeplan-planner"),
                 "--listen", "127.0.0.1:%d" % port, "--metrics-listen", "off",
                 "--data-dir", os.path.join(data, "db")]
        if not defaults:
            # Calibration replans stay out of the measurement: only a plan
            # without a lost device (infinitely better) passes this gain.
            flags += ["--lease-seconds", str(lease), "--replan-min-interval-seconds", "100000",
                      "--replan-min-gain", "0.99"]
        self.p = subprocess.Popen(flags, stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError("planner did not start: " + line)
        self.address = line.split()[-1]
        self.port = int(self.address.rsplit(":", 1)[1])

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()


def wait_until(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + what)


def create_gpt_job(args, work, planner, steps, *flags, ranks=4):
    """The id of a new job of `ranks` ranks (4) training the fixture's gpt for
    `steps` steps; `flags`: more `jobs create` flags (checkpoints, snapshots)."""
    cli = os.path.join(args.build, "client/pipeplan")
    out = subprocess.run(
        [cli, "--planner", planner.address, "jobs", "create", "--graph",
         os.path.join(work, "gpt.json"), "--cluster", os.path.join(work, "cluster.json"),
         "--ranks", str(ranks), "--schedule", "1F1B", "--microbatches", "4", "--method", "dp",
         "--model-package", os.path.join(work, "gpt.ptpkg"), "--data",
         "tensors:" + os.path.join(work, "gpt_data.pt"), "--batch-size", "8",
         "--optimizer", "adamw", "--lr", "1e-3", "--max-steps", str(steps), *flags, "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["id"]


def start_job(args, work, planner, steps):
    return create_gpt_job(args, work, planner, steps,
                          "--checkpoint-dir", tempfile.mkdtemp(dir=work, prefix="ckpt-"),
                          "--checkpoint-every", str(args.checkpoint_every))


# {worker output path: [(arrival time, line)]}: every line of a worker's
# stdout with when the bench read it (the worker flushes each event at
# once), for the recovery timeline.
ARRIVALS = {}


def copy_lines(pipe, path):
    """Appends each line of `pipe` to `path` and records when it came."""
    with open(path, "a") as f:
        for line in pipe:
            ARRIVALS.setdefault(path, []).append((time.time(), line))
            f.write(line)
            f.flush()


def start_worker(args, work, planner, job, r, tag):
    path = os.path.join(work, "%s-w%d.out" % (tag, r))
    open(path, "a").close()  # read before the worker's first line
    timeouts = [] if args.defaults else ["--comm-timeout-seconds", "20",
                                         "--connect-timeout-seconds", "20"]
    p = subprocess.Popen(
        [os.path.join(args.build, "worker_daemon/pipeplan-worker"), "--planner", planner.address,
         "--job", job, "--worker-id", "w%d" % r, "--device", "cpu%d" % r, "--transport", "gloo",
         "--listen-host", "127.0.0.1", "--executor", "torch", "--stage-cache",
         os.path.join(work, "stage-cache")] + timeouts,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=copy_lines, args=(p.stdout, path), daemon=True).start()
    return p, path


def last_step(path, version=None):
    s = [int(e["step"]) for e in events(path, "step")
         if version is None or e["plan_version"] == str(version)]
    return max(s) if s else -1


def newest_version(paths):
    v = [int(e["plan_version"]) for p in paths for e in events(p, "step")]
    return max(v) if v else 0


def ranks_of(path):
    """{plan version: ranks} of the versions the worker switched into."""
    return {int(e["plan_version"]): int(e["ranks"]) for e in events(path, "plan_switch")}


def first_step_after(path, version, ranks=None):
    """Step index of the first `event=step` of a plan version > `version` (with `ranks`
    ranks when given), or -1."""
    shapes = ranks_of(path) if ranks else {}
    for e in events(path, "step"):
        v = int(e["plan_version"])
        if v > version and (ranks is None or shapes.get(v) == ranks):
            return int(e["step"])
    return -1


def compile_wait(paths, version):
    """The longest wait for stage compilation in the survivors' first switch past `version`."""
    waits = []
    for p in paths:
        later = [e for e in events(p, "plan_switch") if int(e["plan_version"]) > version]
        if later:
            waits.append(float(later[0].get("compile_wait_seconds", 0)))
    return max(waits) if waits else 0.0


def planner_marks(work, since):
    """{event: seconds after `since`} of the planner's first worker_suspected,
    worker_lost and plan_published lines logged after `since`."""
    marks = {}
    with open(os.path.join(work, "planner.err")) as f:
        for line in f:
            m = re.match(r"ts=(\S+) level=\S+ event=(\S+)", line)
            if not m or m.group(2) not in ("worker_suspected", "worker_lost", "plan_published",
                                           "contingency_used", "contingency_stale"):
                continue
            t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=timezone.utc).timestamp()
            if t >= since - 0.001:
                marks.setdefault(m.group(2), t - since)
    return marks


def arrival(path, since, pred):
    """Seconds after `since` of the first output line of `path` matching `pred`, or None."""
    for t, line in ARRIVALS.get(path, []):
        if t >= since and pred(line):
            return t - since
    return None


def timeline(work, killed, survivors, running):
    """One line: where the recovery went, from the kill (docs/elastic.md)."""
    def newer(line, name):
        m = re.match(r"event=%s .*plan_version=(\d+)" % name, line)
        return m is not None and int(m.group(1)) > running

    drops = [arrival(p, killed, lambda l: l.startswith("event=step_dropped")) for p in survivors]
    switches = [arrival(p, killed, lambda l: newer(l, "plan_switch")) for p in survivors]
    steps = [arrival(p, killed, lambda l: newer(l, "step")) for p in survivors]
    costs = {}
    for p in survivors:
        for e in events(p, "plan_switch"):
            if int(e["plan_version"]) > running:
                for k in ("switch_seconds", "compile_wait_seconds", "state_move_seconds"):
                    costs[k] = max(costs.get(k, 0.0), float(e.get(k, 0)))
                break
    marks = planner_marks(work, killed)
    # Whether the loss published the plan computed ahead for it (its stages
    # compiled by the workers before the kill): docs/elastic.md.
    ahead = ("used" if "contingency_used" in marks else
             "stale" if "contingency_stale" in marks else "none")

    def at(v):
        v = [x for x in (v if isinstance(v, list) else [v]) if x is not None]
        return "%.2f" % max(v) if v else "-"
    return ("timeline (s after the kill): first drop %s, suspected %s, lost %s, published %s, "
            "switched %s (switch %.2f: compile wait %.2f, state move %.2f), first step %s; "
            "contingency %s" % (
                at(min([d for d in drops if d is not None], default=None)),
                at(marks.get("worker_suspected")), at(marks.get("worker_lost")),
                at(marks.get("plan_published")), at(switches),
                costs.get("switch_seconds", 0), costs.get("compile_wait_seconds", 0),
                costs.get("state_move_seconds", 0), at(steps), ahead))


def last_step_on_ranks(path, ranks):
    shapes = ranks_of(path)
    s = [int(e["step"]) for e in events(path, "step") if shapes.get(int(e["plan_version"])) == ranks]
    return max(s) if s else -1


def cancel(args, planner, job):
    subprocess.run([os.path.join(args.build, "client/pipeplan"), "--planner", planner.address,
                    "jobs", "cancel", job], capture_output=True)


def end_trial(args, planner, job, workers):
    """Kills the trial's workers still running (all started here) and cancels its job."""
    for p, _ in workers:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
    cancel(args, planner, job)


def worker_kill_trial(args, work, planner, trial, sig=signal.SIGKILL, victims=(2,)):
    job = start_job(args, work, planner, 100000)
    tag = {signal.SIGKILL: "wk%d", signal.SIGTERM: "wt%d", signal.SIGSTOP: "wh%d"}[sig] % trial
    if len(victims) > 1:
        tag = "host%d" % trial
    workers = [start_worker(args, work, planner, job, r, tag) for r in range(4)]
    try:
        # Past a checkpoint, at a different step of the interval each trial.
        kill_at = args.checkpoint_every + 1 + (7 * trial) % args.checkpoint_every
        wait_until(lambda: last_step(workers[2][1]) >= kill_at, 600, "steps")
        running = newest_version([p for _, p in workers])
        for v in victims:
            workers[v][0].send_signal(sig)
        killed = time.time()
        # A stopped worker hangs (end_trial kills it); the others end their
        # waits on it through the stall watch.
        for v in victims:
            if sig != signal.SIGSTOP and workers[v][0].wait(timeout=120) != (
                    0 if sig == signal.SIGTERM else -sig):
                raise RuntimeError("w%d ended with %d" % (v, workers[v][0].returncode))
        survivors = [workers[r][1] for r in range(4) if r not in victims]
        left = 4 - len(victims)
        try:
            wait_until(lambda: all(first_step_after(p, running, left) >= 0 for p in survivors),
                       180, "a step on a newer version")
        except RuntimeError:
            ended = ["w%d exited %d" % (r, workers[r][0].poll()) for r in range(4)
                     if r not in victims and workers[r][0].poll() is not None]
            raise RuntimeError("no step on a newer version within 180 s (%s); logs in %s" % (
                ", ".join(ended) or "every survivor running", work))
        recovery = time.time() - killed
        print(timeline(work, killed, survivors, running), flush=True)
        # Every version before the kill ran on all four.
        before = max(last_step_on_ranks(p, 4) for p in survivors)
        resumed = first_step_after(survivors[0], running, left)
        return recovery, before + 1 - resumed, compile_wait(survivors, running)
    finally:
        end_trial(args, planner, job, workers)


def planner_kill_trial(args, work, planner, trial):
    job = start_job(args, work, planner, 100000)
    tag = "pk%d" % trial
    workers = [start_worker(args, work, planner, job, r, tag) for r in range(4)]
    try:
        wait_until(lambda: last_step(workers[0][1]) >= 20, 300, "steps")
        port = planner.port
        planner.kill()
        killed = time.time()
        steps_at_kill = last_step(workers[0][1])
        planner = Planner(args.build, work, args.lease, port, args.defaults)
        cli = os.path.join(args.build, "client/pipeplan")

        def stored_after_restart():
            out = subprocess.run([cli, "--planner", planner.address, "jobs", "reports", job,
                                  "--json"], capture_output=True, text=True).stdout
            steps = [int(m) for m in re.findall(r'"step":\s*"?(\d+)', out)]
            return steps and max(steps) > steps_at_kill

        wait_until(stored_after_restart, 120, "a report after the restart")
        recovery = time.time() - killed
        dropped = sum(len(events(p, "step_dropped")) for _, p in workers)
        return planner, recovery, dropped, 0.0
    finally:
        end_trial(args, planner, job, workers)


def p90(values):
    v = sorted(values)
    return v[max(0, -(-9 * len(v) // 10) - 1)]


def every_worker_steps_on(paths, ranks, after):
    """True once each worker ran a step on a version newer than `after` of `ranks` ranks."""
    return all(first_step_after(p, after, ranks) >= 0 for p in paths)


def wait_for_checkpoint_step(args, paths):
    """Returns once a worker reports the step after which every rank writes a
    checkpoint (the kill then lands in the write)."""
    every = args.checkpoint_every
    start = max(last_step(p) for p in paths)
    target = (start // every + 1) * every - 1
    wait_until(lambda: max(last_step(p) for p in paths) >= target, 600, "a checkpoint step")


def one_drill(args, work, planner, job, workers, rng):
    """Kills a random worker at a random moment; (moment, victim, recovery s or
    None: a hang, steps redone, timeline)."""
    paths = [p for _, p in workers]
    wait_until(lambda: every_worker_steps_on(paths, 4, 0), 600, "all four training")
    time.sleep(rng.uniform(0.0, 3.0))
    moment = rng.choice(["step", "switch", "checkpoint"])
    if moment == "switch":
        # A replan by hand: the kill lands in its plan switch (compile,
        # rendezvous, state move) or just after.
        subprocess.run([os.path.join(args.build, "client/pipeplan"), "--planner",
                        planner.address, "jobs", "replan", job], capture_output=True)
        time.sleep(rng.uniform(0.0, 1.5))
    elif moment == "checkpoint":
        wait_for_checkpoint_step(args, paths)
    victim = rng.randrange(4)
    before = newest_version(paths)
    workers[victim][0].send_signal(signal.SIGKILL)
    killed = time.time()
    workers[victim][0].wait()
    done_before = max(last_step(p) for p in paths)
    survivors = [paths[r] for r in range(4) if r != victim]
    try:
        wait_until(lambda: every_worker_steps_on(survivors, 3, before), 180, "resume")
    except RuntimeError:
        return moment, victim, None, 0, ""
    recovery = time.time() - killed
    redone = max(0, done_before + 1 - first_step_after(survivors[0], before, 3))
    line = timeline(work, killed, survivors, before)
    workers[victim] = start_worker(args, work, planner, job, victim, "drill")
    grown = newest_version(survivors)
    wait_until(lambda: every_worker_steps_on(paths[:victim] + [workers[victim][1]] +
                                             paths[victim + 1:], 4, grown), 600, "grow back")
    return moment, victim, recovery, redone, line


def drills(args, work, planner):
    job = start_job(args, work, planner, 100000)
    workers = [start_worker(args, work, planner, job, r, "drill") for r in range(4)]
    rng = random.Random(args.seed)
    results = []
    try:
        for d in range(args.drills):
            moment, victim, recovery, redone, line = one_drill(args, work, planner, job, workers,
                                                               rng)
            results.append((moment, recovery, redone, line.rsplit("contingency ", 1)[-1]))
            print("drill %d: kill w%d at %s: %s, %d steps redone; %s" % (
                d, victim, moment, "HANG" if recovery is None else "%.2f s" % recovery, redone,
                line), flush=True)
            if recovery is None:
                break
    finally:
        end_trial(args, planner, job, workers)
    # After the drills: the reference follows the splits that ran each step.
    paths = [p for _, p in workers]
    reference = drill_losses.reference_losses(
        work, args.reference_steps,
        together=drill_losses.together_ranges(args, work, planner, job, paths))
    checked, exact, largest, wrong = drill_losses.wrong_losses(paths, reference)
    print_drill_table(results)
    print("%d losses checked against the reference, %d bit for bit, largest difference %.3g, "
          "%d wrong (> 1e-3)" % (checked, exact, largest, wrong))


def print_drill_table(results):
    """Median and p90 of recovery and steps redone, per moment and for all."""
    print("| drills | moment | hangs | recovery median (s) | p90 (s) | steps redone median | max | "
          "contingency used |")
    print("|---|---|---|---|---|---|---|---|")
    for moment in ("step", "switch", "checkpoint", "all"):
        rows = [r for r in results if moment in ("all", r[0])]
        ok = [r for r in rows if r[1] is not None]
        if not rows:
            continue
        rec = [r[1] for r in ok] or [-1]
        red = [r[2] for r in ok] or [-1]
        print("| %d | %s | %d | %.2f | %.2f | %g | %d | %d |" % (
            len(rows), moment, len(rows) - len(ok), statistics.median(rec), p90(rec),
            statistics.median(red), max(red), sum(1 for r in ok if r[3] == "used")))


def print_rows(rows_by_name):
    print("| fault | recovery (s), median | p90 | steps redone, median | "
          "trials (s / steps / compile wait s) |")
    print("|---|---|---|---|---|")
    for name, rows in rows_by_name:
        print("| %s | %.2f | %.2f | %g | %s |" % (
            name, statistics.median(r[0] for r in rows), p90(r[0] for r in rows),
            statistics.median(r[1] for r in rows), ", ".join("%.2f/%d/%.1f" % r for r in rows)))


def classic(args, work, planner):
    wk = [worker_kill_trial(args, work, planner, t) for t in range(args.trials)]
    wt = [worker_kill_trial(args, work, planner, t, signal.SIGTERM) for t in range(args.trials)]
    wh = [worker_kill_trial(args, work, planner, t, signal.SIGSTOP) for t in range(args.trials)]
    pk = []
    for t in range(args.trials):
        planner, recovery, dropped, wait = planner_kill_trial(args, work, planner, t)
        pk.append((recovery, dropped, wait))
    print("lease %.1f s, checkpoint every %d steps, 4 workers (torch, gpt fixture), "
          "%d trials" % (args.lease, args.checkpoint_every, args.trials))
    print_rows((("worker kill -9", wk), ("worker SIGTERM (leave)", wt),
                ("worker SIGSTOP (hang)", wh), ("planner kill -9", pk)))
    return planner


def logged(name, t, row):
    print("%s trial %d: %.2f s, %d steps redone, %.1f s compile wait" % ((name, t) + row),
          flush=True)
    return row


def with_defaults(args, work, planner):
    rows = []
    if "kill" in args.faults:
        rows.append(("worker kill -9 (1 of 4)", [
            logged("kill", t, worker_kill_trial(args, work, planner, t))
            for t in range(args.trials)]))
    if "host" in args.faults:
        rows.append(("lost host (2 of 4 on h1)", [
            logged("host", t, worker_kill_trial(args, work, planner, t, victims=(2, 3)))
            for t in range(args.trials)]))
    print("the planner's defaults (10 s lease), checkpoint every %d steps, 4 workers (torch, "
          "gpt fixture), %d trials" % (args.checkpoint_every, args.trials))
    print_rows(rows)


def write_inputs(work, devices=4):
    """The gpt fixture (48 rows: 6 batches of 8 an epoch) and a cluster of
    `devices` CPUs, two a host, in `work`."""
    subprocess.run([sys.executable, os.path.join(SRC, "tests/models/make_fixtures.py"),
                    "--out-dir", work, "--model", "gpt", "--rows", "48"],
                   check=True, capture_output=True)
    with open(os.path.join(work, "cluster.json"), "w") as f:
        json.dump({"devices": [{"id": "cpu%d" % d, "host": "h%d" % (d // 2), "flops": 1e12,
                                "memory_bytes": 8e9} for d in range(devices)],
                   "intra_host_bandwidth": 10e9, "inter_host_bandwidth": 10e9}, f)


def arg_parser(doc):
    """The parser of a benchmark that starts a Planner: its usage is its
    docstring `doc`, --build the build tree the Planner's binary is in."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    return ap


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--lease", type=float, default=2.0)
    ap.add_argument("--checkpoint-every", type=int, default=None)
    ap.add_argument("--defaults", action="store_true")
    ap.add_argument("--drills", type=int, default=0)
    ap.add_argument("--reference-steps", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    ap.add_argument("--faults", default="kill,host",
                    help="with --defaults: which of kill,host to run")
    args = ap.parse_args()
    if args.checkpoint_every is None:
        args.checkpoint_every = 50 if args.defaults else 10
    work = tempfile.mkdtemp(prefix="pipeplan-elastic-bench-")
    planner = None
    try:
        write_inputs(work)
        planner = Planner(args.build, work, args.lease, defaults=args.defaults)
        if args.drills:
            drills(args, work, planner)
        elif args.defaults:
            with_defaults(args, work, planner)
        else:
            planner = classic(args, work, planner)
        planner.kill()
    except BaseException:
        args.keep = True  # the logs say what went wrong
        raise
    finally:
        if planner is not None and planner.p.poll() is None:
            planner.kill()
        if args.keep:
            print("work folder (kept): " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
