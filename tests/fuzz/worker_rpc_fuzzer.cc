// Fuzzes the worker-facing RPCs as the planner's job registry answers them:
// RegisterWorker, Heartbeat, ReportStep, FinishWorker, WatchPlan,
// RendezvousSet/Get and ListStepReports, interleaved with plan versions, job
// cancellation and deletion and lease expiry. Requests come field by field
// (ids over 256 bytes, unknown devices, stale versions, NaN and huge
// numbers) or as raw protobuf bytes. Small limits make every
// RESOURCE_EXHAUSTED path reachable, and after every call the registry's
// accounting is checked: rendezvous bytes never negative and never past
// their limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz_input.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/store/store.h"

namespace {

using pipeplan::fuzz::FuzzInput;
using pipeplan::server::JobRegistry;
namespace v1 = pipeplan::v1;

constexpr JobRegistry::Options kLimits{.lease = absl::Seconds(10),
                                       .max_jobs = 3,
                                       .max_workers_per_job = 6,
                                       .rendezvous_max_value_bytes = 64,
                                       .rendezvous_max_keys_per_job = 8,
                                       .rendezvous_max_bytes_per_job = 256,
                                       .rendezvous_max_bytes = 384,
                                       .max_report_bytes = 512,
                                       .max_report_timings = 16};

class Watcher : public pipeplan::server::PlanWatcher {
 public:
  void OnPlan(std::shared_ptr<const v1::PlanUpdate>) override {}
  void OnClose(const absl::Status&) override {}
};

v1::PlanRequest Request() {
  v1::PlanRequest r;
  for (int d = 0; d < 4; ++d) r.mutable_cluster()->add_devices()->set_id(absl::StrCat("d", d));
  return r;
}

v1::Plan PlanOn(FuzzInput& in) {
  v1::Plan p;
  for (int s = in.Int(0, 4); s > 0; --s) {
    p.add_stages()->set_device_id(absl::StrCat("d", in.Int(0, 5)));
  }
  return p;
}

class Session {
 public:
  explicit Session(FuzzInput& in) : in_(in), registry_(store_.get(), &clock_, kLimits) {}

  void Run() {
    NewJob();
    for (int op = 0; op < 64 && !in_.empty(); ++op) {
      Step(in_.Byte() % 12);
      const int64_t held = registry_.counts().rendezvous_bytes;
      if (held < 0 || held > kLimits.rendezvous_max_bytes) std::abort();
    }
  }

 private:
  std::string Job() {
    const int pick = in_.Int(0, 7);
    if (pick < static_cast<int>(jobs_.size())) return jobs_[pick];
    return pick == 7 ? in_.Text(300) : "job-nope";
  }
  std::string WorkerId() {
    return in_.Byte() % 16 == 0 ? in_.Text(300) : absl::StrCat("w", in_.Int(0, 7));
  }

  void NewJob() {
    auto job = registry_.CreateJob(in_.Text(300), Request(), PlanOn(in_));
    if (job.ok()) jobs_.push_back(job->id());
  }

  v1::ReportStepRequest Report() {
    v1::ReportStepRequest r;
    r.set_job_id(Job());
    r.set_worker_id(WorkerId());
    r.set_step(in_.Count(100));
    r.set_plan_version(in_.Int(-1, 4));
    r.set_step_seconds(in_.Number());
    for (int t = in_.Int(0, 20); t > 0; --t) {
      v1::ActionTiming* a = r.add_timings();
      a->set_action(in_.Text(48));
      a->set_seconds(in_.Number());
    }
    r.set_peak_memory_bytes(in_.Number());
    if (in_.Byte() % 2) r.set_loss(in_.Number());
    return r;
  }

  void Step(int op) {
    switch (op) {
      case 0: {
        v1::WorkerInfo w;
        if (in_.Byte() % 8 == 0) {
          (void)w.ParseFromString(in_.Text(200));
        } else {
          w.set_worker_id(WorkerId());
          w.set_device_id(absl::StrCat("d", in_.Int(0, 5)));
          w.set_host(in_.Text(300));
          w.set_memory_bytes(in_.Number());
          w.set_measured_bandwidth_bytes_per_second(in_.Number());
        }
        (void)registry_.RegisterWorker(Job(), w);
        break;
      }
      case 1:
        (void)registry_.Heartbeat(Job(), WorkerId());
        break;
      case 2:
        (void)registry_.ReportStep(Report());
        break;
      case 3: {
        v1::ReportStepRequest r;
        if (r.ParseFromString(in_.Text(1024))) (void)registry_.ReportStep(r);
        break;
      }
      case 4: {
        v1::FinishWorkerRequest f;
        f.set_job_id(Job());
        f.set_worker_id(WorkerId());
        f.set_step(in_.Count(100));
        if (in_.Byte() % 2) f.set_error(in_.Text(255));
        (void)registry_.FinishWorker(f);
        break;
      }
      case 5:
      case 6: {
        const std::string key =
            in_.Byte() % 2 ? absl::StrCat("v", in_.Int(0, 4), "/k", in_.Int(0, 9)) : in_.Text(300);
        (void)registry_.RendezvousSet(Job(), key, in_.Text(100));
        break;
      }
      case 7:
        (void)registry_.RendezvousGet(Job(), absl::StrCat("v", in_.Int(0, 4), "/k", in_.Int(0, 9)));
        break;
      case 8:
        (void)registry_.PublishPlan(Job(), Request(), PlanOn(in_), in_.Text(64), in_.Int(0, 4));
        break;
      case 9: {
        auto w = std::make_shared<Watcher>();
        watchers_.push_back(w);
        (void)registry_.Watch(Job(), WorkerId(), in_.Count(4), w);
        if (in_.Byte() % 2) watchers_.clear();
        break;
      }
      case 10:
        clock_.Advance(absl::Seconds(in_.Int(0, 30)));
        (void)registry_.CheckLeases();
        (void)registry_.RecentStepReports(Job(), in_.Int(0, 20), in_.Int(0, 2048));
        break;
      default:
        switch (jobs_.empty() ? 0 : in_.Byte() % 3) {
          case 1:
            (void)registry_.DeleteJob(jobs_.back());
            jobs_.pop_back();
            break;
          case 2:  // stays listed, refuses worker calls, drops its rendezvous
            (void)registry_.CancelJob(Job(), in_.Text(64));
            break;
          default:
            NewJob();
        }
    }
  }

  FuzzInput& in_;
  pipeplan::server::FakeClock clock_;
  std::unique_ptr<pipeplan::server::Store> store_ = pipeplan::server::NewMemoryStore(32);
  JobRegistry registry_;
  std::vector<std::string> jobs_;
  std::vector<std::shared_ptr<Watcher>> watchers_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pipeplan::server::SetLogEnabled(false);
  FuzzInput in(data, size);
  Session(in).Run();
  return 0;
}
