"""Models nobody here wrote train through two pipeline ranks with the losses of
one process (issue 23), and random operators are reproducible.

A real pipeplan-planner and two `pipeplan-worker --executor torch` processes
(Gloo on 127.0.0.1) train each model for a few steps in float64; every step's
loss equals the single-process reference trainer's (pipeplan_reference_train,
the same seed) to 1e-9 relative. The models: torchvision's ResNet-18 (BatchNorm),
MobileNetV3-Small (BatchNorm, a Dropout in its classifier) and a small
VisionTransformer (dropout 0.1 in every block), at 32x32 with random weights,
and a small MLP with nn.Dropout; the MLP's job is run twice and repeats exactly.
Killed and restarted from a checkpoint, the dropout MLP's workers continue the
same stream (every step, re-run ones too, as the reference). BatchNorm under
microbatching (docs/models.md): each microbatch's forward
normalizes with that microbatch's statistics and updates the running ones once,
so after a step of M microbatches they are M momentum updates, as the
reference's; test_batchnorm_running_statistics checks that statement.

Needs $PIPEPLAN_CLI, $PIPEPLAN_PLANNER_BIN and $PIPEPLAN_WORKER_BIN (CTest sets
them; skipped without). Slow: about 2 minutes on two busy cores.
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch
import torch.nn as nn
import torchvision
from torchvision.models.vision_transformer import VisionTransformer

import pipeplan.export as pe  # conftest puts client/python on sys.path
import pipeplan_reference_train as ref
import pipeplan_data
from pipeplan.export import package as pp
from planner_process import PlannerProcess

CLI = os.environ.get("PIPEPLAN_CLI")
PLANNER = os.environ.get("PIPEPLAN_PLANNER_BIN")
WORKER = os.environ.get("PIPEPLAN_WORKER_BIN")
needs_binaries = pytest.mark.skipif(not (CLI and PLANNER and WORKER),
                                    reason="PIPEPLAN_CLI, PIPEPLAN_PLANNER_BIN, PIPEPLAN_WORKER_BIN")

STEPS, BATCH, MICROBATCHES, SEED = 3, 8, 2, 7
CLUSTER = {"devices": [{"id": "cpu%d" % i, "host": "h0", "flops": 1e12, "memory_bytes": 8e9}
                       for i in range(2)]}


class DropoutMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.drop(torch.relu(self.a(x)))
        h = nn.functional.dropout(torch.relu(self.b(h)), 0.3, self.training)
        return self.c(h)


def small_vit():
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=16, mlp_dim=32, num_classes=10, dropout=0.1)


MODELS = {
    "dropout_mlp": (DropoutMLP, (16,)),
    "resnet18": (lambda: torchvision.models.resnet18(weights=None, num_classes=10), (3, 32, 32)),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(
        weights=None, num_classes=10), (3, 32, 32)),
    "vit": (small_vit, (3, 32, 32)),
}


@pytest.fixture(scope="module")
def planner():
    with PlannerProcess(PLANNER, ["--replan=off"]) as p:
        yield p


def export(name, out):
    """Graph, package and `tensors:` data (BATCH * STEPS rows) of model `name`."""
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build()
    g = torch.Generator().manual_seed(1)
    example = torch.randn(BATCH // MICROBATCHES, *shape, generator=g)
    paths = {k: os.path.join(out, name + suffix)
             for k, suffix in (("graph", ".json"), ("package", ".ptpkg"), ("data", ".pt"))}
    graph = pe.export(model.train(), (example,), name=name, package=paths["package"],
                      loss="cross_entropy")
    with open(paths["graph"], "w") as f:
        json.dump(graph, f)
    rows = BATCH * STEPS
    torch.save({"inputs": torch.randn(rows, *shape, generator=g),
                "targets": torch.randint(0, 10, (rows,), generator=g)}, paths["data"])
    return paths


def cli(planner, *argv):
    r = subprocess.run([CLI, "--planner", planner.address, *argv], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def create_job(planner, paths, tmp, steps=STEPS, extra=(), dtype="float64"):
    cluster = os.path.join(tmp, "cluster.json")
    with open(cluster, "w") as f:
        json.dump(CLUSTER, f)
    return json.loads(cli(planner, "jobs", "create", "--graph", paths["graph"], "--cluster",
                          cluster, "--ranks", "2", "--schedule", "1F1B", "--microbatches",
                          str(MICROBATCHES), "--method", "dp", "--model-package",
                          paths["package"], "--data", "tensors:" + paths["data"],
                          "--batch-size", str(BATCH), "--optimizer", "adamw", "--lr", "1e-3",
                          "--max-steps", str(steps), "--dtype", dtype, "--seed", str(SEED),
                          *extra, "-o", "json"))["id"]


def start_workers(planner, job, tmp, tag=""):
    workers = []
    for r in range(2):
        log = open(os.path.join(tmp, "%s-w%d%s.log" % (job, r, tag)), "w+")
        workers.append((subprocess.Popen(
            [WORKER, "--planner", planner.address, "--job", job, "--worker-id", "w%d" % r,
             "--device", "cpu%d" % r, "--transport", "gloo", "--listen-host", "127.0.0.1",
             "--executor", "torch", "--stage-cache", os.path.join(tmp, "stages"),
             "--comm-timeout-seconds", "120", "--connect-timeout-seconds", "60"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), log))
    return workers


def finish(workers, kill=False):
    """Waits for the workers (kills them first with `kill`); their exit codes."""
    codes = []
    try:
        for proc, log in workers:
            if kill:
                proc.kill()
            code = proc.wait(timeout=400)
            log.seek(0)
            assert kill or code == 0, log.read()[-4000:]
            codes.append(code)
    finally:
        for proc, log in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    return codes


def reported(planner, job):
    rows = json.loads(cli(planner, "jobs", "reports", job, "-o", "json"))
    return {row["step"]: row["loss"] for row in rows}


def train_job(planner, paths, tmp):
    """Creates the job, runs its two workers to the end; {step: loss}."""
    job = create_job(planner, paths, tmp)
    finish(start_workers(planner, job, tmp))
    for r in range(2):
        with open(os.path.join(tmp, "%s-w%d.log" % (job, r))) as f:
            rounds = [int(s) for s in re.findall(r"event=snapshot .*?step=(\d+)", f.read())]
        # No peer snapshot after the last step: nobody restores it, and the
        # peer it would go to may have exited already.
        assert rounds and max(rounds) < STEPS, rounds
    return reported(planner, job)


def reference(paths, steps=STEPS):
    package = pp.load_package(paths["package"])
    data = pipeplan_data.open_data("tensors:" + paths["data"], package.manifest,
                                   "cross_entropy")
    out = ref.train(package, data, "cross_entropy", "adamw", 1e-3, BATCH, MICROBATCHES, steps,
                    dtype=torch.float64, seed=SEED)
    return {row["step"]: row["loss"] for row in out}


@needs_binaries
@pytest.mark.parametrize("name", sorted(MODELS))
def test_two_ranks_train_as_one_process(name, planner, tmp_path):
    paths = export(name, str(tmp_path))
    got = train_job(planner, paths, str(tmp_path))
    want = reference(paths)
    assert sorted(got) == list(range(STEPS))
    for step in range(STEPS):
        assert got[step] == pytest.approx(want[step], rel=1e-9), (step, got, want)
    if name == "dropout_mlp":
        # A run repeats exactly; a different seed draws different masks.
        assert train_job(planner, paths, str(tmp_path)) == got
        package = pp.load_package(paths["package"])
        data = pipeplan_data.open_data("tensors:" + paths["data"], package.manifest,
                                       "cross_entropy")
        other = ref.train(package, data, "cross_entropy", "adamw", 1e-3, BATCH, MICROBATCHES,
                          STEPS, dtype=torch.float64, seed=SEED + 1)
        assert other[0]["loss"] != pytest.approx(want[0], rel=1e-9)


@needs_binaries
def test_a_restart_from_a_checkpoint_continues_the_stream(planner, tmp_path):
    """Both workers killed (-9) at about step 25 of 400, restarted: they resume from the newest
    checkpoint and the masks of every step, re-run ones too, are the reference's."""
    steps, every = 400, 20
    tmp = str(tmp_path)
    paths = export("dropout_mlp", tmp)
    job = create_job(planner, paths, tmp, steps, ("--checkpoint-dir", os.path.join(tmp, "ckpt"),
                                                  "--checkpoint-every", str(every)))
    workers = start_workers(planner, job, tmp)
    # The worker's own log, not the planner's reports (delivered later): a
    # step takes milliseconds here, and the kill must come before the end.
    log = os.path.join(tmp, "%s-w0.log" % job)
    deadline, ran = time.monotonic() + 300, -1
    while time.monotonic() < deadline and ran < every + 5:
        time.sleep(0.01)
        with open(log) as f:
            ran = max([int(m) for m in re.findall(r"event=step .*? step=(\d+)", f.read())],
                      default=-1)
    finish(workers, kill=True)
    assert every + 5 <= ran < steps - 1, "killed at step %d of %d" % (ran, steps)
    finish(start_workers(planner, job, tmp, "-restarted"))
    with open(os.path.join(tmp, "%s-w0-restarted.log" % job)) as f:
        resumed = [int(m) for m in re.findall(r"event=resume .* step=(\d+)", f.read())]
    assert resumed and resumed[0] > 0 and resumed[0] % every == 0, resumed  # not from step 0
    got, want = reported(planner, job), reference(paths, steps)
    assert sorted(got) == list(range(steps))
    for step in range(steps):
        assert got[step] == pytest.approx(want[step], rel=1e-9), step


def test_batchnorm_running_statistics():
    """What docs/models.md says: each microbatch's forward normalizes with its own
    statistics and moves the running ones once, so a step of M microbatches makes M
    momentum updates (the pipeline's and the reference's alike), not the one a
    full-batch forward would."""
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4, momentum=0.1).double()
    model = nn.Sequential(bn)
    x = torch.randn(8, 4, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    ref.train_step(model, list(model.parameters()), opt, "mse", [x],
                   torch.zeros(8, 4, dtype=torch.float64), 2)
    running = torch.zeros(4, dtype=torch.float64)
    for half in (x[:4], x[4:]):
        running = 0.9 * running + 0.1 * half.mean(0)
    assert torch.allclose(bn.running_mean, running, atol=1e-15)
    full_batch = 0.1 * x.mean(0)
    assert not torch.allclose(bn.running_mean, full_batch, atol=1e-6)
    assert int(bn.num_batches_tracked) == 2


@needs_binaries
def test_float32_gpt_rounds_as_the_pipelined_reference(planner, tmp_path):
    """In float32 the tiny gpt's losses on two ranks are the reference's
    --pipelined ones bit for bit: its tied embedding's gradient summed per rank
    after the microbatches, as the ranks do (docs/elastic.md, "Which losses
    differ, and why"), so the elastic drills can compare exactly."""
    tmp, steps = str(tmp_path), 30
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "models",
                                                 "make_fixtures.py"),
                    "--out-dir", tmp, "--model", "gpt", "--rows", "48"],
                   check=True, capture_output=True)
    paths = {k: os.path.join(tmp, name) for k, name in
             (("graph", "gpt.json"), ("package", "gpt.ptpkg"), ("data", "gpt_data.pt"))}
    job = create_job(planner, paths, tmp, steps, dtype="float32")
    assert finish(start_workers(planner, job, tmp)) == [0, 0]
    got = reported(planner, job)
    package = pp.load_package(paths["package"])
    data = pipeplan_data.open_data("tensors:" + paths["data"], package.manifest,
                                   "cross_entropy")
    want = ref.train(package, data, "cross_entropy", "adamw", 1e-3, BATCH, MICROBATCHES, steps,
                     seed=SEED, pipelined=True)
    assert [got.get(step) for step in range(steps)] == [row["loss"] for row in want]
