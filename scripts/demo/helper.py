#!/usr/bin/env python3
"""The Python half of scripts/demo.sh: the demo's training data, its progress
line and its final summary. Every figure comes from the planner, read through
the `pipeplan` CLI (`jobs show`, `jobs reports`, `jobs versions`, `-o json`).

  helper.py data --out FILE [--rows 512]
      a `tensors:` file of token sequences for tests/models/tiny_models.py's
      GPT (vocabulary 64, 16 tokens): each row repeats a random motif of 4
      tokens, so the next token is learnable from the fourth position on and
      the loss falls from ln(64) = 4.16 towards ~1.
  helper.py wait --pp "PIPEPLAN ARGS" --job JOB --total N --batch B
                 --until COND --timeout S [--pid PID ...] [--since UNIXTIME]
      polls the job once a second and prints a progress line (step/total,
      loss, samples/s, plan version) until COND holds: `step>=K`,
      `version>=V` (a step of plan version V was reported) or `done` (the
      job completed). One updating line on a terminal, a plain line every few
      seconds otherwise (CI=true, or stdout not a terminal). Exits 1 when
      the job fails or is cancelled, a --pid (a worker) exits first, or S
      seconds pass; the message says which.
  helper.py summary --pp "PIPEPLAN ARGS" --job JOB --run DIR
      writes DIR/losses.csv, DIR/reports.json, DIR/versions.json and
      DIR/job.json, prints the loss curve and predicted against measured step
      time per plan version, and checks the run: every step reported once
      with a finite loss, a second plan version trained, and the loss fell.
      Exits 1 naming the first check that failed.
"""

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time

SPARK = "▁▂▃▄▅▆▇█"


class DemoError(Exception):
    pass


def cli(pp, *args, timeout=30):
    """Runs `pipeplan` (pp: the binary and its global flags) and returns stdout."""
    argv = shlex.split(pp) + list(args)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DemoError("`%s` did not answer within %d s" % (" ".join(args), timeout))
    if r.returncode != 0:
        raise DemoError("`pipeplan %s` failed (exit %d): %s"
                        % (" ".join(args), r.returncode, r.stderr.strip()))
    return r.stdout


def cli_json(pp, *args):
    return json.loads(cli(pp, *args, "-o", "json"))


# ---------------------------------------------------------------------------
# data


def cmd_data(args):
    import torch  # only here: `wait` and `summary` start in milliseconds

    g = torch.Generator().manual_seed(1)
    vocab, seq, period = 64, 16, 4
    motif = torch.randint(0, vocab, (args.rows, period), generator=g)
    tokens = motif.repeat(1, (seq + period) // period)[:, :seq + 1]
    torch.save({"inputs": tokens[:, :-1].clone(), "targets": tokens[:, 1:].clone()}, args.out)
    print("data: %d rows of %d tokens (a repeated motif of %d) -> %s"
          % (args.rows, seq, period, args.out))
    return 0


# ---------------------------------------------------------------------------
# wait


def step_rows(reports):
    """{step: row} of `jobs reports --json`, rows with a loss only."""
    return {r["step"]: r for r in reports if r.get("loss") is not None}


def parse_until(text):
    if text == "done":
        return ("done", 0)
    for key in ("step", "version"):
        if text.startswith(key + ">="):
            return (key, int(text[len(key) + 2:]))
    raise DemoError("--until wants done, step>=K or version>=V, got %r" % text)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by the demo's shell) counts as gone.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Progress:
    """One updating line on a terminal; a plain line every `every` s otherwise."""

    def __init__(self, every=5.0):
        self.tty = sys.stdout.isatty() and os.environ.get("CI", "") not in ("true", "1")
        self.every = every
        self.last_plain = 0.0
        self.last_text = None
        self.last_printed = None
        self.open_line = False

    def show(self, text, force=False):
        if self.tty:
            sys.stdout.write("\r\033[K" + text)
            self.open_line = True
        elif force or (text != self.last_text and time.monotonic() - self.last_plain >= self.every):
            sys.stdout.write(text + "\n")
            self.last_plain = time.monotonic()
            self.last_printed = text
        self.last_text = text
        sys.stdout.flush()

    def end(self):
        if self.tty and self.open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
        elif not self.tty and self.last_text and self.last_text != self.last_printed:
            self.show(self.last_text, force=True)
        self.open_line = False


def progress_text(rows, total, batch, history, started):
    elapsed = time.monotonic() - started
    if not rows:
        return "  waiting for the first step (workers compiling their stages)  %4.0fs" % elapsed
    last = max(rows)
    row = rows[last]
    # Samples/s over the last ~10 s of polls (steps the planner received).
    now = time.monotonic()
    window = [(t, s) for t, s in history if now - t <= 10.0] or history[-1:]
    rate = ""
    if len(window) >= 2 and window[-1][0] > window[0][0]:
        sps = (window[-1][1] - window[0][1]) * batch / (window[-1][0] - window[0][0])
        rate = "%7.1f samples/s" % sps
    else:
        rate = "%7s samples/s" % "-"
    return ("  step %4d/%d  loss %7.4f  %s  plan v%d  %4.0fs"
            % (last + 1, total, row["loss"], rate, row["plan_version"], elapsed))


def cmd_wait(args):
    kind, target = parse_until(args.until)
    deadline = time.monotonic() + args.timeout
    started = time.monotonic() - max(0.0, time.time() - args.since) if args.since \
        else time.monotonic()
    history = []
    progress = Progress()
    try:
        while True:
            job = cli_json(args.pp, "jobs", "show", args.job)
            reports = json.loads(cli(args.pp, "jobs", "reports", args.job, "--json"))
            rows = step_rows(reports)
            if rows:
                history.append((time.monotonic(), max(rows)))
            progress.show(progress_text(rows, args.total, args.batch, history, started))
            state = job.get("state", "")
            if state in ("JOB_FAILED", "JOB_CANCELLED"):
                raise DemoError("job %s: %s (%s)" % (args.job, state, job.get("failure_message", "")))
            versions = {r["plan_version"] for r in rows.values()}
            if kind == "step" and rows and max(rows) >= target:
                return 0
            if kind == "version" and versions and max(versions) >= target:
                return 0
            if state == "JOB_COMPLETED":
                if kind == "done":
                    return 0
                raise DemoError("the job completed (%d steps) before %s: nothing left to train on"
                                % (len(rows), args.until))
            for pid in args.pid:
                if not alive(pid):
                    raise DemoError("worker pid %d exited before %s (see its log)"
                                    % (pid, args.until))
            if time.monotonic() > deadline:
                raise DemoError("no %s within %d s" % (args.until, args.timeout))
            time.sleep(1.0)
    finally:
        progress.end()


# ---------------------------------------------------------------------------
# summary


def sparkline(values, width):
    """Buckets `values` into at most `width` columns (mean per bucket)."""
    if not values:
        return ""
    n = len(values)
    cols = min(width, n)
    means = []
    for c in range(cols):
        chunk = values[c * n // cols:(c + 1) * n // cols]
        means.append(sum(chunk) / len(chunk))
    lo, hi = min(means), max(means)
    span = hi - lo or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((m - lo) / span * len(SPARK)))] for m in means)


def loss_curve(rows, width=60):
    steps = sorted(rows)
    losses = [rows[s]["loss"] for s in steps]
    spark = sparkline(losses, width)
    per_col = len(steps) / len(spark)
    marks = [" "] * len(spark)
    switches = []
    for i in range(1, len(steps)):
        if rows[steps[i]]["plan_version"] != rows[steps[i - 1]]["plan_version"]:
            marks[min(len(spark) - 1, int(i / per_col))] = "^"
            switches.append("step %d: plan version %d" % (steps[i] + 1,
                                                         rows[steps[i]]["plan_version"]))
    lines = ["loss per step, steps 1..%d (a column is the mean of %.3g steps; ^ = plan switch)"
             % (len(steps), per_col),
             "  %7.4f %s %.4f" % (losses[0], spark, losses[-1])]
    if switches:
        lines.append("  %7s %s %s" % ("", "".join(marks).rstrip(), "; ".join(switches)))
    lines.append("")
    lines.append("  %6s %8s %10s %12s" % ("STEP", "VERSION", "LOSS", "STEP TIME"))
    picks = sorted({steps[min(len(steps) - 1, k * len(steps) // 10)] for k in range(10)}
                   | {steps[-1]})
    for s in picks:
        r = rows[s]
        lines.append("  %6d %8d %10.4f %10.1f ms" % (s + 1, r["plan_version"], r["loss"],
                                                     1000 * r["step_seconds"]))
    return "\n".join(lines)


def fmt_ms(seconds):
    return "-" if seconds is None else "%.1f ms" % (1000 * seconds)


def timing_table(rows, versions, observations, warmup):
    """Predicted against measured step time per plan version."""
    lines = [
        "predicted vs measured step time per plan version",
        "  PLANNED: the plan's step when published (the cluster file's speeds and links)",
        "  the planner's observation (`jobs show`, version 1's taken just before the replan):",
        "    OBSERVED steps, the step CALIBRATED from their timings, the MEASURED step",
        "    (makespan over ranks) and the ERROR between the two",
        "  TRAINED: steps the version ran; MEDIAN: their median step time (`jobs reports`,",
        "    slowest rank, after %d warm-up steps; version 1's last steps share the CPUs with"
        % warmup,
        "    version 2's compile)",
        "  %7s %-20s %10s %8s %10s %10s %7s %7s %10s"
        % ("VERSION", "SCHEDULE", "PLANNED", "OBSERVED", "CALIBRATED", "MEASURED", "ERROR",
           "TRAINED", "MEDIAN")]
    for v in versions:
        ver = v["version"]
        secs = [r["step_seconds"] for s, r in sorted(rows.items()) if r["plan_version"] == ver]
        median = statistics.median(secs[warmup:]) if len(secs) > warmup else None
        obs = observations.get(ver, {})
        err = obs.get("prediction_error_ratio")
        sched = "%s x%d" % (v["schedule"], v["chunks_per_rank"]) if v["chunks_per_rank"] > 1 \
            else v["schedule"]
        lines.append("  %7d %-20s %10s %8s %10s %10s %7s %7d %10s"
                     % (ver, sched, fmt_ms(v["step_seconds"]), obs.get("steps", "-"),
                        fmt_ms(obs.get("predicted_step_seconds")),
                        fmt_ms(obs.get("measured_step_seconds")),
                        "-" if err is None else "%.0f%%" % (100 * err), len(secs),
                        fmt_ms(median)))
    return "\n".join(lines)


def load_observations(run):
    """Observations `jobs show -o json` saved during the run, keyed by version."""
    out = {}
    for name in sorted(os.listdir(run)):
        if name.startswith("job-v") and name.endswith(".json"):
            with open(os.path.join(run, name)) as f:
                obs = json.load(f).get("observation")
            if obs:
                out[int(obs["plan_version"])] = obs
    return out


def cmd_summary(args):
    job = cli_json(args.pp, "jobs", "show", args.job)
    reports = json.loads(cli(args.pp, "jobs", "reports", args.job, "--json"))
    versions = json.loads(cli(args.pp, "jobs", "versions", args.job, "--json"))
    for name, doc in (("job.json", job), ("reports.json", reports), ("versions.json", versions)):
        with open(os.path.join(args.run, name), "w") as f:
            json.dump(doc, f, indent=1)
    if job.get("observation"):
        with open(os.path.join(args.run, "job-v%d.json" % int(job["plan_version"])), "w") as f:
            json.dump(job, f, indent=1)
    rows = step_rows(reports)
    with open(os.path.join(args.run, "losses.csv"), "w") as f:
        f.write("step,plan_version,loss,step_seconds\n")
        for s in sorted(rows):
            r = rows[s]
            f.write("%d,%d,%r,%r\n" % (s + 1, r["plan_version"], r["loss"], r["step_seconds"]))

    print(loss_curve(rows) if rows else "no step reports")
    print()
    print(timing_table(rows, versions, load_observations(args.run), args.warmup))
    print()

    # The checks: a failed one fails the demo.
    total = int(job.get("training", {}).get("max_steps", 0))
    losses = [rows[s]["loss"] for s in sorted(rows)]
    checks = [
        ("the job completed", job.get("state") == "JOB_COMPLETED",
         "state %s %s" % (job.get("state"), job.get("failure_message", ""))),
        ("every step 1..%d reported a loss" % total, sorted(rows) == list(range(total)),
         "%d steps with a loss" % len(rows)),
        ("every loss is finite", all(math.isfinite(x) for x in losses), "a NaN or inf loss"),
        ("plan version 2 was published", len(versions) >= 2, "%d version(s)" % len(versions)),
        ("steps trained on version 2", any(r["plan_version"] >= 2 for r in rows.values()),
         "no step of version 2"),
        ("the loss fell", len(losses) > 10
         and sum(losses[-10:]) / 10 < 0.75 * losses[0],
         "first %.4f, last ten %.4f" % (losses[0] if losses else float("nan"),
                                        sum(losses[-10:]) / max(1, len(losses[-10:])))),
    ]
    failed = [c for c in checks if not c[1]]
    for name, ok, why in checks:
        print("  [%s] %s%s" % ("ok" if ok else "FAILED", name, "" if ok else ": " + why))
    return 1 if failed else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data")
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=512)
    p = sub.add_parser("wait")
    p.add_argument("--pp", required=True, help="the pipeplan binary and its global flags")
    p.add_argument("--job", required=True)
    p.add_argument("--total", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="samples per step")
    p.add_argument("--until", required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--pid", type=int, action="append", default=[])
    p.add_argument("--since", type=float, help="count elapsed seconds from this Unix time")
    p = sub.add_parser("summary")
    p.add_argument("--pp", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        return {"data": cmd_data, "wait": cmd_wait, "summary": cmd_summary}[args.command](args)
    except DemoError as e:
        print("demo: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
