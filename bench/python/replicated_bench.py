#!/usr/bin/env python3
"""Replicated planners on one PostgreSQL (issue 15), real processes on this
machine: a PostgreSQL server started from Debian's binaries in a temp dir
(unix socket, durable defaults: fsync and synchronous_commit on), and 1 or 3
`pipeplan-planner --store postgres://...` replicas.

1. Load: `pipeplan-loadgen` against 1 replica, then against 3 (the same
   generator spreading calls round robin over one client per replica):
   cached Plan/s (closed loop) and ReportStep at --workers x 1/s (open loop;
   calls/s, p50, p99, errors). Run it at a few --workers to find where p99 or
   errors break.
2. Failover: 3 replicas, a job created on replica 0 (its owner), a worker
   heartbeating through replica 1; replica 0 is killed with SIGKILL and the
   time until another replica logs `event=job_owned` for the job is taken
   (--trials times, median and max printed), against --job-lease seconds.

Usage:
  bench/python/replicated_bench.py --build build [--workers 1000,3000] [--seconds 5]
                            [--trials 3] [--job-lease 2]
"""
import argparse
import glob
import os
import pwd
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


class Postgres:
    def __init__(self):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            sys.exit("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = os.path.dirname(bins[-1])
        self.root = tempfile.mkdtemp(prefix="pipeplan-pgbench-")
        os.chmod(self.root, 0o755)
        self.as_postgres = os.getuid() == 0
        if self.as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.run("%s/initdb -D %s/data -A trust -U pipeplan --no-locale -E UTF8 > %s/initdb.log 2>&1"
                 % (self.bin, self.root, self.root))
        self.run("%s/pg_ctl -D %s/data -l %s/server.log -w -o \"-k %s -c listen_addresses='' "
                 "-c max_connections=200\" start > /dev/null" % (self.bin, self.root, self.root,
                                                                self.root))
        self.db = 0

    def run(self, cmd):
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", "sh", "-c", cmd]
            subprocess.run(cmd, check=True)
        else:
            subprocess.run(cmd, shell=True, check=True)

    def new_database(self):
        self.db += 1
        name = "bench%d" % self.db
        self.run("%s/psql -q -h %s -U pipeplan -d postgres -c 'CREATE DATABASE %s'"
                 % (self.bin, self.root, name))
        return "postgresql:///%s?host=%s&user=pipeplan" % (name, self.root)

    def stop(self):
        self.run("%s/pg_ctl -D %s/data -m fast -w stop > /dev/null" % (self.bin, self.root))
        shutil.rmtree(self.root, ignore_errors=True)


class Planner:
    def __init__(self, build, url, job_lease, log_dir, n):
        self.err_path = os.path.join(log_dir, "planner%d.err" % n)
        self.err = open(self.err_path, "w")
        self.p = subprocess.Popen(
            [os.path.join(build, "planner_service/server/pipeplan-planner"), "--listen",
             "127.0.0.1:0", "--metrics-listen", "off", "--store", url, "--job-lease-seconds",
             str(job_lease), "--lease-seconds", "10", "--replan", "off"],
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"listening on (\S+)", line)
        if not m:
            self.kill()
            sys.exit("planner did not start: %s" % open(self.err_path).read()[-2000:])
        self.address = m.group(1)

    def log(self):
        with open(self.err_path) as f:
            return f.read()

    def kill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()


def cli(build, *args):
    return subprocess.run([os.path.join(build, "client/pipeplan")] + list(args),
                          capture_output=True, text=True, timeout=120)


def load(args, pg, replicas, workers, log_dir):
    url = pg.new_database()
    planners = [Planner(args.build, url, args.job_lease, log_dir, i) for i in range(replicas)]
    try:
        out = subprocess.run(
            [os.path.join(args.build, "bench/pipeplan-loadgen"), "--planner",
             ",".join(p.address for p in planners), "--seconds", str(args.seconds),
             "--workers", str(workers), "--cold", "off", "--concurrency", str(args.concurrency)],
            capture_output=True, text=True, timeout=600)
        rows = {}
        for line in out.stdout.splitlines():
            m = re.match(r"(Plan cached|ReportStep).*?\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+"
                         r"([\d.]+)\s+([\d.]+)$", line)
            if m:
                rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), float(m.group(4)),
                                    float(m.group(5)), float(m.group(6)))
        if len(rows) != 2:
            print(out.stdout, out.stderr)
        return rows
    finally:
        for p in planners:
            p.kill()


def failover(args, pg, log_dir):
    url = pg.new_database()
    planners = [Planner(args.build, url, args.job_lease, log_dir, i) for i in range(3)]
    try:
        r = cli(args.build, "--planner", planners[0].address, "jobs", "create", "--graph",
                os.path.join(SRC, "tests/data/chain_small.json"), "--cluster",
                os.path.join(SRC, "tests/data/cluster_8xa100.json"), "--ranks", "4", "--json")
        job = re.search(r'"(job-[0-9a-f]+)"', r.stdout).group(1)
        owned = "event=job_owned job=%s" % job
        if owned not in planners[0].log():
            sys.exit("replica 0 does not own the job it created")
        planners[0].kill()
        killed = time.monotonic()
        while time.monotonic() - killed < args.job_lease + 30:
            if any(owned in p.log() for p in planners[1:]):
                return time.monotonic() - killed
            time.sleep(0.02)
        return float("nan")
    finally:
        for p in planners:
            p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--workers", default="1000,3000")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--job-lease", type=float, default=2)
    args = ap.parse_args()
    pg = Postgres()
    log_dir = tempfile.mkdtemp(prefix="pipeplan-repbench-logs-")
    try:
        print("%-9s %8s %14s %14s %9s %9s %7s" % ("replicas", "workers", "Plan cached/s",
                                                 "reports/s", "p50 ms", "p99 ms", "errors"))
        for workers in [int(w) for w in args.workers.split(",")]:
            for replicas in (1, 3):
                rows = load(args, pg, replicas, workers, log_dir)
                plan = rows.get("Plan cached", (0, 0, 0, 0, 0))
                rep = rows.get("ReportStep", (0, 0, 0, 0, 0))
                print("%-9d %8d %14.0f %14.0f %9.2f %9.2f %7d" % (
                    replicas, workers, plan[2], rep[2], rep[3], rep[4], rep[1]), flush=True)
        times = [failover(args, pg, log_dir) for _ in range(args.trials)]
        print("\nfailover (kill -9 of the owner -> another replica owns the job), job lease "
              "%gs: median %.2fs, max %.2fs over %d trials" % (
                  args.job_lease, statistics.median(times), max(times), len(times)))
    finally:
        pg.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
