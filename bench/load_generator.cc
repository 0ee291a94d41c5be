// pipeplan-loadgen: drives a planner service and prints throughput and
// latency percentiles of
//   1. Plan on a cached request (chain_small, identical every call),
//   2. Plan on a 1K-node graph, cold (gpt_1k; an option varies per call so
//      the request cache never answers),
//   3. ReportStep from N workers at 1 report/s each (open loop, paced).
//
//   pipeplan-loadgen [--planner ADDR[,ADDR...]] [--seconds S] [--concurrency C]
//                    [--cold-concurrency C] [--workers N] [--data DIR] [--cold on|off]
//
// With several addresses (replicated planners on one PostgreSQL) the calls
// are spread round robin over one client per replica: Plan call i and
// worker w go to replica i % n and w % n.
//
// Without --planner it starts a planner in-process on 127.0.0.1:0 with a
// throwaway data directory.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/rpc/server.h"

#ifndef PIPEPLAN_SOURCE_DIR
#define PIPEPLAN_SOURCE_DIR "."
#endif

namespace {

using pipeplan::client::PlannerClient;
namespace v1 = pipeplan::v1;

struct Options {
  std::string planner;
  double seconds = 5;
  int concurrency = 16;
  int cold_concurrency = 0;  // 0: hardware threads
  int workers = 1000;
  std::string data = std::string(PIPEPLAN_SOURCE_DIR) + "/tests/data";
  bool cold = true;
};

// One client per planner address; call i uses clients[i % size].
struct Clients {
  std::vector<std::unique_ptr<PlannerClient>> all;
  PlannerClient& operator[](int64_t i) const { return *all[static_cast<size_t>(i) % all.size()]; }
};

struct Result {
  std::string name;
  int64_t calls = 0;
  int64_t errors = 0;
  double seconds = 0;
  std::vector<double> latencies_ms;
  std::string first_error;
};

// One caller thread's latencies and errors; merged into the Result when the
// thread ends.
struct Tally {
  std::vector<double> latencies_ms;
  int64_t errors = 0;
  std::string first_error;

  // A call that started at `t0` ended now with `s`.
  void Record(absl::Time t0, const absl::Status& s) {
    latencies_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (!s.ok()) {
      ++errors;
      if (first_error.empty()) first_error = s.ToString();
    }
  }
  void MergeInto(Result& r, std::mutex& mu) const {
    std::lock_guard<std::mutex> l(mu);
    r.latencies_ms.insert(r.latencies_ms.end(), latencies_ms.begin(), latencies_ms.end());
    r.errors += errors;
    if (r.first_error.empty()) r.first_error = first_error;
  }
};

// After every caller joined: wall time and call count of a run that began at `start`.
void Finish(Result& r, absl::Time start) {
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.calls = static_cast<int64_t>(r.latencies_ms.size());
}

template <typename M>
M ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "pipeplan-loadgen: cannot read " << path << "\n";
    std::exit(1);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  M m;
  if (auto s = pipeplan::ParseJson(ss.str(), &m); !s.ok()) {
    std::cerr << "pipeplan-loadgen: " << path << ": " << s << "\n";
    std::exit(1);
  }
  return m;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// Closed loop: `threads` callers, each calling `call(i)` back to back.
template <typename F>
Result ClosedLoop(const std::string& name, int threads, double seconds, F call) {
  Result r;
  r.name = name;
  std::mutex mu;
  std::atomic<int64_t> counter{0};
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(seconds);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      Tally tally;
      while (absl::Now() < end) {
        const int64_t i = counter++;
        const absl::Time t0 = absl::Now();
        tally.Record(t0, call(i));
      }
      tally.MergeInto(r, mu);
    });
  }
  for (auto& t : ts) t.join();
  Finish(r, start);
  return r;
}

Result ReportSteps(const Clients& clients, const Options& o, const v1::PlanRequest& req) {
  PlannerClient& c = clients[0];
  Result r;
  r.name = absl::StrFormat("ReportStep, %d workers x 1/s", o.workers);
  auto job = c.CreateJob("loadgen", req);
  if (!job.ok()) {
    r.first_error = job.status().ToString();
    r.errors = 1;
    return r;
  }
  const int devices = req.cluster().devices_size();
  for (int w = 0; w < o.workers; ++w) {
    v1::WorkerInfo info;
    info.set_worker_id(absl::StrFormat("w%04d", w));
    info.set_device_id(req.cluster().devices(w % devices).id());
    info.set_host("127.0.0.1");
    if (auto a = clients[w].RegisterWorker(job->id(), info); !a.ok()) {
      r.first_error = a.status().ToString();
      r.errors = 1;
      return r;
    }
  }
  // Open loop: worker w reports at t = k + w / workers seconds, k = 0, 1, ...
  const int threads = 16;
  std::mutex mu;
  const absl::Time start = absl::Now();
  const int rounds = std::max(1, static_cast<int>(o.seconds));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      Tally tally;
      v1::ReportStepRequest rep;
      rep.set_job_id(job->id());
      rep.set_plan_version(1);
      rep.set_step_seconds(0.004);
      rep.set_peak_memory_bytes(5e8);
      for (int a = 0; a < 8; ++a) {
        auto* timing = rep.add_timings();
        timing->set_action(absl::StrFormat("0F%d", a));
        timing->set_seconds(2.5e-4);
      }
      for (int k = 0; k < rounds; ++k) {
        for (int w = t; w < o.workers; w += threads) {
          const absl::Time due = start + absl::Seconds(k) + absl::Seconds(1) * w / o.workers;
          const absl::Time now = absl::Now();
          if (due > now) absl::SleepFor(due - now);
          rep.set_worker_id(absl::StrFormat("w%04d", w));
          rep.set_step(k);
          const absl::Time t0 = absl::Now();
          tally.Record(t0, clients[w].ReportStep(rep).status());
        }
      }
      tally.MergeInto(r, mu);
    });
  }
  for (auto& t : ts) t.join();
  Finish(r, start);
  (void)c.DeleteJob(job->id());
  return r;
}

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "--help" || name == "-h" || i + 1 >= argc) return false;
    std::string value = argv[++i];
    bool ok = true;
    if (name == "--planner") {
      o->planner = value;
    } else if (name == "--seconds") {
      ok = absl::SimpleAtod(value, &o->seconds) && o->seconds > 0;
    } else if (name == "--concurrency") {
      ok = absl::SimpleAtoi(value, &o->concurrency) && o->concurrency > 0;
    } else if (name == "--cold-concurrency") {
      ok = absl::SimpleAtoi(value, &o->cold_concurrency) && o->cold_concurrency >= 0;
    } else if (name == "--workers") {
      ok = absl::SimpleAtoi(value, &o->workers) && o->workers > 0;
    } else if (name == "--data") {
      o->data = value;
    } else if (name == "--cold") {
      ok = value == "on" || value == "off";
      o->cold = value == "on";
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "pipeplan-loadgen: bad flag " << name << " " << value << "\n";
      return false;
    }
  }
  return true;
}

// A planner in this process on 127.0.0.1 with its data in a temp dir, for
// runs without --planner; `data_dir` is where it keeps its files.
absl::StatusOr<std::unique_ptr<pipeplan::server::PlannerServer>> StartOwnPlanner(
    std::string* data_dir) {
  pipeplan::server::SetLogEnabled(false);
  *data_dir = (std::filesystem::temp_directory_path() /
               absl::StrFormat("pipeplan-loadgen-%d", static_cast<int>(getpid())))
                  .string();
  pipeplan::server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.data_dir = *data_dir;
  return pipeplan::server::PlannerServer::Start(config);
}

// The two requests every scenario sends: a small cached chain and a 1k-node
// GPT that takes a real solve.
struct Requests {
  v1::PlanRequest small;
  v1::PlanRequest gpt;
};

Requests LoadRequests(const std::string& data) {
  Requests r;
  const auto cluster = ReadJson<v1::ClusterTopology>(data + "/cluster_8xa100.json");
  *r.small.mutable_graph() = ReadJson<v1::ModelGraph>(data + "/chain_small.json");
  *r.small.mutable_cluster() = cluster;
  r.small.mutable_options()->set_num_ranks(4);
  r.small.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.small.mutable_options()->set_microbatches(8);
  r.small.mutable_options()->set_method(v1::METHOD_DP);
  *r.gpt.mutable_graph() = ReadJson<v1::ModelGraph>(data + "/gpt_1k.json");
  *r.gpt.mutable_cluster() = cluster;
  r.gpt.mutable_options()->set_num_ranks(8);
  r.gpt.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.gpt.mutable_options()->set_microbatches(16);
  r.gpt.mutable_options()->set_method(v1::METHOD_DP);
  return r;
}

void PrintTable(const std::vector<Result>& results, const Options& o, bool own) {
  std::cout << absl::StrFormat("\npipeplan-loadgen against %s (%s), %.0f s per scenario\n\n",
                               o.planner, own ? "in-process planner" : "remote planner", o.seconds);
  std::cout << absl::StrFormat("%-42s %9s %7s %11s %10s %10s %10s\n", "scenario", "calls", "errors",
                               "calls/s", "p50 ms", "p99 ms", "max ms");
  for (const Result& r : results) {
    std::cout << absl::StrFormat("%-42s %9d %7d %11.1f %10.3f %10.3f %10.3f\n", r.name, r.calls,
                                 r.errors, r.seconds > 0 ? r.calls / r.seconds : 0,
                                 Percentile(r.latencies_ms, 0.5), Percentile(r.latencies_ms, 0.99),
                                 Percentile(r.latencies_ms, 1.0));
    if (!r.first_error.empty()) std::cout << "    first error: " << r.first_error << "\n";
  }
}

// One client per planner address, each answering a warm-up Plan.
absl::Status ConnectAll(const std::string& planners, const v1::PlanRequest& warm_up,
                        Clients* clients) {
  for (absl::string_view address : absl::StrSplit(planners, ',', absl::SkipEmpty())) {
    auto client =
        PlannerClient::Connect({.address = std::string(address), .timeout = absl::Seconds(120)});
    if (!client.ok()) return client.status();
    clients->all.push_back(*std::move(client));
  }
  for (size_t i = 0; i < clients->all.size(); ++i) {
    if (auto warm = (*clients)[static_cast<int64_t>(i)].Plan(warm_up); !warm.ok()) {
      return absl::Status(warm.status().code(),
                          absl::StrCat("cannot reach ", planners, ": ", warm.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!Parse(argc, argv, &o)) {
    std::cerr << "usage: pipeplan-loadgen [--planner ADDR[,ADDR...]] [--seconds S]\n"
                 "                        [--concurrency C] [--cold-concurrency C] [--workers N]\n"
                 "                        [--data DIR] [--cold on|off]\n";
    return 2;
  }
  if (o.cold_concurrency == 0) {
    o.cold_concurrency = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }

  std::unique_ptr<pipeplan::server::PlannerServer> own;
  std::string data_dir;
  if (o.planner.empty()) {
    auto s = StartOwnPlanner(&data_dir);
    if (!s.ok()) {
      std::cerr << "pipeplan-loadgen: " << s.status() << "\n";
      return 1;
    }
    own = *std::move(s);
    o.planner = absl::StrFormat("127.0.0.1:%d", own->port());
  }
  Clients clients;
  const Requests req = LoadRequests(o.data);
  if (absl::Status s = ConnectAll(o.planner, req.small, &clients); !s.ok()) {
    std::cerr << "pipeplan-loadgen: " << s << "\n";
    return 1;
  }
  std::vector<Result> results;
  results.push_back(ClosedLoop(absl::StrFormat("Plan cached (chain_small), c=%d", o.concurrency),
                               o.concurrency, o.seconds,
                               [&](int64_t i) { return clients[i].Plan(req.small).status(); }));
  if (o.cold) {
    results.push_back(ClosedLoop(absl::StrFormat("Plan cold (gpt_1k, %d nodes), c=%d",
                                                 req.gpt.graph().nodes_size(), o.cold_concurrency),
                                 o.cold_concurrency, o.seconds, [&](int64_t i) {
                                   v1::PlanRequest r = req.gpt;
                                   r.mutable_options()->set_time_limit_seconds(
                                       30 + 1e-6 * static_cast<double>(i));
                                   return clients[i].Plan(r).status();
                                 }));
  }
  results.push_back(ReportSteps(clients, o, req.small));
  PrintTable(results, o, own != nullptr);
  if (own) {
    own->Shutdown(absl::Seconds(2));
    own.reset();
    std::error_code ec;
    std::filesystem::remove_all(data_dir, ec);
  }
  return 0;
}
