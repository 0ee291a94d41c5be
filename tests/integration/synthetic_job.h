// What the elastic integration tests share: a planner with a short lease
// and membership-only replans, a job of synthetic workers (no torch) on
// 127.0.0.1, and reading the workers' event lines.
#ifndef PIPEPLAN_TESTS_INTEGRATION_SYNTHETIC_JOB_H_
#define PIPEPLAN_TESTS_INTEGRATION_SYNTHETIC_JOB_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/client/planner_client.h"
#include "planner_process.h"
#include "support/plan_requests.h"
#include "support/temp_dir.h"
#include "worker_process.h"

namespace pipeplan::testing {

inline constexpr int kLeaseSeconds = 2;

inline int64_t Int(const std::string& s) {
  int64_t v = -1;
  (void)absl::SimpleAtoi(s, &v);
  return v;
}

// Polls `done` every 50 ms until it holds or `timeout` passes.
template <typename F>
bool WaitFor(F done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return done();
}

// Planner flags: a short lease so a lost worker is noticed within seconds;
// no calibration replans, so only membership changes the plan. The
// test model's steps take ~15 ms, so a fourth rank gains ~1-5 ms per step
// depending on the machine's load: no absolute floor, so that growing back
// turns on the relative gain alone.
inline std::vector<std::string> PlannerFlags(std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--lease-seconds", absl::StrCat(kLeaseSeconds), "--replan",
                                "membership",      "--replan-min-gain-seconds", "0"};
  // A flag in `extra` replaces the default of the same name.
  for (size_t i = 0; i < extra.size(); ++i) {
    auto it = std::find(f.begin(), f.end(), extra[i]);
    if (it != f.end() && i + 1 < extra.size() && extra[i].rfind("--", 0) == 0) {
      *(it + 1) = extra[++i];
    } else {
      f.push_back(extra[i]);
    }
  }
  return f;
}

inline int64_t FirstStepOf(const WorkerProcess& w, int64_t version) {
  const auto steps = w.Values("step", "step");
  const auto versions = w.Values("step", "plan_version");
  for (size_t i = 0; i < steps.size() && i < versions.size(); ++i) {
    if (Int(versions[i]) == version) return Int(steps[i]);
  }
  return -1;
}

// Synthetic workers (no torch) of one job, `ranks` ranks of SmallRequest's
// cluster; `edit` (when set) changes the request before the job is created.
struct SyntheticJob {
  TempDir dir;
  TempDir data;
  std::unique_ptr<PlannerProcess> planner;
  std::unique_ptr<client::PlannerClient> client;
  std::string job;
  double step_seconds = 0;                 // planned
  std::vector<std::string> devices;        // with a rank in version 1
  std::vector<std::string> spare_devices;  // without

  void Start(std::vector<std::string> planner_flags = {}, int ranks = 4,
             const std::function<void(v1::PlanRequest&)>& edit = nullptr) {
    planner_flags.insert(planner_flags.end(), {"--data-dir", data.path()});
    auto planner = PlannerProcess::Start(PlannerFlags(planner_flags));
    ASSERT_TRUE(planner.ok()) << planner.status();
    this->planner = *std::move(planner);
    auto client = this->planner->Client();
    ASSERT_TRUE(client.ok());
    this->client = *std::move(client);
    v1::PlanRequest r = SmallRequest();
    r.mutable_options()->set_num_ranks(ranks);
    // One pipeline on `ranks` of the eight devices: a worker for each.
    r.mutable_options()->set_max_replicas(1);
    if (edit) edit(r);
    auto created = this->client->CreateJob("elastic", r);
    ASSERT_TRUE(created.ok()) << created.status();
    job = created->id();
    step_seconds = created->plan().step_seconds();
    for (const auto& s : created->plan().stages()) devices.push_back(s.device_id());
    for (const auto& d : r.cluster().devices()) {
      if (std::find(devices.begin(), devices.end(), d.id()) == devices.end()) {
        spare_devices.push_back(d.id());
      }
    }
  }
  // `flags` replace WorkerArgs' values of the same flags or are appended.
  std::unique_ptr<WorkerProcess> Worker(const std::string& id, const std::string& device,
                                        std::vector<std::string> flags = {}) {
    std::vector<std::string> args = WorkerArgs(planner->address(), job, id, device);
    flags.insert(flags.begin(), {"--time-scale", "0.2"});
    for (size_t i = 0; i + 1 < flags.size(); i += 2) {
      auto it = std::find(args.begin(), args.end(), flags[i]);
      if (it != args.end() && it + 1 != args.end()) {
        *(it + 1) = flags[i + 1];
      } else {
        args.insert(args.end(), {flags[i], flags[i + 1]});
      }
    }
    return std::make_unique<WorkerProcess>(dir.path(), id, args);
  }
};

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_INTEGRATION_SYNTHETIC_JOB_H_
