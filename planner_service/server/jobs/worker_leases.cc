#include "worker_leases.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/server/obs/log.h"

namespace pipeplan::server::internal {
namespace {

// True when every worker with a rank in `plan` (a version of `job`) is
// DONE, and there is one.
bool AllRanksDone(const Job& job, const v1::Plan& plan) {
  int done = 0;
  for (const auto& [id, w] : job.workers) {
    if (RankOfDevice(plan, w.record.info.device_id()) < 0) continue;
    if (w.record.state != v1::WORKER_DONE) return false;
    ++done;
  }
  return done > 0;
}

// INVALID_ARGUMENT for a device outside the job's cluster; ALREADY_EXISTS
// for the id of an active worker on another device.
absl::Status CheckDevice(const Job& job, const v1::WorkerInfo& info) {
  const v1::ClusterTopology& cluster = job.current->request().cluster();
  const bool known_device =
      std::any_of(cluster.devices().begin(), cluster.devices().end(),
                  [&](const v1::Device& d) { return d.id() == info.device_id(); });
  if (!known_device) {
    // The devices it could have named, so the operator can fix the flag.
    constexpr int kListed = 16;
    std::vector<std::string> ids;
    for (const v1::Device& d : cluster.devices()) {
      if (static_cast<int>(ids.size()) == kListed) break;
      ids.push_back(d.id());
    }
    const int more = cluster.devices_size() - static_cast<int>(ids.size());
    return absl::InvalidArgumentError(
        absl::StrCat("worker.device_id \"", info.device_id(), "\" is not a device of job ",
                     job.record.id, "'s cluster; its devices are ", absl::StrJoin(ids, ", "),
                     more > 0 ? absl::StrCat(" and ", more, " more") : ""));
  }
  auto it = job.workers.find(info.worker_id());
  if (it != job.workers.end() && it->second.record.state == v1::WORKER_ACTIVE &&
      it->second.record.info.device_id() != info.device_id()) {
    // Two processes with one id would take turns rewriting the record (and
    // the rank): the second one is refused while the first holds its lease.
    return absl::AlreadyExistsError(absl::StrCat(
        "worker id \"", info.worker_id(), "\" is already registered with job ", job.record.id,
        " on device ", it->second.record.info.device_id(), ", not ", info.device_id(),
        ": give each worker its own --worker-id (a worker id is bound to its device until "
        "its lease runs out)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WorkerLeases::CheckInfo(const v1::WorkerInfo& info) {
  PIPEPLAN_RETURN_IF_ERROR(CheckId("worker.worker_id", info.worker_id()));
  PIPEPLAN_RETURN_IF_ERROR(CheckId("worker.device_id", info.device_id()));
  if (info.host().size() > kMaxIdBytes || info.transport_address().size() > kMaxIdBytes) {
    return absl::InvalidArgumentError("worker.host or worker.transport_address is too long");
  }
  if (!(info.memory_bytes() >= 0) || !(info.measured_bandwidth_bytes_per_second() >= 0)) {
    return absl::InvalidArgumentError(
        "worker.memory_bytes and worker.measured_bandwidth_bytes_per_second must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Assignment> WorkerLeases::Register(Job& job, const v1::WorkerInfo& info) {
  sync_->FindWorker(job, info.worker_id());  // replicated: registered elsewhere before
  PIPEPLAN_RETURN_IF_ERROR(CheckDevice(job, info));
  auto it = job.workers.find(info.worker_id());
  const bool reconnect = it != job.workers.end();
  if (!reconnect && static_cast<int>(job.workers.size()) >= ctx_->options.max_workers_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job.record.id, " already has the maximum of ",
                     ctx_->options.max_workers_per_job, " workers"));
  }
  const absl::Time now = ctx_->clock->Now();
  WorkerRecord rec;
  rec.job_id = job.record.id;
  rec.info = info;
  rec.rank = RankOfDevice(job.current->plan(), info.device_id());
  rec.state = v1::WORKER_ACTIVE;
  rec.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  rec.last_step = reconnect ? it->second.record.last_step : -1;
  PIPEPLAN_RETURN_IF_ERROR(ctx_->store->PutWorker(rec));
  Worker next{rec, now + ctx_->options.lease};
  next.stored_heartbeat = now;
  if (reconnect) {
    next.report_run_id = it->second.report_run_id;
    next.report_seq = it->second.report_seq;
  }
  job.workers[info.worker_id()] = std::move(next);
  table_->UpdateGauges();
  LogInfo(reconnect ? "worker_reregistered" : "worker_registered",
          {{"job", job.record.id},
           {"plan_version", absl::StrCat(job.record.current_version)},
           {"worker", info.worker_id()},
           {"device", info.device_id()},
           {"rank", absl::StrCat(rec.rank)}});
  v1::Assignment a;
  a.set_job_id(job.record.id);
  a.set_worker_id(info.worker_id());
  a.set_rank(rec.rank);
  a.set_plan_version(job.record.current_version);
  a.set_lease_seconds(absl::ToDoubleSeconds(ctx_->options.lease));
  return a;
}

absl::StatusOr<v1::HeartbeatResponse> WorkerLeases::Heartbeat(Job& job, Worker& w) {
  const absl::Time now = ctx_->clock->Now();
  if (w.record.state != v1::WORKER_ACTIVE) {
    PIPEPLAN_RETURN_IF_ERROR(Revive(w, now));
    LogInfo("worker_recovered", {{"job", job.record.id},
                                 {"plan_version", absl::StrCat(job.record.current_version)},
                                 {"worker", w.record.info.worker_id()}});
  }
  w.lease_expiry = now + ctx_->options.lease;
  w.record.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  sync_->QueueHeartbeat(w, now);
  v1::HeartbeatResponse r;
  r.set_current_plan_version(job.record.current_version);
  r.set_lease_seconds(absl::ToDoubleSeconds(ctx_->options.lease));
  r.set_job_state(job.record.state);
  return r;
}

absl::Status WorkerLeases::Revive(Worker& w, absl::Time now) {
  WorkerRecord back = w.record;
  back.state = v1::WORKER_ACTIVE;
  back.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  PIPEPLAN_RETURN_IF_ERROR(Update(w, std::move(back)));
  table_->UpdateGauges();
  return absl::OkStatus();
}

absl::Status WorkerLeases::Update(Worker& w, WorkerRecord next) {
  PIPEPLAN_RETURN_IF_ERROR(ctx_->store->PutWorker(next));
  w.record = std::move(next);
  return absl::OkStatus();
}

namespace {

// The hosts of `devices` in the job's cluster (Device.host).
std::set<std::string> HostsOf(const Job& job, const std::vector<std::string>& devices) {
  std::set<std::string> hosts;
  if (!job.current) return hosts;
  for (const v1::Device& d : job.current->request().cluster().devices()) {
    if (!d.host().empty() && std::find(devices.begin(), devices.end(), d.id()) != devices.end()) {
      hosts.insert(d.host());
    }
  }
  return hosts;
}

// Whether `worker_id` has a WatchPlan stream open on this planner. A
// process that died (kill -9, its host gone) closed the stream's socket,
// and gRPC ends the stream at once: with a peer's report naming it, that
// is proof enough, where a lease or a grace would only wait longer.
bool WatchOpen(const Job& job, const std::string& worker_id) {
  return std::any_of(job.watches.begin(), job.watches.end(), [&](const WatchEntry& e) {
    return e.worker_id == worker_id && !e.watcher.expired();
  });
}

// Whether `w`, suspected by a peer and still under its suspicion, has
// closed its watch stream: lost now. Only on one planner: replicas see
// only the streams opened to themselves.
bool SuspectGone(const RegistryContext& ctx, const Job& job, const Worker& w) {
  return !ctx.replicated() && w.lease_expiry == w.suspect_expiry &&
         !WatchOpen(job, w.record.info.worker_id());
}

// Whether `w`'s watch stream has been closed for `grace` without being
// opened again: its process died though no peer was talking to it (a kill
// during a plan switch or rendezvous), where the lease would wait longer.
// A live worker reopens its stream after 100 ms of backoff. Only for
// workers that watched on this planner, on one planner (see SuspectGone).
bool WatchLost(const RegistryContext& ctx, const Job& job, Worker& w, absl::Time now,
               absl::Duration grace) {
  if (ctx.replicated() || !w.watched) return false;
  if (WatchOpen(job, w.record.info.worker_id())) {
    w.watch_gone_since = absl::InfiniteFuture();
    return false;
  }
  w.watch_gone_since = std::min(w.watch_gone_since, now);
  return now - w.watch_gone_since >= grace;
}

std::string HostOf(const Job& job, const std::string& device) {
  if (!job.current) return "";
  for (const v1::Device& d : job.current->request().cluster().devices()) {
    if (d.id() == device) return d.host();
  }
  return "";
}

}  // namespace

void WorkerLeases::ReportPeerFailure(Job& job, Worker& reporter, int64_t version,
                                     const std::vector<std::string>& devices) {
  reporter.failure_seen_version = std::max(reporter.failure_seen_version, version);
  const absl::Time now = ctx_->clock->Now();
  const absl::Duration grace = std::min(ctx_->options.suspect_grace, ctx_->options.lease);
  // A host that went away takes all its workers: those of the named
  // devices' hosts with a rank that have not reported the failure are
  // suspects too (nobody may have talked to them when the failure came).
  // Nothing closed under them for sure, so they keep half a lease: a live
  // one heartbeats every third of a lease.
  const absl::Duration host_grace = std::max(2 * grace, ctx_->options.lease / 2);
  const std::set<std::string> hosts = HostsOf(job, devices);
  for (auto& [wid, w] : job.workers) {
    if (&w == &reporter || w.record.state != v1::WORKER_ACTIVE) continue;
    if (w.failure_seen_version >= version) continue;  // alive: it saw the failure too
    const bool named =
        std::find(devices.begin(), devices.end(), w.record.info.device_id()) != devices.end();
    const bool host_mate =
        !named && w.record.rank >= 0 && hosts.contains(HostOf(job, w.record.info.device_id()));
    if (!named && !host_mate) continue;
    const absl::Time until = now + (named ? grace : host_grace);
    if (until >= w.lease_expiry) continue;
    w.lease_expiry = until;
    w.suspect_expiry = until;
    LogInfo("worker_suspected", {{"job", job.record.id},
                                 {"plan_version", absl::StrCat(version)},
                                 {"worker", wid},
                                 {"reported_by", reporter.record.info.worker_id()}});
  }
}

int WorkerLeases::CheckLeases() {
  const absl::Time now = ctx_->clock->Now();
  int lost = 0;
  for (auto& [id, job] : table_->jobs()) {
    // Replicated: only the job's owner declares its workers lost, and only
    // after reading the heartbeats other replicas wrote.
    if (ctx_->ownership && !ctx_->ownership->Lease(id).has_value()) continue;
    for (auto& [wid, w] : job.workers) {
      if (Expire(job, w, now)) ++lost;
    }
  }
  if (lost > 0) table_->UpdateGauges();
  return lost;
}

bool WorkerLeases::Expire(const Job& job, Worker& w, absl::Time now) {
  if (w.record.state != v1::WORKER_ACTIVE) return false;
  const char* why = "lease expired";
  if (now < w.lease_expiry) {
    if (SuspectGone(*ctx_, job, w)) {
      why = "suspected, watch closed";
    } else if (WatchLost(*ctx_, job, w, now, 2 * ctx_->options.suspect_grace)) {
      why = "watch closed";
    } else {
      return false;
    }
  }
  if (sync_->HeartbeatElsewhere(w, now)) return false;
  const std::string wid = w.record.info.worker_id();  // a copy: Update replaces the record
  WorkerRecord gone = w.record;
  gone.state = v1::WORKER_LOST;
  if (absl::Status saved = Update(w, std::move(gone)); !saved.ok()) {
    // Still expired: the next check tries again.
    LogWarn("worker_lost_not_saved",
            {{"job", job.record.id}, {"worker", wid}, {"error", std::string(saved.message())}});
    return false;
  }
  LogWarn("worker_lost",
          {{"job", job.record.id},
           {"plan_version", absl::StrCat(job.record.current_version)},
           {"worker", wid},
           {"lease_seconds", absl::StrCat(absl::ToDoubleSeconds(ctx_->options.lease))},
           {"why", why}});
  return true;
}

std::shared_ptr<const v1::VersionedPlan> WorkerLeases::TrainedPlan(const Job& job,
                                                                   int64_t version) const {
  // The one this worker trained to the end on, which may be older than the
  // current one (a version published as training reached max_steps never
  // ran).
  if (version > 0 && version < job.record.current_version) {
    absl::StatusOr<v1::VersionedPlan> older = ctx_->store->GetPlan(job.record.id, version);
    if (older.ok()) return std::make_shared<const v1::VersionedPlan>(*std::move(older));
  }
  return job.current;
}

std::pair<v1::JobState, std::string> WorkerLeases::StateAfter(
    const Job& job, const v1::FinishWorkerRequest& request, bool leaving,
    const v1::Plan& trained) const {
  v1::JobState next = job.record.state;
  std::string message = job.record.failure_message;
  if (next == v1::JOB_CANCELLED) {
    // Stays cancelled: a worker stopping because of it is not a failure.
  } else if (!request.error().empty() && next != v1::JOB_FAILED) {
    next = v1::JOB_FAILED;
    message = absl::StrCat("worker ", request.worker_id(), " at step ", request.step(), ": ",
                           request.error());
  } else if (request.error().empty() && !leaving &&
             (next == v1::JOB_RUNNING || next == v1::JOB_PENDING) && AllRanksDone(job, trained)) {
    next = v1::JOB_COMPLETED;
  }
  return {next, message};
}

absl::StatusOr<v1::Job> WorkerLeases::Finish(Job& job, const v1::FinishWorkerRequest& request) {
  auto it = job.workers.find(request.worker_id());
  if (it == job.workers.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker \"", request.worker_id(), "\" is not registered with job ", request.job_id()));
  }
  // A worker leaving a job that goes on is LEFT: never lost, and the policy
  // replans over the live workers at once.
  const bool leaving = request.leaving() && request.error().empty() &&
                       (job.record.state == v1::JOB_RUNNING || job.record.state == v1::JOB_PENDING);
  const std::shared_ptr<const v1::VersionedPlan> trained = TrainedPlan(job, request.plan_version());
  WorkerRecord rec = it->second.record;
  rec.state = leaving ? v1::WORKER_LEFT : v1::WORKER_DONE;
  rec.last_step = std::max(rec.last_step, request.step() - 1);
  PIPEPLAN_RETURN_IF_ERROR(Update(it->second, std::move(rec)));
  const auto [next, message] = StateAfter(job, request, leaving, trained->plan());
  if (leaving) {
    LogInfo("worker_left", {{"job", job.record.id},
                            {"plan_version", absl::StrCat(job.record.current_version)},
                            {"worker", request.worker_id()},
                            {"step", absl::StrCat(request.step())}});
  }
  if (next != job.record.state) {
    PIPEPLAN_RETURN_IF_ERROR(StoreJobState(*ctx_, job.record.id, next, message));
    job.record.state = next;
    job.record.failure_message = message;
    LogInfo("job_state",
            {{"job", job.record.id}, {"state", v1::JobState_Name(next)}, {"message", message}});
  }
  table_->UpdateGauges();
  return JobToProto(job, /*with_plan=*/false);
}

}  // namespace pipeplan::server::internal
