#!/usr/bin/env python3
"""Plan switch and checkpoint costs of a ~100M-parameter model on 2 workers (CPU).

The model is tests/models/tiny_models.py's gpt scaled up (width 768, 12 layers,
12 heads, vocabulary 16384, 32 tokens: 97.8M parameters, about 1.2 GB of
parameters and AdamW state in float32). A real pipeplan-planner on 127.0.0.1
and two `pipeplan-worker --executor torch` train it (2 ranks, 1F1B, batch 4
in 2 microbatches, checkpoint every --checkpoint-every steps); then:

1. switch: `jobs replan --method uniform` publishes version 2, which splits the
   model elsewhere. Its stages compile in the background while version 1
   trains; the workers' `event=plan_switch` lines give the compile time, how
   long training paused (switch_seconds) and the state move (parameters and
   AdamW state to their new owners over Gloo).
2. checkpoint write: the workers' `event=checkpoint` lines (seconds per rank,
   bytes of all shards).
3. checkpoint read: both workers are killed and restarted; each resumes from
   the newest checkpoint (`state_move_seconds` of the switch from version 0).

Prints a table; run it on an idle machine (needs ~6 GB of memory and a few
minutes):

  /usr/bin/python3 bench/python/switch_bench.py [--layers 12] [--width 768]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from bench_common import CLI, WORKER, require_built  # noqa: E402  (and the helpers' sys.path)
from planner_process import PlannerProcess, planner_binary  # noqa: E402
BATCH, MICROBATCHES = 4, 2


def export(work, args):
    import torch
    import pipeplan_export
    import tiny_models
    module, inputs = tiny_models.gpt(batch=BATCH // MICROBATCHES, vocab=args.vocab,
                                     d=args.width, heads=args.heads, layers=args.layers,
                                     seq=args.seq)
    params = sum(p.numel() for p in module.parameters())
    paths = {"graph": os.path.join(work, "big.json"), "package": os.path.join(work, "big.ptpkg"),
             "data": os.path.join(work, "big_data.pt")}
    graph = pipeplan_export.export(module, inputs, name="big", package=paths["package"],
                                   loss="cross_entropy")
    pipeplan_export.write_graph(graph, paths["graph"])
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, args.vocab, (64, args.seq + 1), generator=g)
    torch.save({"inputs": tokens[:, :-1].clone(), "targets": tokens[:, 1:].clone()},
               paths["data"])
    with open(os.path.join(work, "cluster.json"), "w") as f:
        json.dump({"devices": [{"id": "cpu%d" % r, "host": "h0", "flops": 1e12,
                                "memory_bytes": 64e9} for r in range(2)]}, f)
    return paths, params


def cli(planner, *argv):
    return subprocess.run([CLI, "--planner", planner.address] + list(argv), check=True,
                          capture_output=True, text=True).stdout


class Worker:
    def __init__(self, planner, job, rank, work, tag):
        self.out = os.path.join(work, "w%d-%s.out" % (rank, tag))
        with open(self.out, "w") as f:
            self.proc = subprocess.Popen(
                [WORKER, "--planner", planner.address, "--job", job, "--worker-id", "w%d" % rank,
                 "--device", "cpu%d" % rank, "--executor", "torch", "--stage-cache",
                 os.path.join(work, "stages"), "--comm-timeout-seconds", "600",
                 "--connect-timeout-seconds", "600"],
                stdout=f, stderr=subprocess.STDOUT)

    def events(self, name):
        with open(self.out) as f:
            text = f.read()
        return [dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
                for line in text.splitlines() if line.startswith("event=%s " % name)]

    def wait_for(self, name, pred=lambda e: True, timeout=1800):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [e for e in self.events(name) if pred(e)]
            if hits:
                return hits[0]
            if self.proc.poll() is not None:
                sys.exit("worker exited %d:\n%s" % (self.proc.returncode, open(self.out).read()))
            time.sleep(0.5)
        sys.exit("timed out waiting for event=%s in %s" % (name, self.out))

    def stop(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=600)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--checkpoint-every", type=int, default=1)
    args = parser.parse_args()
    require_built()
    work = tempfile.mkdtemp(prefix="pipeplan-switch-bench-")
    t = time.perf_counter()
    fx, params = export(work, args)
    export_seconds = time.perf_counter() - t
    with PlannerProcess(planner_binary(), ["--replan=off"]) as planner:
        job = create_job(planner, fx, work, args)
        workers = [Worker(planner, job, r, work, "a") for r in range(2)]
        first = [w.wait_for("plan_switch") for w in workers]
        checkpoints = [w.wait_for("checkpoint") for w in workers]
        # (`jobs show JOB --version V` prints pipeplan's version today: the
        # current job, then the replan's answer, give both plans.)
        v1 = json.loads(cli(planner, "jobs", "show", job, "--json"))["plan"]
        v2 = json.loads(cli(planner, "jobs", "replan", job, "--method", "uniform", "--reason",
                            "bench", "--json"))["plan"]
        moved = sum(a != b for a, b in zip(v1["node_stage"], v2["node_stage"]))
        switches = [w.wait_for("plan_switch", lambda e: e["plan_version"] == "2")
                    for w in workers]
        steps_v1_during_compile = count_steps_between(workers[0])
        for w in workers:
            w.stop(signal.SIGKILL)
        restarted = [Worker(planner, job, r, work, "b") for r in range(2)]
        resumed = [w.wait_for("plan_switch") for w in restarted]
        for w in restarted:  # done: no need to finish the step under way
            w.stop(signal.SIGKILL)
    step_seconds = [float(e["seconds"]) for e in workers[0].events("step")[1:]]
    ckpt_bytes = int(checkpoints[0]["checkpoint_bytes"])
    write = max(float(c["seconds"]) for c in checkpoints)
    read = max(float(r["state_move_seconds"]) for r in resumed)
    mb = ckpt_bytes / 1e6
    print("model: gpt %d layers x %d wide, vocab %d, %d tokens: %.1fM parameters "
          "(export %.0f s)" % (args.layers, args.width, args.vocab, args.seq, params / 1e6,
                               export_seconds))
    print("training: 2 workers, 1F1B, batch %d in %d microbatches, AdamW; median step %.2f s"
          % (BATCH, MICROBATCHES, sorted(step_seconds)[len(step_seconds) // 2]))
    print()
    print_switch_table(first, switches, checkpoints, resumed,
                       "switch 1 -> 2 (%d of %d nodes change stage; %d steps trained on v1 "
                       "meanwhile):" % (moved, len(v1["node_stage"]), steps_v1_during_compile))
    print()
    print("checkpoint: %.0f MB (all shards); write %.0f MB/s, read %.0f MB/s "
          "(both ranks at once, slowest rank's time)" % (mb, mb / write, mb / read))


def create_job(planner, fx, work, args):
    """Creates the benchmark's training job; returns its id."""
    return json.loads(cli(
        planner, "jobs", "create", "--graph", fx["graph"], "--cluster",
        os.path.join(work, "cluster.json"), "--ranks", "2", "--schedule", "1F1B",
        "--microbatches", str(MICROBATCHES), "--method", "dp", "--model-package",
        fx["package"], "--data", "tensors:" + fx["data"], "--batch-size", str(BATCH),
        "--optimizer", "adamw", "--lr", "1e-4", "--max-steps", "100000",
        "--checkpoint-dir", os.path.join(work, "ckpt"), "--checkpoint-every",
        str(args.checkpoint_every), "--json"))["id"]


def print_switch_table(first, switches, checkpoints, resumed, switch_title):
    """Per rank: the first start, the switch to version 2, the checkpoint write
    and the read on restart, from the workers' logged events."""
    print("%-44s %10s %10s" % ("", "rank 0", "rank 1"))
    row = "%-44s %10.2f %10.2f"
    print(row % ("first start: compile stages (s)", *[float(e["compile_seconds"])
                                                      for e in first]))
    print(row % ("first start: whole switch (s)", *[float(e["switch_seconds"]) for e in first]))
    print(switch_title)
    print(row % ("  compile v2 in the background (s)",
                 *[float(e["compile_seconds"]) for e in switches]))
    print(row % ("  training paused: switch_seconds (s)",
                 *[float(e["switch_seconds"]) for e in switches]))
    print(row % ("  of which waiting for the compile (s)",
                 *[float(e["compile_wait_seconds"]) for e in switches]))
    print(row % ("  of which moving parameters + AdamW (s)",
                 *[float(e["state_move_seconds"]) for e in switches]))
    print(row % ("checkpoint write, this rank's wall (s)",
                 *[float(c["seconds"]) for c in checkpoints]))
    print(row % ("checkpoint read on restart (s)",
                 *[float(r["state_move_seconds"]) for r in resumed]))


def count_steps_between(worker):
    """Steps of version 1 logged after version 2's compile started."""
    with open(worker.out) as f:
        text = f.read()
    start = text.find("event=stage_compile_start")
    end = text.find("from_version=1 plan_version=2")
    return len(re.findall(r"event=step .*plan_version=1 ", text[start:end]))


if __name__ == "__main__":
    main()
