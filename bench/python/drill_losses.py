"""The drills' loss check (elastic_bench.py): every loss a worker reported
against the single-process reference trainer at its step, in the reference's
--pipelined mode (the job's own arithmetic) with --together for the steps
whose split held every use of a tied parameter on one stage, so a correct
step agrees bit for bit (docs/elastic.md, "Which losses differ, and why")."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def events(path, name):
    """[(dict of key=value)] of the `event=name` lines of a worker's output."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("event=%s " % name):
                out.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
    return out


def together_ranges(args, work, planner, job, paths):
    """The reference's --together ranges: the steps whose counted run (the newest
    version that ran the step) had every use of a tied parameter (the gpt's
    embedding and LM head: graph nodes sharing a param_key) on one stage, where
    the job adds the uses per microbatch as one process does."""
    with open(os.path.join(work, "gpt.json")) as f:
        nodes = json.load(f)["nodes"]
    uses = {}
    for i, n in enumerate(nodes):
        if n.get("param_key"):
            uses.setdefault(n["param_key"], []).append(i)
    tied = {k: v for k, v in uses.items() if len(v) > 1}
    version_of = {}
    for p in paths:
        for e in events(p, "step"):
            step = int(e["step"])
            version_of[step] = max(version_of.get(step, 0), int(e["plan_version"]))
    together = {}
    for v in set(version_of.values()):
        shown = json.loads(subprocess.run(
            [os.path.join(args.build, "client/pipeplan"), "--planner", planner.address, "jobs",
             "show", job, "--version", str(v), "--json"],
            check=True, capture_output=True, text=True).stdout)
        stage = shown["plan"]["node_stage"]
        together[v] = sorted(k for k, ids in tied.items() if len({stage[i] for i in ids}) == 1)
    ranges = []
    for step in sorted(version_of):
        t = together[version_of[step]]
        if t and ranges and ranges[-1]["to_step"] == step - 1 and ranges[-1]["parameters"] == t:
            ranges[-1]["to_step"] = step
        elif t:
            ranges.append({"from_step": step, "to_step": step, "parameters": t})
    return ranges


def reference_losses(work, steps, pipelined=True, together=None):
    """{step: loss} of the single-process reference trainer (the job's settings).
    `pipelined`: its --pipelined mode, the arithmetic of every plan the drills
    run (2 to 4 stages: the gpt's tied embedding and LM head on different
    ranks), so a correct step agrees bit for bit and float32 drift cannot hide
    a wrong one (docs/elastic.md, "Which losses differ, and why"); else one
    process's rounding. `together`: together_ranges(...)."""
    out = os.path.join(work, "reference.json")
    flags = ["--pipelined"] if pipelined else []
    if together:
        with open(os.path.join(work, "together.json"), "w") as f:
            json.dump(together, f)
        flags += ["--together", os.path.join(work, "together.json")]
    subprocess.run([sys.executable, os.path.join(SRC, "client/python/pipeplan_reference_train.py"),
                    "--package", os.path.join(work, "gpt.ptpkg"), "--data",
                    "tensors:" + os.path.join(work, "gpt_data.pt"), "--optimizer", "adamw",
                    "--lr", "1e-3", "--batch-size", "8", "--microbatches", "4", "--steps",
                    str(steps), "--out", out] + flags,
                   check=True, capture_output=True)
    with open(out) as f:
        return {int(x["step"]): float(x["loss"]) for x in json.load(f)}


def wrong_losses(paths, reference):
    """(checked, exact, largest difference, wrong): reported losses against the
    reference at their step; wrong: off by more than 1e-3 (the issue's bound)."""
    checked = exact = wrong = 0
    largest = 0.0
    for p in paths:
        for e in events(p, "step"):
            step = int(e["step"])
            if "loss" not in e or step not in reference:
                continue
            checked += 1
            want, got = reference[step], float(e["loss"])
            exact += got == want
            largest = max(largest, abs(got - want))
            off = abs(got - want) > 1e-3 * max(1.0, abs(want))
            wrong += off
            if got != want and checked - exact <= 20:  # the first few that differ at all
                print("%s loss: %s step %d plan_version %s: %s, reference %r" % (
                    "wrong" if off else "inexact", os.path.basename(p), step,
                    e.get("plan_version"), e["loss"], want))
    return checked, exact, largest, wrong
