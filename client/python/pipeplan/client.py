"""The pipeplan Python client: plans, jobs and the worker protocol of a running
pipeplan-planner over gRPC (proto/pipeplan/v1/planner_service.proto).

    import pipeplan
    with pipeplan.Client("127.0.0.1:7600", token_file="/etc/pipeplan/token") as c:
        plan = c.plan("graph.json", "cluster.json", ranks=4, schedule="1F1B")
        print(plan.step_seconds, pipeplan.schedule_name(plan.schedule))
        job = c.create_job("gpt", "graph.json", "cluster.json", ranks=4)
        for row in c.reports(job.id):
            print(row["step"], row["loss"], row["step_seconds"])

Every call raises a pipeplan.PipeplanError subclass on failure (errors.py); its
`timeout` (seconds) defaults to the client's. Returned values are the pipeplan.v1
messages (pipeplan.proto), except reports() (dicts, one per step). A Client is
safe to share between threads; close() (or `with`) releases its channel.
"""

import grpc

from pipeplan import errors, wire
from pipeplan.training import training_spec
from pipeplan.proto import planner_service_pb2 as pb
from pipeplan.proto import planner_service_pb2_grpc as pb_grpc

# The planner enforces its own limit (--max-message-bytes); the client accepts
# what the planner sends (a plan of a large graph exceeds gRPC's 4 MiB default).
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1),
                    ("grpc.max_send_message_length", -1)]


def _read(path, what="tls file"):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return wire.read_text(what, path).encode()  # raises the typed error


def _read_token(path):
    """The first line of the token file, as pipeplan-planner --auth-token-file reads it."""
    token = wire.read_text("token_file", path).split("\n", 1)[0].strip()
    if not token:
        raise errors.InvalidArgument("token_file %s: the first line is empty" % path)
    return token


def _devices(plan):
    """Devices a step of `plan` reports from: ranks x replicas."""
    ranks = len({s.device_id for s in plan.stages})
    return ranks * max(1, len(plan.replicas))


class _ClosedOnExit:
    """`with` support for what holds a call or a channel: leaving the block
    calls close(), and an exception in it propagates."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class PlanWatch(_ClosedOnExit):
    """The plan versions a worker should run, as the planner publishes them: an
    iterator of pipeplan.v1.PlanUpdate that blocks until the next one. cancel()
    (or leaving a `with` block) ends it; iteration then stops quietly. A planner
    error ends it with the typed error."""

    def __init__(self, call):
        self._call = call
        self._cancelled = False

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._call)
        except grpc.RpcError as e:
            if self._cancelled and e.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise errors.from_rpc_error(e) from e

    def cancel(self):
        self._cancelled = True
        self._call.cancel()

    close = cancel


class Client(_ClosedOnExit):
    """A connection to pipeplan-planner at `address` (host:port).

    token / token_file: the bearer token (`--auth-token-file` of the planner; the
    file's first line). tls_ca: PEM CA that signed the planner's certificate;
    tls_cert + tls_key: this client's certificate for a planner started with
    --tls-client-ca; any of the three (or tls=True, system roots) turns TLS on.
    timeout: default seconds per call.
    """

    def __init__(self, address, token=None, token_file=None, tls_ca=None, tls_cert=None,
                 tls_key=None, timeout=60, tls=False):
        if token is not None and token_file is not None:
            raise errors.InvalidArgument("give token or token_file, not both")
        if (tls_cert is None) != (tls_key is None):
            raise errors.InvalidArgument("tls_cert and tls_key go together")
        if token_file is not None:
            token = _read_token(token_file)
        self.address = address
        self.timeout = timeout
        self.metadata = (("authorization", "Bearer " + token),) if token else ()
        if tls or tls_ca or tls_cert:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca) if tls_ca else None,
                private_key=_read(tls_key) if tls_key else None,
                certificate_chain=_read(tls_cert) if tls_cert else None)
            self._channel = grpc.secure_channel(address, creds, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        # The generated stub, for calls this class does not wrap: pass
        # metadata=client.metadata (the bearer token) to them.
        self.stub = pb_grpc.PlannerServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def _call(self, method, request, timeout):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout,
                          metadata=self.metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from e

    # --- planning ---------------------------------------------------------------

    def plan(self, graph, cluster, timeout=None, **options):
        """Plans `graph` on `cluster` (each the JSON file's dict, a path or a
        message) and returns the pipeplan.v1.Plan. The options are the
        keywords of pipeplan.options.PLAN, one per `pipeplan plan` flag; None
        (or leaving one out) leaves it to the planner: ranks, replicas,
        max_replicas, microbatches, global_batch, schedule ("1F1B", "GPipe",
        "Interleaved1F1B", "ZBVZeroBubble", ...), chunks_per_rank, method ("dp",
        "milp", ...), comm_model ("direct", "relay"), optimizer ("sgd",
        "momentum", "adam", "adamw"), precision ("fp32", "bf16-mixed"),
        optimizer_state_multiplier, cut_granularity ("node", "module:DEPTH",
        "layer"), time_limit_seconds, relative_gap, allreduce_bucket_bytes
        (gradient bytes per all-reduce bucket; 0: 25 MiB). An unknown keyword
        raises TypeError."""
        return self._call(self.stub.Plan, wire.plan_request(graph, cluster, **options), timeout)

    # --- jobs -------------------------------------------------------------------

    def create_job(self, name, graph, cluster, training=None, timeout=None, **options):
        """Creates a job whose version-1 plan is planned from graph, cluster and the
        plan() options; returns the pipeplan.v1.Job. `training` (a dict of
        pipeplan.options.TRAINING keys, one per `jobs create` training flag, e.g.
        {"model_package": ..., "optimizer": "adam", "lr": 1e-3, "data":
        "synthetic:seed=1", "batch_size": 32, "max_steps": 100, "seed": 0})
        makes the workers train the model package; its batch_size becomes the
        plan's global batch. As `jobs create` does, the package is checked
        against the graph before anything is sent (NotFound for a missing one,
        InvalidArgument for one of another graph), and the optimizer keyword
        names the training optimizer when `training` names none."""
        request = pb.CreateJobRequest(name=name,
                                      request=wire.plan_request(graph, cluster, **options))
        spec = training_spec(training, request.request.graph, options.get("optimizer"))
        if spec is not None:
            request.training.CopyFrom(spec)
        return self._call(self.stub.CreateJob, request, timeout)

    def get_job(self, job_id, timeout=None):
        return self._call(self.stub.GetJob, pb.GetJobRequest(job_id=job_id), timeout)

    def list_jobs(self, timeout=None):
        return list(self._call(self.stub.ListJobs, pb.ListJobsRequest(), timeout).jobs)

    def delete_job(self, job_id, timeout=None):
        self._call(self.stub.DeleteJob, pb.DeleteJobRequest(job_id=job_id), timeout)

    def cancel_job(self, job_id, reason="", timeout=None):
        """Stops a running job and keeps its plans and reports; returns the
        pipeplan.v1.Job (state JOB_CANCELLED). Its workers stop."""
        return self._call(self.stub.CancelJob, pb.CancelJobRequest(job_id=job_id, reason=reason),
                          timeout)

    def get_plan(self, job_id, version=0, timeout=None):
        """The pipeplan.v1.VersionedPlan of `version` (0: the current one)."""
        return self._call(self.stub.GetPlan, pb.GetPlanRequest(job_id=job_id, version=version),
                          timeout)

    def replan_job(self, job_id, reason="", timeout=None, **options):
        """Re-solves the job and publishes the result as its next plan version;
        returns the pipeplan.v1.VersionedPlan. plan() options given here (e.g.
        ranks=2) replace those of the current version; the others keep their
        values."""
        request = pb.ReplanJobRequest(job_id=job_id, reason=reason)
        if any(v is not None for v in options.values()):
            current = self.get_plan(job_id, 0, timeout)
            request.options.CopyFrom(wire.plan_options(current.request.options, **options))
        return self._call(self.stub.ReplanJob, request, timeout)

    def step_reports(self, job_id, limit=10000, timeout=None):
        """The job's `limit` most recent step reports (pipeplan.v1.ReportStepRequest,
        one per worker and step run) in the planner's order; it returns at most
        10,000."""
        response = self._call(self.stub.ListStepReports,
                              pb.ListStepReportsRequest(job_id=job_id, limit=limit), timeout)
        return list(response.reports)

    def reports(self, job_id, limit=10000, timeout=None):
        """The last `limit` steps, one dict per step, as `pipeplan jobs reports
        --json` prints them: {"step", "plan_version", "loss", "step_seconds",
        "reports", "expected_reports", "complete"}. A step run again under a
        later plan version (after a restart or a plan switch) replaces the
        earlier run (versions only grow, so this does not depend on the order
        the planner lists reports in); loss is from the report that carries it
        (the last stage's rank; None when none did), step_seconds the slowest
        rank's, reports the number of worker reports folded in and
        expected_reports the devices (ranks x replicas) of its plan version: a
        step some ranks have not reported is not complete. The planner counts
        reports, so this asks for enough for `limit` steps and leaves out the
        oldest step when the answer was cut and that step lacks reports."""
        per_step = _devices(self.get_plan(job_id, 0, timeout).plan)
        wanted = min(10000, (limit + 1) * per_step)
        raw = self.step_reports(job_id, wanted, timeout)
        rows = {}
        for r in raw:
            row = rows.get(r.step)
            if row is not None and r.plan_version < row["plan_version"]:
                continue  # an earlier run of a step that ran again
            if row is None or r.plan_version > row["plan_version"]:
                row = rows[r.step] = {"step": r.step, "plan_version": r.plan_version,
                                      "loss": None, "step_seconds": 0.0, "reports": 0}
            row["step_seconds"] = max(row["step_seconds"], r.step_seconds)
            if r.HasField("loss"):
                row["loss"] = r.loss
            row["reports"] += 1
        devices = {}
        out = []
        for step in sorted(rows):
            row = rows[step]
            version = row["plan_version"]
            if version not in devices:
                devices[version] = _devices(self.get_plan(job_id, version, timeout).plan)
            row["expected_reports"] = devices[version]
            row["complete"] = row["reports"] >= devices[version]
            out.append(row)
        if len(raw) >= wanted and out and not out[0]["complete"]:
            out = out[1:]  # the cut may have taken its first reports
        return out[-limit:] if limit > 0 else []

    # --- the worker protocol ----------------------------------------------------

    def register_worker(self, job_id, worker_id, device_id, host="", memory_bytes=0.0,
                        measured_bandwidth_bytes_per_second=0.0, transport_address="",
                        timeout=None):
        """Registers a worker driving `device_id` of the job's cluster; returns its
        pipeplan.v1.Assignment (rank, plan version, lease)."""
        info = pb.WorkerInfo(worker_id=worker_id, host=host, device_id=device_id,
                             memory_bytes=memory_bytes,
                             measured_bandwidth_bytes_per_second=(
                                 measured_bandwidth_bytes_per_second),
                             transport_address=transport_address)
        return self._call(self.stub.RegisterWorker,
                          pb.RegisterWorkerRequest(job_id=job_id, worker=info), timeout)

    def watch_plan(self, job_id, worker_id, known_version=0, timeout=None):
        """A PlanWatch: the job's plan versions above `known_version` for this
        worker, each as it is published (the current one at once when it is newer).
        `timeout` bounds the whole stream (default: none)."""
        request = pb.WatchPlanRequest(job_id=job_id, worker_id=worker_id,
                                      known_version=known_version)
        return PlanWatch(self.stub.WatchPlan(request, timeout=timeout, metadata=self.metadata))

    def report_step(self, job_id, worker_id, step, plan_version, step_seconds, loss=None,
                    peak_memory_bytes=0.0, timings=None, timeout=None):
        """Reports one step of one worker; `timings` maps actions ("1F3") to
        seconds. Returns the plan version the worker should run. A report for an
        older version raises FailedPrecondition."""
        request = pb.ReportStepRequest(job_id=job_id, worker_id=worker_id, step=step,
                                       plan_version=plan_version, step_seconds=step_seconds,
                                       peak_memory_bytes=peak_memory_bytes)
        if loss is not None:
            request.loss = loss
        for action, seconds in (timings or {}).items():
            request.timings.add(action=action, seconds=seconds)
        return self._call(self.stub.ReportStep, request, timeout).current_plan_version

    def heartbeat(self, job_id, worker_id, timeout=None):
        """Renews the worker's lease; returns the pipeplan.v1.HeartbeatResponse."""
        return self._call(self.stub.Heartbeat,
                          pb.HeartbeatRequest(job_id=job_id, worker_id=worker_id), timeout)

    def finish_worker(self, job_id, worker_id, step, error="", timeout=None, leaving=False,
                      plan_version=0):
        """Says the worker is done after `step` steps (error empty), failed with an
        error no restart fixes (the job fails), or, with `leaving`, leaves a job that
        goes on (WORKER_LEFT; the planner replans without it). `plan_version` is the
        version it trained on (0: the current one). Returns the pipeplan.v1.Job."""
        return self._call(self.stub.FinishWorker,
                          pb.FinishWorkerRequest(job_id=job_id, worker_id=worker_id,
                                                 step=step, error=error, leaving=leaving,
                                                 plan_version=plan_version), timeout)
