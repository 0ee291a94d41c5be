"""The `pipeplan` CLI and `pipeplan-worker` against a real pipeplan-planner on
127.0.0.1 (issue 23's tour of the CLI): what `jobs list/show/versions/
reports/cancel/trace` print for an empty planner, a job without reports, a job
with data-parallel replicas, a step some ranks have not reported, a cancelled
job, and what a worker says for a device its job's cluster lacks.

Step reports are sent with the Python client (the worker protocol), so the
test knows exactly which worker reported which step.

    python3 test_cli_with_planner.py PIPEPLAN PLANNER WORKER DATA_DIR
"""

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import tempfile
import unittest

CLI, PLANNER, WORKER, DATA = sys.argv[1:5]
del sys.argv[1:5]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.append(os.environ.get("PIPEPLAN_PYTHON_DIR", ""))

import pipeplan  # noqa: E402
from pipeplan.proto import planner_service_pb2 as pb  # noqa: E402
from planner_process import PlannerProcess  # noqa: E402

GRAPH = os.path.join(DATA, "chain_small.json")
CLUSTER = os.path.join(DATA, "cluster_8xa100.json")


def run(*argv, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class CliWithPlannerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.planner = PlannerProcess(PLANNER, ["--replan=off"])
        cls.addr = cls.planner.address
        cls.client = pipeplan.Client(cls.addr, timeout=30)
        cls.tmp = tempfile.mkdtemp(prefix="pipeplan-cli-test-")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.planner.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def cli(self, *argv):
        return run(CLI, "--planner", self.addr, *argv)

    def create(self, *options):
        r = self.cli("jobs", "create", "--graph", GRAPH, "--cluster", CLUSTER,
                     "--schedule", "1F1B", "--microbatches", "4", "--method", "dp",
                     *options, "-o", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["id"]

    def report(self, job, worker, rank, step, loss=None):
        request = pb.ReportStepRequest(job_id=job, worker_id=worker, step=step, plan_version=1,
                                       step_seconds=0.01, rank=rank)
        request.timings.add(action="%dF0" % rank, seconds=0.001, start_seconds=0.0)
        if loss is not None:
            request.loss = loss
        self.client.stub.ReportStep(request, timeout=30)

    def replicated_job(self):
        """A 2-rank x 2-replica job, its 4 workers registered: [(worker, rank)]."""
        job = self.create("--ranks", "2", "--replicas", "2")
        plan = self.client.get_plan(job).plan
        self.assertEqual(len(plan.replicas), 2)
        workers = []
        for q, replica in enumerate(plan.replicas):
            for rank, device in enumerate(replica.rank_device_ids):
                worker = "w%d%d" % (q, rank)
                a = self.client.register_worker(job, worker, device)
                workers.append((worker, a.rank))
        return job, workers

    def training_job(self, max_steps):
        """A 2-rank job with a training spec (a package manifest of the graph's
        nodes; no worker runs it): [(worker, rank)] registered."""
        package = os.path.join(self.tmp, "chain.ptpkg")
        os.makedirs(package, exist_ok=True)
        with open(GRAPH) as f:
            nodes = [n["id"] for n in json.load(f)["nodes"]]
        spec = {"name": "x", "shape": [4, 16], "dtype": "float32"}
        with open(os.path.join(package, "manifest.json"), "w") as f:
            json.dump({"format": "pipeplan-model-package/1", "digest": "d", "nodes": nodes,
                       "inputs": [spec], "output": spec, "batch_dim": 0, "loss": "mse"}, f)
        job = self.create("--ranks", "2", "--model-package", package, "--data",
                          "synthetic:seed=1", "--batch-size", "8", "--max-steps",
                          str(max_steps))
        plan = self.client.get_plan(job).plan
        devices = []
        for s in plan.stages:
            if s.device_id not in devices:
                devices.append(s.device_id)
        workers = []
        for i, device in enumerate(devices):
            a = self.client.register_worker(job, "w%d" % i, device)
            workers.append(("w%d" % i, a.rank))
        return job, workers

    def train_steps(self, job, workers, steps):
        for step in steps:
            for worker, rank in workers:
                self.report(job, worker, rank, step, loss=2.0 - 0.1 * step if rank == 1 else None)

    def test_watch_follows_a_job_to_its_end_in_plain_lines(self):
        job, workers = self.training_job(max_steps=6)
        self.train_steps(job, workers, range(3))
        watch = subprocess.Popen([CLI, "--planner", self.addr, "jobs", "watch", job,
                                  "--interval", "0.2"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            first = watch.stdout.readline()
            self.assertIn("step 3/6", first)
            self.assertIn("loss 1.8", first)
            self.assertIn("samples/s", first)  # 8 rows / 0.01 s
            self.assertIn("800.0 samples/s", first)
            self.assertIn("ETA", first)
            self.assertIn("plan v1", first)
            self.train_steps(job, workers, range(3, 6))
            for worker, _ in workers:
                self.client.finish_worker(job, worker, 6)
            out, err = watch.communicate(timeout=60)
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.communicate()
        self.assertEqual(watch.returncode, 0, err)
        lines = (first + out).splitlines()
        self.assertNotIn("\r", first + out)  # not a terminal: plain lines
        self.assertIn("completed", lines[-1])
        self.assertIn("step 6/6", lines[-1])

    def test_watch_rewrites_one_line_on_a_terminal(self):
        job, workers = self.training_job(max_steps=2)
        self.train_steps(job, workers, range(2))
        self.client.cancel_job(job, "enough")
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(CLI, [CLI, "--planner", self.addr, "jobs", "watch", job])
        out = b""
        while True:
            ready, _, _ = select.select([fd], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        _, status = os.waitpid(pid, 0)
        text = out.decode(errors="replace")
        self.assertTrue(text.startswith("\r"), text)
        self.assertIn("cancelled: enough", text)
        self.assertEqual(os.waitstatus_to_exitcode(status), 1, text)  # it did not complete

    def test_1_empty_planner_lists_no_jobs_as_json(self):
        r = self.cli("jobs", "list", "-o", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), {"jobs": []})  # it printed {}

    def test_a_job_without_reports_measures_nothing(self):
        job = self.create("--ranks", "2")
        r = self.cli("jobs", "show", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("measured over 0 steps", r.stdout)
        self.assertNotIn("error 0.0%", r.stdout)
        self.assertIn("no step measured yet", r.stdout)

    def test_versions_count_replicas(self):
        job, _ = self.replicated_job()
        r = self.cli("jobs", "versions", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        header, row = r.stdout.splitlines()[:2]
        self.assertIn("REPLICAS", header)
        self.assertEqual(row.split()[:3], ["1", "2", "2"])  # version, ranks, replicas
        r = self.cli("jobs", "versions", job, "-o", "json")
        self.assertEqual(json.loads(r.stdout)[0]["replicas"], 2)

    def test_reports_limit_counts_steps_and_marks_partial_ones(self):
        job, workers = self.replicated_job()
        for step in range(5):
            for worker, rank in workers:
                self.report(job, worker, rank, step, loss=1.0 / (step + 1) if rank == 1 else None)
        for worker, rank in workers[:2]:  # step 5: only replica 0 has reported
            self.report(job, worker, rank, 5)
        r = self.cli("jobs", "reports", job, "--limit", "3", "-o", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)
        self.assertEqual([row["step"] for row in rows], [3, 4, 5])
        self.assertEqual([row["reports"] for row in rows], [4, 4, 2])
        self.assertEqual([row["complete"] for row in rows], [True, True, False])
        table = self.cli("jobs", "reports", job, "--limit", "3").stdout.splitlines()
        self.assertEqual(len(table), 4, table)
        self.assertIn("4/4", table[1])
        self.assertIn("2/4", table[3])
        self.assertIn("(partial)", table[3])
        self.assertEqual(self.cli("jobs", "reports", job, "--limit", "0").returncode, 2)

    def test_show_lists_every_replicas_worker_on_its_device(self):
        job, workers = self.replicated_job()
        for step in range(8):
            for worker, rank in workers:
                self.report(job, worker, rank, step, loss=1.0 if rank == 1 else None)
        r = self.cli("jobs", "show", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        header = [i for i, line in enumerate(lines) if line.split()[:2] == ["RANK", "REPLICA"]]
        self.assertEqual(len(header), 1, r.stdout)  # it listed one worker per rank
        rows = [line.split()[:4] for line in lines[header[0] + 1:header[0] + 5]]
        plan = self.client.get_plan(job).plan
        want = sorted([str(rank), str(q), "w%d%d" % (q, rank), device]
                      for q, replica in enumerate(plan.replicas)
                      for rank, device in enumerate(replica.rank_device_ids))
        self.assertEqual(rows, want, r.stdout)

    def test_trace_into_a_missing_folder_names_it(self):
        job, workers = self.replicated_job()
        for worker, rank in workers[:2]:
            self.report(job, worker, rank, 0)
        folder = os.path.join(tempfile.gettempdir(), "pipeplan-no-such-folder-%d" % os.getpid())
        r = self.cli("jobs", "trace", job, "--out", os.path.join(folder, "t.json"))
        self.assertEqual(r.returncode, 4, r.stdout + r.stderr)  # it was PERMISSION_DENIED
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertIn(folder, r.stderr)

    def test_cancel_says_cancelled_once(self):
        job = self.create("--ranks", "2")
        r = self.cli("jobs", "cancel", job, "--reason", "test")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "job %s cancelled: test" % job)
        r = self.cli("jobs", "show", job)
        self.assertIn("state cancelled: test\n", r.stdout)
        self.assertNotIn("cancelled: cancelled", r.stdout)

    def test_worker_on_a_device_the_cluster_lacks_lists_them_and_exits_2(self):
        job = self.create("--ranks", "2")
        r = run(WORKER, "--planner", self.addr, "--job", job, "--worker-id", "w-tpu",
                "--device", "tpu9", "--metrics-listen", "off", timeout=60)
        # 2: RestartPreventExitStatus of deploy/systemd/pipeplan-worker@.service.
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("tpu9", r.stderr)
        self.assertIn("gpu0, gpu1, gpu2", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
