// pipeplan-hostile: plays the hostile client of issue 14 against a planner it
// starts itself, and prints the planner's resident memory (VmRSS, sampled
// every 20 ms from /proc) for each attack:
//
//   rendezvous  one job, KEYS values of VALUE bytes each, then DeleteJob
//   reports     one worker sends REPORTS step reports of REPORT bytes each
//   cache       DISTINCT Plan requests of about REQUEST bytes (cheap to
//               solve, expensive to cache)
//   large       CONCURRENT Plan requests of NODES nodes at once
//
//   pipeplan-hostile --planner-binary build/planner_service/server/pipeplan-planner
//                    [--phases rendezvous,reports,cache,large] [--keys 1024]
//                    [--value-bytes 1048576] [--reports 100] [--report-bytes 4000000]
//                    [--distinct 100] [--request-bytes 15000000] [--concurrent 6]
//                    [--nodes 1000000] [-- planner flags...]
//
// Every loop is bounded; it talks to 127.0.0.1 only, and kills (SIGKILL) only
// the planner it started.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/flag_set.h"

namespace {

namespace v1 = pipeplan::v1;
using pipeplan::client::PlannerClient;

struct Options {
  std::string planner_binary;
  std::vector<std::string> planner_args;
  std::vector<std::string> phases = {"rendezvous", "reports", "cache", "large"};
  int64_t keys = 1024;
  int64_t value_bytes = 1 << 20;
  int64_t reports = 100;
  int64_t report_bytes = 4'000'000;
  int64_t distinct = 100;
  int64_t request_bytes = 15'000'000;
  int64_t concurrent = 6;
  int64_t nodes = 1'000'000;
  int64_t auto_options = 0;  // 1: `large` leaves ranks, schedule, method to the planner
  int64_t hold_seconds = 0;  // keep the planner alive this long at the end (to inspect it)
};

// The planner child process; SIGKILLed and reaped on destruction.
class Planner {
 public:
  ~Planner() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  bool Start(const Options& o) {
    char tmpl[] = "/tmp/pipeplan-hostile-XXXXXX";
    if (!mkdtemp(tmpl)) return false;
    dir_ = tmpl;
    std::vector<std::string> args = {
        o.planner_binary,   "--listen", "127.0.0.1:0", "--data-dir", dir_ + "/data",
        "--metrics-listen", "off",      "--replan",    "off"};
    args.insert(args.end(), o.planner_args.begin(), o.planner_args.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      const int err = open((dir_ + "/stderr.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (err >= 0) dup2(err, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    std::string line;
    char c;
    pollfd p{out[0], POLLIN, 0};
    while (poll(&p, 1, 30'000) > 0 && read(out[0], &c, 1) == 1) {
      if (c != '\n') {
        line.push_back(c);
        continue;
      }
      if (line.rfind("listening on ", 0) == 0) {
        address_ = line.substr(13);
        close(out[0]);
        return true;
      }
      line.clear();
    }
    close(out[0]);
    return false;
  }

  // VmRSS in bytes, 0 once the process is gone.
  int64_t Rss() const {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
    std::string line;
    while (std::getline(in, line)) {
      int64_t kb = 0;
      if (line.rfind("VmRSS:", 0) == 0 &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kb)) {
        return kb * 1024;
      }
    }
    return 0;
  }
  int64_t DataBytes() const {
    int64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/data")) {
      if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
    }
    return total;
  }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string address_;
};

// Samples the planner's RSS in the background; Peak() since the last Reset().
class RssSampler {
 public:
  explicit RssSampler(const Planner* p) : p_(p), thread_([this] { Loop(); }) {}
  ~RssSampler() {
    stop_ = true;
    thread_.join();
  }
  void Reset() { peak_ = p_->Rss(); }
  int64_t Peak() const { return peak_; }

 private:
  void Loop() {
    while (!stop_) {
      const int64_t r = p_->Rss();
      int64_t seen = peak_.load();
      while (r > seen && !peak_.compare_exchange_weak(seen, r)) {
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  const Planner* p_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

double MiB(int64_t b) { return static_cast<double>(b) / (1 << 20); }

// A chain of `nodes` nodes whose ids are padded to `id_bytes`, on 8 devices;
// fixed options so the solve is cheap (uniform split, 1F1B, 8 microbatches).
v1::PlanRequest ChainRequest(const std::string& name, int64_t nodes, size_t id_bytes) {
  v1::PlanRequest r;
  r.mutable_graph()->set_name(name);
  const std::string pad(id_bytes > 12 ? id_bytes - 12 : 0, 'x');
  auto id = [&](int64_t i) { return absl::StrCat("n", i, pad); };
  for (int64_t i = 0; i < nodes; ++i) {
    v1::Node* n = r.mutable_graph()->add_nodes();
    n->set_id(id(i));
    n->set_forward_flops(1e9 + static_cast<double>(i % 1000) * 1e6);
    n->set_param_bytes(1e3);
    n->set_output_bytes(1e3);
    if (i > 0) {
      v1::Edge* e = r.mutable_graph()->add_edges();
      e->set_src(id(i - 1));
      e->set_dst(id(i));
    }
  }
  for (int d = 0; d < 8; ++d) {
    v1::Device* dev = r.mutable_cluster()->add_devices();
    dev->set_id(absl::StrCat("gpu", d));
    dev->set_host("h0");
    dev->set_flops(150e12);
    dev->set_memory_bytes(80e9);
  }
  r.mutable_cluster()->set_intra_host_bandwidth(150e9);
  r.mutable_options()->set_num_ranks(8);
  r.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.mutable_options()->set_microbatches(8);
  r.mutable_options()->set_method(v1::METHOD_UNIFORM);
  return r;
}

// Tally of answers by status code, with the first message of each.
struct Answers {
  std::map<std::string, std::pair<int64_t, std::string>> by_code;
  void Add(const absl::Status& s) {
    auto& [n, first] = by_code[std::string(absl::StatusCodeToString(s.code()))];
    if (n++ == 0) first = std::string(s.message()).substr(0, 160);
  }
  void Print() const {
    for (const auto& [code, v] : by_code) {
      std::printf("    %-20s %6lld  %s\n", code.c_str(), static_cast<long long>(v.first),
                  v.second.c_str());
    }
  }
};

absl::StatusOr<v1::Job> SmallJob(PlannerClient& c, const std::string& name) {
  return c.CreateJob(name, ChainRequest(name, 16, 8));
}

void Rendezvous(const Options& o, PlannerClient& c, Planner& p, RssSampler& rss) {
  absl::StatusOr<v1::Job> job = SmallJob(c, "rendezvous");
  if (!job.ok()) return void(std::printf("  create job: %s\n", job.status().ToString().c_str()));
  const int64_t before = p.Rss();
  rss.Reset();
  Answers answers;
  const std::string value(static_cast<size_t>(o.value_bytes), 'v');
  for (int64_t k = 0; k < o.keys; ++k) {
    answers.Add(c.RendezvousSet(job->id(), absl::StrCat("key", k), value));
  }
  const int64_t peak = rss.Peak();
  if (absl::Status s = c.DeleteJob(job->id()); !s.ok()) {
    std::printf("  DeleteJob: %s\n", s.ToString().c_str());
  }
  absl::SleepFor(absl::Seconds(1));
  std::printf(
      "  %lld keys x %lld bytes: RSS before %.0f MiB, peak %.0f MiB, after DeleteJob "
      "%.0f MiB\n",
      static_cast<long long>(o.keys), static_cast<long long>(o.value_bytes), MiB(before), MiB(peak),
      MiB(p.Rss()));
  answers.Print();
}

void Reports(const Options& o, PlannerClient& c, Planner& p, RssSampler& rss) {
  absl::StatusOr<v1::Job> job = SmallJob(c, "reports");
  if (!job.ok()) return void(std::printf("  create job: %s\n", job.status().ToString().c_str()));
  v1::WorkerInfo w;
  w.set_worker_id("w0");
  w.set_device_id("gpu0");
  if (absl::StatusOr<v1::Assignment> a = c.RegisterWorker(job->id(), w); !a.ok()) {
    return void(std::printf("  register: %s\n", a.status().ToString().c_str()));
  }
  const int64_t data_before = p.DataBytes();
  rss.Reset();
  Answers answers;
  v1::ReportStepRequest r;
  r.set_job_id(job->id());
  r.set_worker_id("w0");
  r.set_plan_version(1);
  const int64_t timings = std::max<int64_t>(1, o.report_bytes / 24);
  for (int64_t i = 0; i < timings; ++i) {
    v1::ActionTiming* t = r.add_timings();
    t->set_action(absl::StrCat(i % 8, "F", i));
    t->set_seconds(1e-3);
  }
  for (int64_t i = 0; i < o.reports; ++i) {
    r.set_step(i);
    answers.Add(c.ReportStep(r).status());
  }
  std::printf(
      "  %lld reports of %.1f MiB (%lld timings): RSS peak %.0f MiB, data dir %.0f -> "
      "%.0f MiB\n",
      static_cast<long long>(o.reports), MiB(static_cast<int64_t>(r.ByteSizeLong())),
      static_cast<long long>(timings), MiB(rss.Peak()), MiB(data_before), MiB(p.DataBytes()));
  answers.Print();
}

void Cache(const Options& o, PlannerClient& c, Planner& p, RssSampler& rss) {
  const int64_t nodes = std::max<int64_t>(16, o.request_bytes / 300);
  v1::PlanRequest base = ChainRequest("cache", nodes, 120);
  rss.Reset();
  Answers answers;
  for (int64_t i = 0; i < o.distinct; ++i) {
    base.mutable_graph()->set_name(absl::StrCat("cache", i));
    answers.Add(c.Plan(base, absl::Seconds(120)).status());
  }
  absl::SleepFor(absl::Seconds(1));
  std::printf(
      "  %lld distinct requests of %.1f MiB (%lld nodes): RSS peak %.0f MiB, end %.0f "
      "MiB\n",
      static_cast<long long>(o.distinct), MiB(static_cast<int64_t>(base.ByteSizeLong())),
      static_cast<long long>(nodes), MiB(rss.Peak()), MiB(p.Rss()));
  answers.Print();
}

void Large(const Options& o, Planner& p, RssSampler& rss) {
  v1::PlanRequest req = ChainRequest("large", o.nodes, 8);
  if (o.auto_options) req.clear_options();
  std::printf("  request: %lld nodes, %.1f MiB\n", static_cast<long long>(o.nodes),
              MiB(static_cast<int64_t>(req.ByteSizeLong())));
  rss.Reset();
  std::vector<absl::Status> results(static_cast<size_t>(o.concurrent));
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int64_t i = 0; i < o.concurrent; ++i) {
    threads.emplace_back([&, i] {
      auto c = PlannerClient::Connect({.address = p.address(), .max_message_bytes = 256 << 20});
      if (!c.ok()) return void(results[static_cast<size_t>(i)] = c.status());
      v1::PlanRequest mine = req;
      mine.mutable_graph()->set_name(absl::StrCat("large", i));  // no cache hits
      results[static_cast<size_t>(i)] = (*c)->Plan(mine, absl::Seconds(600)).status();
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::SleepFor(absl::Seconds(1));  // the answer goes out before the solve's memory is freed
  Answers answers;
  for (const absl::Status& s : results) answers.Add(s);
  std::printf("  %lld concurrent: RSS peak %.0f MiB, 1 s after the last answer %.0f MiB, %.1f s\n",
              static_cast<long long>(o.concurrent), MiB(rss.Peak()), MiB(p.Rss()), seconds);
  answers.Print();
}

const pipeplan::common::FlagSet& HostileFlags() {
  static const pipeplan::common::FlagSet* flags = [] {
    auto* f = new pipeplan::common::FlagSet("pipeplan-hostile");
    f->Value("planner-binary", "PATH", "the pipeplan-planner to start (required)")
        .Value("phases", "A,B", "rendezvous,reports,cache,large (all)")
        .Value("keys", "N", "rendezvous: values written (1024)")
        .Value("value-bytes", "N", "rendezvous: bytes per value (1048576)")
        .Value("reports", "N", "reports: step reports sent (100)")
        .Value("report-bytes", "N", "reports: bytes per report (4000000)")
        .Value("distinct", "N", "cache: distinct Plan requests (100)")
        .Value("request-bytes", "N", "cache: bytes per request (15000000)")
        .Value("concurrent", "N", "large: Plan requests at once (6)")
        .Value("nodes", "N", "large: nodes per request (1000000)")
        .Value("auto-options", "0|1",
               "large: 1 leaves ranks, schedule and method to the planner (0)")
        .Value("hold-seconds", "S", "keep the planner alive this long at the end (0)");
    return f;
  }();
  return *flags;
}

// Arguments after `--` go to the planner.
absl::Status ReadArgs(const pipeplan::common::ParsedFlags& f, Options* o) {
  absl::StatusOr<std::string> binary = f.Require("planner-binary");
  if (!binary.ok()) return binary.status();
  o->planner_binary = *binary;
  if (auto phases = f.Get("phases")) o->phases = absl::StrSplit(*phases, ',');
  const std::pair<const char*, int64_t*> counts[] = {{"keys", &o->keys},
                                                     {"value-bytes", &o->value_bytes},
                                                     {"reports", &o->reports},
                                                     {"report-bytes", &o->report_bytes},
                                                     {"distinct", &o->distinct},
                                                     {"request-bytes", &o->request_bytes},
                                                     {"nodes", &o->nodes},
                                                     {"concurrent", &o->concurrent},
                                                     {"auto-options", &o->auto_options},
                                                     {"hold-seconds", &o->hold_seconds}};
  for (const auto& [name, out] : counts) {
    if (absl::Status s = f.ReadInteger(name, 0, out); !s.ok()) return s;
  }
  o->planner_args = f.positionals();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<pipeplan::common::ParsedFlags> parsed = pipeplan::common::ParseMainFlags(
      HostileFlags(), "--planner-binary PATH [flags] [-- planner flags]", {argv + 1, argv + argc},
      &exit_code);
  if (!parsed) return exit_code;
  Options o;
  if (absl::Status s = ReadArgs(*parsed, &o); !s.ok()) {
    return pipeplan::common::UsageFailure(HostileFlags().program(), s.message());
  }
  Planner planner;
  if (!planner.Start(o)) {
    std::cerr << "pipeplan-hostile: the planner did not start\n";
    return pipeplan::common::kExitError;
  }
  auto client =
      PlannerClient::Connect({.address = planner.address(), .max_message_bytes = 256 << 20});
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return pipeplan::common::kExitError;
  }
  RssSampler rss(&planner);
  std::printf("planner %s, RSS at start %.0f MiB\n", planner.address().c_str(), MiB(planner.Rss()));
  for (const std::string& phase : o.phases) {
    std::printf("%s\n", phase.c_str());
    std::fflush(stdout);
    if (phase == "rendezvous") Rendezvous(o, **client, planner, rss);
    if (phase == "reports") Reports(o, **client, planner, rss);
    if (phase == "cache") Cache(o, **client, planner, rss);
    if (phase == "large") Large(o, planner, rss);
    std::fflush(stdout);
  }
  if (o.hold_seconds > 0) {
    std::printf("holding planner pid %d for %lld s\n", static_cast<int>(planner.pid()),
                static_cast<long long>(o.hold_seconds));
    std::fflush(stdout);
    absl::SleepFor(absl::Seconds(static_cast<double>(o.hold_seconds)));
  }
  return 0;
}
