// pipeplan-planner under a hostile client (issue 14), as a process on
// 127.0.0.1: limits answer RESOURCE_EXHAUSTED naming their flag, the RSS
// stays under its bounds while a client loops on large distinct Plan
// requests and rendezvous writes, a deleted job's rendezvous memory leaves
// the RSS, and start-up refuses a zero-byte database.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "pipeplan/v1/planner_service.grpc.pb.h"
#include "planner_process.h"

namespace pipeplan::testing {
namespace {

#define ASSERT_OK_AND_ASSIGN(lhs, expr)            \
  auto lhs##_or = (expr);                          \
  ASSERT_TRUE(lhs##_or.ok()) << lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

constexpr int64_t kMiB = 1 << 20;

// VmRSS of `pid` in bytes (0 when it cannot be read).
int64_t Rss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kb = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb * 1024;
  }
  return 0;
}

// Samples a process's RSS every 20 ms until destroyed; peak() so far.
class PeakRss {
 public:
  explicit PeakRss(pid_t pid) : pid_(pid), thread_([this] { Loop(); }) {}
  ~PeakRss() {
    stop_ = true;
    thread_.join();
  }
  int64_t peak() const { return peak_.load(); }

 private:
  void Loop() {
    while (!stop_) {
      peak_ = std::max(peak_.load(), Rss(pid_));
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  const pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

std::unique_ptr<PlannerProcess> MustStart(std::vector<std::string> args) {
  auto p = PlannerProcess::Start(std::move(args));
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return nullptr;
  }
  return *std::move(p);
}

void ExpectOver(const absl::Status& s, const std::string& limit) {
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "over the limit " + limit)) << s;
}

// A cheap-to-solve request of about `bytes` (long node ids), distinct per `tag`.
v1::PlanRequest BulkyRequest(int tag, int nodes = 20'000) {
  v1::PlanRequest r = ChainRequest(nodes);
  r.mutable_graph()->set_name(absl::StrCat("bulky", tag));
  const std::string pad(200, 'x');
  for (v1::Node& n : *r.mutable_graph()->mutable_nodes()) n.set_id(n.id() + pad);
  for (v1::Edge& e : *r.mutable_graph()->mutable_edges()) {
    e.set_src(e.src() + pad);
    e.set_dst(e.dst() + pad);
  }
  r.mutable_options()->set_num_ranks(4);
  r.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.mutable_options()->set_microbatches(8);
  r.mutable_options()->set_method(v1::METHOD_UNIFORM);
  return r;
}

TEST(PlannerLimits, RendezvousAndReportSizesOverGrpc) {
  auto planner = MustStart({"--rendezvous-max-value-bytes", "1024", "--max-report-bytes", "2048"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("limits", SmallRequest()));
  EXPECT_TRUE(c->RendezvousSet(job.id(), "k", std::string(1024, 'v')).ok());
  ExpectOver(c->RendezvousSet(job.id(), "k", std::string(1025, 'v')),
             "--rendezvous-max-value-bytes=1024");

  v1::WorkerInfo w;
  w.set_worker_id("w0");
  w.set_device_id(job.plan().stages(0).device_id());
  ASSERT_TRUE(c->RegisterWorker(job.id(), w).ok());
  v1::ReportStepRequest r;
  r.set_job_id(job.id());
  r.set_worker_id("w0");
  r.set_plan_version(1);
  r.add_timings()->set_action(std::string(1500, 'F'));
  EXPECT_TRUE(c->ReportStep(r).ok());
  r.mutable_timings(0)->set_action(std::string(2100, 'F'));
  ExpectOver(c->ReportStep(r).status(), "--max-report-bytes=2048");
}

// A client loops on large distinct Plan requests (each would be cached) and
// on rendezvous writes; the planner's RSS stays under the sum of its bounds.
// Without the cache's byte bound the 48 answers alone hold ~290 MiB.
TEST(PlannerLimits, HostileMixStaysUnderTheBounds) {
  auto planner = MustStart({"--solve-memory-bytes", absl::StrCat(192 * kMiB), "--cache-max-bytes",
                            absl::StrCat(24 * kMiB), "--rendezvous-max-bytes",
                            absl::StrCat(32 * kMiB), "--solver-threads", "2"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("rdv", SmallRequest()));
  PeakRss rss(planner->pid());
  std::atomic<int> ok{0}, exhausted{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      auto mine = planner->Client();
      if (!mine.ok()) return void(other++);
      for (int i = t; i < 48; i += 3) {
        absl::Status s = (*mine)->Plan(BulkyRequest(i), absl::Seconds(120)).status();
        (s.ok() ? ok : s.code() == absl::StatusCode::kResourceExhausted ? exhausted : other)++;
      }
    });
  }
  threads.emplace_back([&] {
    const std::string value(256 << 10, 'v');
    for (int k = 0; k < 256; ++k) {
      absl::Status s = c->RendezvousSet(job.id(), absl::StrCat("k", k), value);
      if (!s.ok() && s.code() != absl::StatusCode::kResourceExhausted) other++;
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GE(ok.load(), 16);
  ::testing::Test::RecordProperty("peak_rss_mib", static_cast<int>(rss.peak() / kMiB));
  // 192 MiB of solves + 24 MiB of cache + 32 MiB of rendezvous + messages
  // in flight and the process itself.
  EXPECT_LT(rss.peak(), 400 * kMiB) << "ok " << ok << ", refused " << exhausted;
}

// gRPC's own ResourceQuota (--grpc-memory-bytes) bounds what gRPC holds
// before a request reaches the solve budget. Twelve large Plan requests, each
// on its own connection, need about 40 MiB of read buffers at once against a
// quota of 8 MiB: gRPC cancels streams while they are still being received
// (RESOURCE_EXHAUSTED), and the planner answers a small request afterwards.
TEST(PlannerLimits, GrpcMemoryQuotaCancelsAFloodOfLargeRequests) {
  constexpr int kMessage = 4 * kMiB;
  auto planner = MustStart({"--max-message-bytes", absl::StrCat(kMessage), "--grpc-memory-bytes",
                            absl::StrCat(2 * kMessage)});
  ASSERT_NE(planner, nullptr);
  ASSERT_LT(BulkyRequest(0, 5'000).ByteSizeLong(), kMessage);
  ASSERT_OK_AND_ASSIGN(c, planner->Client({.max_message_bytes = kMessage}));
  // One at a time, a large request fits.
  for (int i = 0; i < 2; ++i) {
    auto alone = c->Plan(BulkyRequest(i, 5'000), absl::Seconds(60));
    ASSERT_TRUE(alone.ok()) << alone.status();
  }
  std::atomic<int> ok{0}, exhausted{0}, goaway{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      // A subchannel pool of its own: one TCP connection per sender, as
      // independent clients would have.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetMaxSendMessageSize(kMessage);
      auto stub = v1::PlannerService::NewStub(
          grpc::CreateCustomChannel(planner->address(), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      v1::Plan response;
      grpc::Status s = stub->Plan(&ctx, BulkyRequest(100 + t, 5'000), &response);
      // RESOURCE_EXHAUSTED: a stream gRPC cancelled (RST_STREAM
      // ENHANCE_YOUR_CALM); UNAVAILABLE: a connection it sent GOAWAY to
      // free memory before the call started on it. Both mean retry later.
      if (s.ok()) {
        ok++;
      } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        exhausted++;
      } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
        goaway++;
      } else {
        ADD_FAILURE() << s.error_code() << " " << s.error_message();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(exhausted.load(), 0) << ok << " answered, " << goaway << " UNAVAILABLE";
  ::testing::Test::RecordProperty("answered", ok.load());
  ::testing::Test::RecordProperty("resource_exhausted", exhausted.load());
  for (int i = 0; i < 3; ++i) {
    auto small = c->Plan(SmallRequest(), absl::Seconds(60));
    EXPECT_TRUE(small.ok()) << small.status();
  }
}

// A quota that could not hold one largest message while it arrives is a
// usage error naming both flags; 0 turns the quota off.
TEST(PlannerLimits, GrpcMemoryQuotaBelowTwoMessagesRefusesToStart) {
  auto p = PlannerProcess::Start({"--max-message-bytes", absl::StrCat(4 * kMiB),
                                  "--grpc-memory-bytes", absl::StrCat(6 * kMiB)});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(),
                                "--grpc-memory-bytes=6291456 must be 0 or at "
                                "least twice --max-message-bytes=4194304"))
      << p.status();
  EXPECT_NE(MustStart({"--max-message-bytes", absl::StrCat(4 * kMiB), "--grpc-memory-bytes", "0"}),
            nullptr);
}

// The pattern: 1 MiB values (malloc keeps such freed chunks in its
// arenas unless asked to give them back).
TEST(PlannerLimits, DeletingAJobGivesItsRendezvousMemoryBack) {
  auto planner = MustStart({"--rendezvous-max-value-bytes", absl::StrCat(kMiB),
                            "--rendezvous-max-bytes-per-job", absl::StrCat(512 * kMiB)});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("rdv", SmallRequest()));
  const int64_t before = Rss(planner->pid());
  const std::string value(kMiB, 'v');
  for (int k = 0; k < 300; ++k) {
    ASSERT_TRUE(c->RendezvousSet(job.id(), absl::StrCat("k", k), value).ok()) << k;
  }
  const int64_t full = Rss(planner->pid());
  EXPECT_GT(full - before, 250 * kMiB);
  ASSERT_TRUE(c->DeleteJob(job.id()).ok());
  const int64_t after = Rss(planner->pid());
  // glibc's defaults keep about two thirds of it.
  EXPECT_LT(after - before, (full - before) / 4)
      << "before " << before / kMiB << " MiB, full " << full / kMiB << " MiB, after "
      << after / kMiB << " MiB";
}

TEST(PlannerLimits, ZeroByteDatabaseRefusesToStart) {
  TempDir dir;
  { std::ofstream(dir.path() + "/pipeplan.db"); }
  auto p = PlannerProcess::Start({"--data-dir", dir.path()});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "(exit 1)")) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), "pipeplan.db is empty (0 bytes)"))
      << p.status();
}

// The printed metrics address is the bound one, not the gRPC host.
TEST(PlannerLimits, PrintedMetricsAddressIsTheBoundOne) {
  auto planner = MustStart({"--metrics-listen", "127.0.0.2:0"});
  ASSERT_NE(planner, nullptr);
  EXPECT_EQ(planner->metrics_address(), absl::StrCat("127.0.0.2:", planner->metrics_port()));
  ASSERT_OK_AND_ASSIGN(m, ScrapeMetrics(planner->metrics_port(), "127.0.0.2"));
  EXPECT_TRUE(absl::StrContains(m, "pipeplan_build_info"));
}

// A job name with a newline and an escape sequence is logged escaped: it
// cannot forge a log line.
TEST(PlannerLimits, ClientStringsCannotForgeLogLines) {
  auto planner = MustStart({});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  const std::string name = "bert\nts=2020-01-01T00:00:00.000Z level=warn event=forged \x1b[2J";
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob(name, SmallRequest()));
  const std::string logs = planner->stderr_text();
  EXPECT_TRUE(absl::StrContains(logs,
                                "\\nts=2020-01-01T00:00:00.000Z level=warn event=forged "
                                "\\x1b[2J"))
      << logs;
  for (absl::string_view line : absl::StrSplit(logs, '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, "ts=2020-01-01")) << line;
    EXPECT_FALSE(absl::StrContains(line, "\x1b")) << line;
  }
}

}  // namespace
}  // namespace pipeplan::testing
