#!/usr/bin/env python3
"""The Python half of scripts/gpu_check.sh: its training and benchmark phases,
and the table it prints at the end. Each phase appends one or more rows (JSON
lines: phase, status ok|FAILED|skipped, seconds, result) to --results; the
shell bounds every phase with `timeout` and writes the row of a phase that did
not (a timeout, a crash).

  check.py train   --build B --work W --results R --device D [--steps 100]
      a planner and two workers (torch executor, --torch-device D unless D is
      cpu) train tests/models/tiny_models.py's GPT (1F1B, 4 microbatches,
      AdamW); the losses of `jobs reports` against
      pipeplan_reference_train.py --device D (one process), 1e-3 relative.
  check.py export  --work W --results R --model gpt2:small --batch 8 --seq 1024
      the benchmark model exported once (graph, package, random token data),
      its nodes timed on cuda:0 where CUDA is available (--profile 5).
  check.py eager   ...  bench/gpu_eager_bench.py on the same model and device.
  check.py one     ...  one worker holding the whole model; its median step
                        time against the eager loop's (the ratio).
  check.py two     ...  two ranks on the one device: per stage, predicted
                        (the plan) against measured (the step reports: F and
                        B medians, the rank's peak memory), and the step:
                        planned, calibrated (the planner's observation),
                        measured.
  check.py row     --results R --phase P --status S [--seconds N] --result TEXT
  check.py table   --results R

Every process a phase starts is its child (the planner, workers, helpers) and
is stopped when the phase ends or is interrupted (SIGTERM from `timeout`).
The CLI, never the Python gRPC client, talks to the planner: a GPU node's
Python may lack grpcio.
"""

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "demo"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import helper  # noqa: E402  scripts/demo/helper.py: data, wait, CLI calls
from planner_process import PlannerProcess  # noqa: E402

PY = sys.executable
TOLERANCE = 1e-3


class PhaseError(Exception):
    pass


def on_term(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


# ---------------------------------------------------------------------------
# results


def add_row(results, phase, status, result, seconds=None):
    with open(results, "a") as f:
        f.write(json.dumps({"phase": phase, "status": status, "seconds": seconds,
                            "result": result}) + "\n")


def cmd_row(args):
    add_row(args.results, args.phase, args.status, args.result, args.seconds)
    return 0


def cmd_table(args):
    rows = []
    if os.path.exists(args.results):
        with open(args.results) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    width = max([len(r["phase"]) for r in rows] + [5])
    line = "%-*s  %-7s  %6s  %s"
    print(line % (width, "PHASE", "STATUS", "TIME", "RESULT"))
    for r in rows:
        secs = "" if r["seconds"] is None else "%.0fs" % r["seconds"]
        parts = str(r["result"]).split("\n")
        print(line % (width, r["phase"], r["status"], secs, parts[0]))
        for p in parts[1:]:
            print(line % (width, "", "", "", p))
    failed = [r for r in rows if r["status"] == "FAILED"]
    print("gpu_check: %d phase rows, %d failed" % (len(rows), len(failed)))
    return 1 if failed else 0


# ---------------------------------------------------------------------------
# processes


class Run:
    """The binaries of a build, the work folder, and the children started."""

    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.work = os.path.abspath(args.work)
        os.makedirs(self.work, exist_ok=True)
        self.cli = os.path.join(self.build, "client", "pipeplan")
        self.worker = os.path.join(self.build, "worker_daemon", "pipeplan-worker")
        self.planner_bin = os.path.join(self.build, "planner_service", "server",
                                        "pipeplan-planner")
        for b in (self.cli, self.worker, self.planner_bin):
            if not os.access(b, os.X_OK):
                raise PhaseError("no %s: build first" % b)
        self.children = []
        self.planner = None

    def start_planner(self):
        self.planner = PlannerProcess(self.planner_bin, ["--replan=off"])
        return "%s --planner %s" % (self.cli, self.planner.address)

    def worker_env(self):
        env = dict(os.environ)
        if self.args.device == "cpu":
            env["OMP_NUM_THREADS"] = "1"
        return env

    def start_worker(self, job, name, device_id, log):
        argv = [self.worker, "--planner", self.planner.address, "--job", job,
                "--worker-id", name, "--device", device_id, "--executor", "torch",
                "--transport", self.args.transport, "--deterministic",
                "--stage-cache", os.path.join(self.work, "stages")]
        if self.args.device != "cpu":
            # A plan device -> a torch device on this host (issue 25).
            argv += ["--torch-device", self.args.device]
        with open(log, "w") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=self.worker_env())
        self.children.append(p)
        return p

    def stop(self):
        for p in self.children:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in self.children:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.planner is not None:
            self.planner.stop()
            self.planner = None


def run_quiet(argv, log, timeout, env=None):
    """Runs argv with its output in `log`; raises PhaseError with its tail."""
    with open(log, "w") as out:
        try:
            rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                stdin=subprocess.DEVNULL, env=env).returncode
        except subprocess.TimeoutExpired:
            raise PhaseError("%s: no end within %d s (%s)"
                             % (os.path.basename(argv[1] if argv[0] == PY else argv[0]),
                                timeout, log))
    if rc != 0:
        with open(log, errors="replace") as f:
            tail = f.read().strip().splitlines()[-3:]
        raise PhaseError("%s exited %d: %s" % (os.path.basename(
            argv[1] if argv[0] == PY else argv[0]), rc, " | ".join(tail)))


def export(module_spec, out_dir, name, batch, seq, timeout, profile_device=None):
    """pipeplan_export.py of a builder at (batch, seq): graph and package. With
    `profile_device` the nodes are timed there (pipeplan_export.py --profile 5); where
    that fails the log says why and the graph keeps flop-derived costs."""
    graph = os.path.join(out_dir, name + ".json")
    package = os.path.join(out_dir, name + ".ptpkg")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "models"))
    code = ("import sys, importlib; sys.argv[0] = 'pipeplan_export.py'\n"
            "sys.path.insert(0, %r)\n"
            "import pipeplan_export\n"
            "mod, fn = %r.split(':')\n"
            "b = getattr(importlib.import_module(mod), fn)\n"
            "try:\n  m, x = b(batch=%d, seq=%d)\n"
            "except TypeError:\n  m, x = b(batch=%d)\n"
            "kw = dict(name=%r, package=%r, loss='cross_entropy')\n"
            "dev = %r\n"
            "try:\n"
            "  g = pipeplan_export.export(m, x, profile=5 if dev else 0, profile_device=dev, **kw)\n"
            "except pipeplan_export.ExportError as e:\n"
            "  print('profiling on %%s failed (%%s): flop-derived costs' %% (dev, e))\n"
            "  g = pipeplan_export.export(m, x, **kw)\n"
            "pipeplan_export.write_graph(g, %r)\n"
            % (os.path.join(ROOT, "client", "python"), module_spec, batch, seq, batch, name,
               package, profile_device, graph))
    run_quiet([PY, "-c", code], os.path.join(out_dir, name + "-export.log"), timeout, env)
    return graph, package


def token_data(path, vocab, seq, rows, seed=1):
    import torch
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (rows, seq + 1), generator=g)
    torch.save({"inputs": tokens[:, :-1].clone(), "targets": tokens[:, 1:].clone()}, path)


def cluster(path, ranks, device, memory_bytes):
    """`ranks` devices on one host. On a GPU they share it: each gets a share
    of its memory and its flops (fp32, no TF32); loopback/staging links."""
    flops = 1e9 if device == "cpu" else 5e13 / ranks
    devices = [{"id": "d%d" % r, "host": "localhost", "flops": flops,
                "memory_bytes": memory_bytes / ranks} for r in range(ranks)]
    with open(path, "w") as f:
        json.dump({"devices": devices, "intra_host_bandwidth": 2e8 if device == "cpu" else 1e10,
                   "intra_host_latency": 1e-4}, f)


def create_job(pp, graph, cluster_path, ranks, package, data, batch, microbatches, steps, lr):
    out = helper.cli(pp, "-o", "json", "jobs", "create", "--name", "gpu-check",
                     "--graph", graph, "--cluster", cluster_path, "--ranks", str(ranks),
                     "--schedule", "1F1B", "--microbatches", str(microbatches),
                     "--method", "dp", "--model-package", package, "--loss", "cross_entropy",
                     "--optimizer", "adamw", "--lr", str(lr), "--data", "tensors:" + data,
                     "--batch-size", str(batch), "--max-steps", str(steps), timeout=120)
    return json.loads(out)["id"]


def train_job(run, pp, job, ranks, steps, batch, timeout, tag):
    """Starts `ranks` workers, waits until the job completes; returns the step rows."""
    pids = []
    for r in range(ranks):
        log = os.path.join(run.work, "%s-w%d.log" % (tag, r))
        pids.append(run.start_worker(job, "%s-w%d" % (tag, r), "d%d" % r, log).pid)
    ns = argparse.Namespace(pp=pp, job=job, total=steps, batch=batch, until="done",
                            timeout=timeout, pid=pids, since=None)
    try:
        rc = helper.cmd_wait(ns)
    except helper.DemoError as e:
        raise PhaseError("%s (logs: %s/%s-w*.log)" % (e, run.work, tag))
    if rc != 0:
        raise PhaseError("the job did not complete")
    reports = json.loads(helper.cli(pp, "jobs", "reports", job, "--json"))
    return helper.step_rows(reports)


# ---------------------------------------------------------------------------
# phases


def cmd_train(args):
    run = Run(args)
    try:
        graph, package = export("tiny_models:gpt", run.work, "tiny_gpt", 4, 16, 300)
        data = os.path.join(run.work, "tiny_gpt_data.pt")
        helper.cmd_data(argparse.Namespace(out=data, rows=512))
        cl = os.path.join(run.work, "cluster-train.json")
        cluster(cl, 2, args.device, 8e9)
        pp = run.start_planner()
        batch, lr = 16, 3e-3
        job = create_job(pp, graph, cl, 2, package, data, batch, 4, args.steps, lr)
        rows = train_job(run, pp, job, 2, args.steps, batch, args.timeout, "train")
        ref = os.path.join(run.work, "train-reference.json")
        run_quiet([PY, os.path.join(ROOT, "client", "python", "pipeplan_reference_train.py"),
                   "--package", package, "--data", "tensors:" + data, "--loss", "cross_entropy",
                   "--optimizer", "adamw", "--lr", str(lr), "--batch-size", str(batch),
                   "--microbatches", "4", "--steps", str(args.steps), "--device", args.device,
                   "--out", ref], os.path.join(run.work, "train-reference.log"), 300,
                  run.worker_env())
        with open(ref) as f:
            reference = {e["step"]: e["loss"] for e in json.load(f)}
    finally:
        run.stop()
    if sorted(rows) != list(range(args.steps)):
        raise PhaseError("%d of %d steps reported a loss" % (len(rows), args.steps))
    worst, at = 0.0, -1
    for s, r in rows.items():
        d = abs(r["loss"] - reference[s]) / max(abs(reference[s]), 1e-12)
        if not math.isfinite(d) or d > worst:
            worst, at = d, s
    ok = worst <= TOLERANCE
    losses = [rows[s]["loss"] for s in sorted(rows)]
    secs = [rows[s]["step_seconds"] for s in sorted(rows)][5:]
    add_row(args.results, args.phase, "ok" if ok else "FAILED",
            "%d steps on %s, 2 workers (%s): loss %.4f -> %.4f; max rel diff vs one-process "
            "PyTorch %.2e at step %d (tol %.0e); median step %.1f ms"
            % (args.steps, args.device, args.transport, losses[0], losses[-1], worst, at,
               TOLERANCE, 1000 * statistics.median(secs or [0.0])), time.monotonic() - T0)
    return 0 if ok else 1


def bench_paths(args):
    name = args.model.replace(":", "_")
    w = os.path.abspath(args.work)
    return {"graph": os.path.join(w, name + ".json"), "package": os.path.join(w, name + ".ptpkg"),
            "data": os.path.join(w, name + "_data.pt"), "eager": os.path.join(w, "eager.json")}


def cmd_export(args):
    os.makedirs(args.work, exist_ok=True)
    paths = bench_paths(args)
    name = args.model.replace(":", "_")
    import torch
    export(args.model, os.path.abspath(args.work), name, args.batch, args.seq, args.timeout,
           "cuda:0" if torch.cuda.is_available() else None)
    with open(paths["graph"]) as f:
        graph = json.load(f)
    vocab = None
    params = torch.load(os.path.join(paths["package"], "params.pt"))
    for key, value in params.items():  # the token embedding: the first 2-D parameter
        if key.endswith("wte.weight") or (vocab is None and value.dim() == 2):
            vocab = int(value.shape[0])
            if key.endswith("wte.weight"):
                break
    token_data(paths["data"], vocab, args.seq, rows=4 * args.batch)
    n = sum(v.numel() for v in params.values())
    add_row(args.results, args.phase, "ok",
            "%s: %d graph nodes, %.3gM parameters, batch %d x %d, vocabulary %d"
            % (args.model, len(graph.get("nodes", [])), n / 1e6, args.batch, args.seq, vocab),
            time.monotonic() - T0)
    return 0


def cmd_eager(args):
    paths = bench_paths(args)
    log = os.path.join(os.path.abspath(args.work), "eager.log")
    run_quiet([PY, os.path.join(ROOT, "bench", "gpu_eager_bench.py"), "--model", args.model,
               "--device", args.device, "--batch", str(args.batch), "--seq", str(args.seq),
               "--microbatches", str(args.microbatches), "--steps", str(args.steps),
               "--warmup", "3", "--json"], log, args.timeout,
              dict(os.environ, OMP_NUM_THREADS="1") if args.device == "cpu" else None)
    with open(log) as f:
        result = json.loads(f.read().strip().splitlines()[-1])
    with open(paths["eager"], "w") as f:
        json.dump(result, f)
    add_row(args.results, args.phase, "ok",
            "PyTorch %s eager, %s: median step %.1f ms, peak memory %s (%d steps)"
            % (result["torch"], args.device, 1000 * result["median_step_seconds"],
               mib(result["peak_memory_bytes"]), result["steps"]), time.monotonic() - T0)
    return 0


def mib(x):
    """Bytes in binary units (the name is historical: KiB to GiB)."""
    if not x:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= scale:
            return "%.3g %s" % (x / scale, unit)
    return "%d B" % x


def ms(x):
    return "-" if x is None else "%.1f ms" % (1000 * x)


def rel(pred, meas):
    if pred is None or not meas:
        return "-"
    return "%+.0f%%" % (100 * (pred - meas) / meas)


def bench_job(args, ranks, tag):
    """Trains the exported model with `ranks` workers; returns (run's planner
    CLI prefix is gone by then) the rows, job json, plan json and traces."""
    paths = bench_paths(args)
    run = Run(args)
    try:
        cl = os.path.join(run.work, "cluster-%s.json" % tag)
        cluster(cl, ranks, args.device, args.memory_bytes)
        pp = run.start_planner()
        job = create_job(pp, paths["graph"], cl, ranks, paths["package"], paths["data"],
                         args.batch, args.microbatches, args.steps, 1e-4)
        rows = train_job(run, pp, job, ranks, args.steps, args.batch, args.timeout, tag)
        shown = json.loads(helper.cli(pp, "-o", "json", "jobs", "show", job))
        plan = json.loads(helper.cli(pp, "-o", "json", "jobs", "show", job, "--version", "1"))
        traces = []
        for s in range(max(1, args.steps - 5), args.steps):
            out = os.path.join(run.work, "%s-trace-%d.json" % (tag, s))
            try:
                helper.cli(pp, "jobs", "trace", job, "--step", str(s), "--out", out)
                with open(out) as f:
                    traces.append(json.load(f))
            except (helper.DemoError, ValueError):
                pass
    finally:
        run.stop()
    return rows, shown, plan, traces


def median_step(rows, warmup=3):
    secs = [rows[s]["step_seconds"] for s in sorted(rows)]
    return statistics.median(secs[warmup:] or secs)


def cmd_one(args):
    paths = bench_paths(args)
    rows, _, _, _ = bench_job(args, 1, "one")
    one = median_step(rows)
    eager = None
    if os.path.exists(paths["eager"]):
        with open(paths["eager"]) as f:
            eager = json.load(f)["median_step_seconds"]
    ratio = one / eager if eager else None
    status = "ok"
    note = ""
    if ratio is None:
        note = "; no eager figure (its phase failed)"
    elif args.device != "cpu" and ratio > 1.10:
        status, note = "FAILED", "; goal <= 1.10x"
    add_row(args.results, args.phase, status,
            "1 worker, whole model on %s: median step %s vs eager %s: %s%s"
            % (args.device, ms(one), ms(eager),
               "-" if ratio is None else "%.3fx" % ratio, note), time.monotonic() - T0)
    return 0 if status == "ok" else 1


def trace_stage_times(traces):
    """{(stage, 'F'|'B'|'I'|'W'): [seconds per microbatch action]} from the
    Chrome traces of `jobs trace` (complete events: cat the action's kind,
    args.stage its stage, dur in microseconds)."""
    out = {}
    for t in traces:
        events = t.get("traceEvents", []) if isinstance(t, dict) else t
        for e in events:
            if not isinstance(e, dict) or e.get("ph") != "X":
                continue
            kind, stage = e.get("cat"), (e.get("args") or {}).get("stage")
            if kind in ("F", "B", "I", "W") and stage is not None:
                out.setdefault((int(stage), kind), []).append(e["dur"] / 1e6)
    return out


def cmd_two(args):
    rows, shown, plan, traces = bench_job(args, 2, "two")
    stages = plan.get("plan", plan).get("stages", [])
    times = trace_stage_times(traces)
    obs = shown.get("observation") or {}
    # The measured peak of the rank on the stage's device (one stage per rank).
    peak = {r.get("device_id"): r.get("peak_memory_bytes") for r in obs.get("ranks", [])}
    lines = ["STAGE  %-30s %-30s %s" % ("forward pred / meas (err)", "backward pred / meas (err)",
                                         "peak memory pred / meas (err)")]
    for i, st in enumerate(stages):
        f = times.get((i, "F"))
        b = times.get((i, "B")) or (
            [x + y for x, y in zip(times.get((i, "I"), []), times.get((i, "W"), []))] or None)
        fm = statistics.median(f) if f else None
        bm = statistics.median(b) if b else None
        pm = peak.get(st.get("device_id"))
        lines.append("%5d  %8s / %8s (%5s)      %8s / %8s (%5s)      %9s / %9s (%5s)"
                     % (i, ms(st.get("forward_seconds")), ms(fm),
                        rel(st.get("forward_seconds"), fm), ms(st.get("backward_seconds")),
                        ms(bm), rel(st.get("backward_seconds"), bm),
                        mib(st.get("peak_memory_bytes")), mib(pm),
                        rel(st.get("peak_memory_bytes"), pm)))
    measured = obs.get("measured_step_seconds") or median_step(rows)
    lines.append("step: planned %s, calibrated %s (%s), measured %s (%d observed steps; "
                 "per-stage from %d traced steps)"
                 % (ms(obs.get("planned_step_seconds") or plan.get("plan", plan).get(
                     "step_seconds")), ms(obs.get("predicted_step_seconds")),
                    rel(obs.get("predicted_step_seconds"), measured), ms(measured),
                    obs.get("steps", 0), len(traces)))
    add_row(args.results, args.phase, "ok", "\n".join(lines), time.monotonic() - T0)
    return 0


# ---------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("row")
    p.add_argument("--results", required=True)
    p.add_argument("--phase", required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--seconds", type=float)
    p.add_argument("--result", required=True)
    p = sub.add_parser("table")
    p.add_argument("--results", required=True)
    for name in ("train", "export", "eager", "one", "two"):
        p = sub.add_parser(name)
        p.add_argument("--results", required=True)
        p.add_argument("--phase", default=name)
        p.add_argument("--work", required=True)
        p.add_argument("--build", default=os.path.join(ROOT, "build"))
        p.add_argument("--device", default="cpu")
        p.add_argument("--transport", default="gloo")
        p.add_argument("--steps", type=int, default=100)
        p.add_argument("--timeout", type=float, default=300, help="seconds to train")
        p.add_argument("--model", default="gpt2:small")
        p.add_argument("--batch", type=int, default=8)
        p.add_argument("--seq", type=int, default=1024)
        p.add_argument("--microbatches", type=int, default=4)
        p.add_argument("--memory-bytes", type=float, default=80e9,
                       help="the device's memory (split between ranks sharing it)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, on_term)
    commands = {"row": cmd_row, "table": cmd_table, "train": cmd_train, "export": cmd_export,
                "eager": cmd_eager, "one": cmd_one, "two": cmd_two}
    try:
        return commands[args.command](args)
    except (PhaseError, helper.DemoError) as e:
        add_row(args.results, args.phase, "FAILED", str(e), time.monotonic() - T0)
        return 1
    except KeyboardInterrupt as e:
        add_row(args.results, args.phase, "FAILED", "stopped (%s): out of time" % e,
                time.monotonic() - T0)
        return 124


T0 = time.monotonic()

if __name__ == "__main__":
    sys.exit(main())
