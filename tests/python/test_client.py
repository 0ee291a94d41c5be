"""The `pipeplan` Python client against a real pipeplan-planner on 127.0.0.1 (a
temporary data directory, a bearer token, calibration replans off): plan, jobs,
a plan update seen through watch_plan, step reports read back through reports(),
typed errors and the token.

Needs the generated pipeplan.v1 modules ($PIPEPLAN_PYTHON_DIR, else build/python)
and the planner binary ($PIPEPLAN_PLANNER_BIN, else build/...); CTest sets both.
"""

import json
import os
import sys
import threading

import grpc
import pytest

from planner_process import ROOT, PlannerProcess, planner_binary

sys.path.append(os.environ.get("PIPEPLAN_PYTHON_DIR") or os.path.join(ROOT, "build", "python"))

import pipeplan  # noqa: E402
from pipeplan.proto import plan_pb2, planner_service_pb2 as pb  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")
GRAPH = os.path.join(DATA, "chain_small.json")
with open(os.path.join(DATA, "cluster_8xa100.json")) as f:
    CLUSTER = json.load(f)
TOKEN = "pytest-token-4f2a"
OPTIONS = dict(ranks=4, schedule="1F1B", microbatches=8, method="dp")


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    binary = planner_binary()
    if binary is None:
        if os.environ.get("PIPEPLAN_PLANNER_BIN"):
            pytest.fail("PIPEPLAN_PLANNER_BIN=%s is not executable"
                        % os.environ["PIPEPLAN_PLANNER_BIN"])
        pytest.skip("no pipeplan-planner binary: build it or set PIPEPLAN_PLANNER_BIN")
    token_file = tmp_path_factory.mktemp("auth") / "token"
    token_file.write_text(TOKEN + "\n")
    with PlannerProcess(binary, ["--auth-token-file=%s" % token_file, "--replan=off"]) as p:
        p.token_file = str(token_file)
        yield p


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A model package manifest of GRAPH's nodes: create_job checks the package
    against the graph, as `jobs create` does (no stage files are needed)."""
    path = tmp_path_factory.mktemp("pkg") / "chain.ptpkg"
    path.mkdir()
    nodes = [n.id for n in pipeplan.wire.graph_message(GRAPH).nodes]
    (path / "manifest.json").write_text(json.dumps(
        {"format": "pipeplan-model-package/1", "digest": "d1", "nodes": nodes,
         "loss": "cross_entropy"}))
    return str(path)


@pytest.fixture
def client(planner):
    with pipeplan.Client(planner.address, token_file=planner.token_file, timeout=60) as c:
        yield c


def test_plan_from_a_path_a_dict_and_messages(client):
    plan = client.plan(GRAPH, CLUSTER, **OPTIONS)
    graph = pipeplan.wire.graph_message(GRAPH)
    assert len(plan.stages) == 4
    assert plan.schedule == plan_pb2.SCHEDULE_1F1B
    assert pipeplan.schedule_name(plan.schedule) == "1F1B"
    assert plan.microbatches == 8
    assert plan.step_seconds > 0
    assert len(plan.node_stage) == len(graph.nodes)
    assert list(plan.node_stage) == sorted(plan.node_stage)  # a chain: stages in order
    assert set(plan.node_stage) == {0, 1, 2, 3}
    again = client.plan(graph, pipeplan.wire.cluster_message(CLUSTER), **OPTIONS)
    assert list(again.node_stage) == list(plan.node_stage)
    gpipe = client.plan(GRAPH, CLUSTER, ranks=2, schedule="gpipe", microbatches=4)
    assert (len(gpipe.stages), gpipe.schedule) == (2, plan_pb2.SCHEDULE_GPIPE)


def test_bad_requests_raise_typed_errors(client, package):
    with pytest.raises(pipeplan.InvalidArgument) as e:
        client.plan(GRAPH, CLUSTER, ranks=2, microbatches=-3)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "options.microbatches" in e.value.message and "-3" in e.value.message
    assert isinstance(e.value, pipeplan.PipeplanError) and isinstance(e.value, ValueError)
    with pytest.raises(pipeplan.InvalidArgument, match="training.lr"):
        client.create_job("bad", GRAPH, CLUSTER, ranks=2, training={
            "model_package": package, "optimizer": "sgd", "lr": 0,
            "data": "synthetic:seed=1", "batch_size": 8})
    with pytest.raises(pipeplan.NotFound) as e:
        client.get_job("no-such-job")
    assert e.value.code == grpc.StatusCode.NOT_FOUND and "no-such-job" in e.value.message
    # found by the client before anything is sent
    with pytest.raises(pipeplan.InvalidArgument, match="unknown schedule 'Zigzag'"):
        client.plan(GRAPH, CLUSTER, schedule="Zigzag")
    with pytest.raises(pipeplan.InvalidArgument, match="graph"):
        client.plan({"nodes": [{"id": "a", "flops_typo": 1}]}, CLUSTER)


def test_bearer_token_is_required(planner):
    with pipeplan.Client(planner.address, timeout=30) as anonymous:
        with pytest.raises(pipeplan.Unauthenticated):
            anonymous.list_jobs()
    with pipeplan.Client(planner.address, token="wrong", timeout=30) as wrong:
        with pytest.raises(pipeplan.Unauthenticated):
            wrong.plan(GRAPH, CLUSTER, **OPTIONS)
    with pipeplan.Client(planner.address, token=TOKEN, timeout=30) as right:
        assert isinstance(right.list_jobs(), list)


def test_a_missing_package_creates_no_job(client):
    before = len(client.list_jobs())
    with pytest.raises(pipeplan.NotFound, match="manifest.json"):  # it created a job
        client.create_job("no-package", GRAPH, CLUSTER, training={
            "model_package": "/nonexistent.ptpkg", "data": "synthetic:seed=1",
            "batch_size": 8}, **OPTIONS)
    assert len(client.list_jobs()) == before


def test_job_lifecycle_with_training_spec(client, package):
    training = {"model_package": package, "optimizer": "adam", "lr": 1e-3,
                "data": "synthetic:seed=7", "batch_size": 32, "max_steps": 3}
    job = client.create_job("py-train", GRAPH, CLUSTER, training=training, **OPTIONS)
    assert job.id and job.name == "py-train"
    assert job.plan_version == 1 and job.state == pb.JOB_PENDING
    assert len(job.plan.stages) == 4
    got = client.get_job(job.id)
    assert got.training.optimizer == "adam" and got.training.batch_size == 32
    assert got.training.max_steps == 3
    assert got.training.package_digest == "d1" and got.training.loss == "cross_entropy"
    assert client.get_plan(job.id).request.options.global_batch == 32
    assert job.id in [j.id for j in client.list_jobs()]
    client.delete_job(job.id)
    with pytest.raises(pipeplan.NotFound):
        client.get_job(job.id)
    assert job.id not in [j.id for j in client.list_jobs()]


def test_watch_sees_a_replan(client):
    job = client.create_job("py-watch", GRAPH, CLUSTER, **OPTIONS)
    client.register_worker(job.id, "w0", "gpu0", host="127.0.0.1")
    # A replan plans only onto devices with a live worker: two for 2 ranks.
    client.register_worker(job.id, "w1", "gpu1", host="127.0.0.1")
    with client.watch_plan(job.id, "w0", known_version=0, timeout=60) as watch:
        first = next(watch)
        assert (first.version, first.rank, len(first.plan.stages)) == (1, 0, 4)
        updates = []
        reader = threading.Thread(target=lambda: updates.append(next(watch)))
        reader.start()
        replanned = client.replan_job(job.id, reason="pytest", ranks=2)
        reader.join(timeout=60)
        assert not reader.is_alive()
    assert replanned.version == 2 and replanned.reason.startswith("pytest (left out")
    assert {s.device_id for s in replanned.plan.stages} == {"gpu0", "gpu1"}
    # only ranks changed: the other options are the first version's
    assert replanned.request.options.microbatches == 8
    assert updates[0].version == 2 and len(updates[0].plan.stages) == 2
    assert list(updates[0].plan.node_stage) == list(replanned.plan.node_stage)
    assert client.get_job(job.id).plan_version == 2
    client.delete_job(job.id)


def test_reports_per_step(client):
    job = client.create_job("py-reports", GRAPH, CLUSTER, ranks=2, replicas=1,
                            schedule="1F1B", microbatches=4, method="dp")
    devices = [s.device_id for s in job.plan.stages]
    for i, device in enumerate(devices):
        assignment = client.register_worker(job.id, "w%d" % i, device)
        assert assignment.rank == i and assignment.plan_version == 1
    last = "w%d" % (len(devices) - 1)  # its rank holds the last stage: it has the loss
    # step 0 through the client, step 1 through the generated stub
    assert client.report_step(job.id, "w0", 0, 1, 0.50, timings={"0F0": 0.1}) == 1
    client.report_step(job.id, last, 0, 1, 0.75, loss=2.5, peak_memory_bytes=1e9)
    client.stub.ReportStep(pb.ReportStepRequest(job_id=job.id, worker_id="w0", step=1,
                                                plan_version=1, step_seconds=0.4),
                           metadata=client.metadata, timeout=30)
    client.stub.ReportStep(pb.ReportStepRequest(job_id=job.id, worker_id=last, step=1,
                                                plan_version=1, step_seconds=0.3, loss=2.0),
                           metadata=client.metadata, timeout=30)
    # a report for a version the job is not at
    with pytest.raises(pipeplan.FailedPrecondition, match="version"):
        client.report_step(job.id, "w0", 2, 7, 0.1)
    # step 1 runs again under version 2 (a restart from a checkpoint after a replan)
    client.replan_job(job.id, reason="pytest")
    client.report_step(job.id, "w0", 1, 2, 0.9)
    client.report_step(job.id, last, 1, 2, 0.6, loss=1.5)
    rows = client.reports(job.id)
    assert rows == [
        {"step": 0, "plan_version": 1, "loss": 2.5, "step_seconds": 0.75, "reports": 2,
         "expected_reports": 2, "complete": True},
        {"step": 1, "plan_version": 2, "loss": 1.5, "step_seconds": 0.9, "reports": 2,
         "expected_reports": 2, "complete": True},
    ]
    raw = {(r.worker_id, r.step, r.plan_version): r for r in client.step_reports(job.id)}
    assert sorted(raw, key=lambda k: (k[2], k[1], k[0])) == [
        ("w0", 0, 1), (last, 0, 1), ("w0", 1, 1), (last, 1, 1), ("w0", 1, 2), (last, 1, 2)]
    first = raw[("w0", 0, 1)]
    assert first.timings[0].action == "0F0" and not first.HasField("loss")
    assert raw[(last, 0, 1)].peak_memory_bytes == 1e9
    # limit counts steps, not reports (it counted reports: 2 read as 1 step)
    assert client.reports(job.id, limit=2) == rows
    assert client.reports(job.id, limit=1) == [rows[1]]
    client.report_step(job.id, "w0", 2, 2, 0.4)  # step 2: one of two ranks so far
    partial = client.reports(job.id, limit=1)
    assert [(r["step"], r["reports"], r["complete"]) for r in partial] == [(2, 1, False)]
    for i in range(len(devices)):
        finished = client.finish_worker(job.id, "w%d" % i, 2)
    assert finished.state == pb.JOB_COMPLETED
    client.delete_job(job.id)


def test_cancelled_watch_ends_quietly(client):
    job = client.create_job("py-cancel", GRAPH, CLUSTER, **OPTIONS)
    watch = client.watch_plan(job.id, "w0", known_version=1)  # nothing newer yet
    timer = threading.Timer(0.3, watch.cancel)
    timer.start()
    assert list(watch) == []
    timer.join()
    client.delete_job(job.id)


def test_cancel_job_stops_its_workers_and_keeps_it(client):
    job = client.create_job("py-cancel-job", GRAPH, CLUSTER, **OPTIONS)
    client.register_worker(job.id, "w0", CLUSTER["devices"][0]["id"])
    cancelled = client.cancel_job(job.id, reason="done early")
    assert cancelled.state == pb.JOB_CANCELLED
    assert cancelled.failure_message == "cancelled: done early"
    with pytest.raises(pipeplan.NotFound):
        client.heartbeat(job.id, "w0")
    assert client.get_job(job.id).state == pb.JOB_CANCELLED  # still readable
    assert client.cancel_job(job.id).state == pb.JOB_CANCELLED  # again: OK
    client.delete_job(job.id)


def test_export_then_plan(client):
    import tiny_models
    module, inputs = tiny_models.gpt()
    graph = pipeplan.export(module, inputs, name="tiny-gpt")
    plan = client.plan(graph, CLUSTER, ranks=2, schedule="GPipe", microbatches=2)
    assert plan.graph_name == "tiny-gpt"
    assert len(plan.node_stage) == len(graph["nodes"])
    assert set(plan.node_stage) == {0, 1}
