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
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


class Planner:
    def __init__(self, build, data, lease, port=0):
        self.out = open(os.path.join(data, "planner.out"), "a")
        self.err = open(os.path.join(data, "planner.err"), "a")
        self.p = subprocess.Popen(
            [os.path.join(build, "planner_service/server/pipeplan-planner"),
             "--listen", "127.0.0.1:%d" % port, "--metrics-listen", "off",
             "--data-dir", os.path.join(data, "db"), "--lease-seconds", str(lease),
             # Calibration replans stay out of the measurement: only a plan
             # without a lost device (infinitely better) passes this gain.
             "--replan-min-interval-seconds", "100000", "--replan-min-gain", "0.99"],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError("planner did not start: " + line)
        self.address = line.split()[-1]
        self.port = int(self.address.rsplit(":", 1)[1])

    def kill(self):
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()


def events(path, name):
    """[(dict of key=value)] of the `event=name` lines of a worker's output."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("event=%s " % name):
                out.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
    return out


def wait_until(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + what)


def start_job(args, work, planner, steps):
    cli = os.path.join(args.build, "client/pipeplan")
    out = subprocess.run(
        [cli, "--planner", planner.address, "jobs", "create", "--graph",
         os.path.join(work, "gpt.json"), "--cluster", os.path.join(work, "cluster.json"),
         "--ranks", "4", "--schedule", "1F1B", "--microbatches", "4", "--method", "dp",
         "--model-package", os.path.join(work, "gpt.ptpkg"), "--data",
         "tensors:" + os.path.join(work, "gpt_data.pt"), "--batch-size", "8",
         "--optimizer", "adamw", "--lr", "1e-3", "--max-steps", str(steps),
         "--checkpoint-dir", tempfile.mkdtemp(dir=work, prefix="ckpt-"),
         "--checkpoint-every", str(args.checkpoint_every), "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["id"]


def start_worker(args, work, planner, job, r, tag):
    path = os.path.join(work, "%s-w%d.out" % (tag, r))
    f = open(path, "w")
    p = subprocess.Popen(
        [os.path.join(args.build, "worker_daemon/pipeplan-worker"), "--planner", planner.address,
         "--job", job, "--worker-id", "w%d" % r, "--device", "cpu%d" % r, "--transport", "gloo",
         "--listen-host", "127.0.0.1", "--comm-timeout-seconds", "20",
         "--connect-timeout-seconds", "20", "--executor", "torch", "--stage-cache",
         os.path.join(work, "stage-cache")],
        stdout=f, stderr=subprocess.STDOUT)
    return p, path


def last_step(path, version=None):
    s = [int(e["step"]) for e in events(path, "step")
         if version is None or e["plan_version"] == str(version)]
    return max(s) if s else -1


def newest_version(paths):
    v = [int(e["plan_version"]) for p in paths for e in events(p, "step")]
    return max(v) if v else 0


def first_step_after(path, version):
    """Step index of the first `event=step` of a plan version > `version`, or -1."""
    for e in events(path, "step"):
        if int(e["plan_version"]) > version:
            return int(e["step"])
    return -1


def last_step_upto(path, version):
    s = [int(e["step"]) for e in events(path, "step") if int(e["plan_version"]) <= version]
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


def worker_kill_trial(args, work, planner, trial, sig=signal.SIGKILL):
    job = start_job(args, work, planner, 100000)
    tag = {signal.SIGKILL: "wk%d", signal.SIGTERM: "wt%d", signal.SIGSTOP: "wh%d"}[sig] % trial
    workers = [start_worker(args, work, planner, job, r, tag) for r in range(4)]
    try:
        kill_at = 3 * args.checkpoint_every + 3 * trial
        wait_until(lambda: last_step(workers[2][1]) >= kill_at, 300, "steps")
        running = newest_version([p for _, p in workers])
        workers[2][0].send_signal(sig)
        killed = time.time()
        # A stopped worker hangs (end_trial kills it); the others end their
        # waits on it through the stall watch.
        if sig != signal.SIGSTOP and workers[2][0].wait(timeout=120) != (
                0 if sig == signal.SIGTERM else -sig):
            raise RuntimeError("w2 ended with %d" % workers[2][0].returncode)
        survivors = [workers[r][1] for r in (0, 1, 3)]
        wait_until(lambda: all(first_step_after(p, running) >= 0 for p in survivors), 120,
                   "a step on a newer version")
        recovery = time.time() - killed
        before = max(last_step_upto(p, running) for p in survivors)
        resumed = first_step_after(survivors[0], running)
        return recovery, before + 1 - resumed
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
        planner = Planner(args.build, work, args.lease, port)
        cli = os.path.join(args.build, "client/pipeplan")

        def stored_after_restart():
            out = subprocess.run([cli, "--planner", planner.address, "jobs", "reports", job,
                                  "--json"], capture_output=True, text=True).stdout
            steps = [int(m) for m in re.findall(r'"step":\s*"?(\d+)', out)]
            return steps and max(steps) > steps_at_kill

        wait_until(stored_after_restart, 120, "a report after the restart")
        recovery = time.time() - killed
        dropped = sum(len(events(p, "step_dropped")) for _, p in workers)
        return planner, recovery, dropped
    finally:
        end_trial(args, planner, job, workers)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--lease", type=float, default=2.0)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pipeplan-elastic-bench-")
    try:
        subprocess.run([sys.executable, os.path.join(SRC, "tests/models/make_fixtures.py"),
                        "--out-dir", work, "--model", "gpt", "--rows", "48"],
                       check=True, capture_output=True)
        with open(os.path.join(work, "cluster.json"), "w") as f:
            json.dump({"devices": [{"id": "cpu%d" % d, "host": "h0", "flops": 1e12,
                                    "memory_bytes": 8e9} for d in range(4)]}, f)
        planner = Planner(args.build, work, args.lease)
        wk = [worker_kill_trial(args, work, planner, t) for t in range(args.trials)]
        wt = [worker_kill_trial(args, work, planner, t, signal.SIGTERM)
              for t in range(args.trials)]
        wh = [worker_kill_trial(args, work, planner, t, signal.SIGSTOP)
              for t in range(args.trials)]
        pk = []
        for t in range(args.trials):
            planner, recovery, dropped = planner_kill_trial(args, work, planner, t)
            pk.append((recovery, dropped))
        planner.kill()
        print("lease %.1f s, checkpoint every %d steps, 4 workers (torch, gpt fixture), "
              "median of %d" % (args.lease, args.checkpoint_every, args.trials))
        print("| fault | recovery (s) | steps lost | trials (recovery s / steps lost) |")
        print("|---|---|---|---|")
        for name, rows in (("worker kill -9", wk), ("worker SIGTERM (leave)", wt),
                           ("worker SIGSTOP (hang)", wh), ("planner kill -9", pk)):
            print("| %s | %.2f | %g | %s |" % (
                name, statistics.median(r for r, _ in rows), statistics.median(s for _, s in rows),
                ", ".join("%.2f/%d" % r for r in rows)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
