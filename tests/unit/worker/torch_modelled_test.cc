// The torch executor runs what the plan models (issue 24):
//  - recompute: a stage the plan marks "recompute" runs its forward under
//    activation checkpointing, with gradients (and so parameters and Adam
//    state) bit-identical to the run without, and the peak tensor memory
//    each rank measures at the CPU allocator is the planner's predicted peak
//    of its stage within 10%, with and without recompute, the saving shown;
//  - buckets: with 2 replicas x 2 ranks over Gloo, gradients reduced in
//    small buckets started by the backward give the same losses and state as
//    one all-reduce at the step's end, and each step reports its exposed
//    all-reduce seconds.
// A wide residual MLP (d 64, hidden 512, 4 blocks, mse) is exported, planned
// by the core on 2 ranks (Adam, fp32, as the job's spec says), compiled for
// the plan's split and trained by one executor per rank.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/plan_costs.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/worker/runtime/runtime.h"
#include "pipeplan/worker/torch/torch_executor.h"
#include "pipeplan/worker/transport/gloo_transport.h"
#include "pipeplan/worker/transport/group_transport.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

namespace fs = std::filesystem;
using schedule::ScheduleKind;

constexpr int kRanks = 2;
constexpr int kMicrobatches = 4;
constexpr int kMicrobatchSize = 128;
constexpr int kSteps = 3;
constexpr char kPython[] = PIPEPLAN_DEFAULT_PYTHON;

// The model, its package, graph and data (rows for 2 replicas).
constexpr char kModel[] = R"(
import sys, torch, torch.nn as nn
out, src, mb, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, src + "/client/python")
import pipeplan_export
class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc, self.act, self.out = nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)
    def forward(self, x):
        return x + self.out(self.act(self.fc(x)))
class Wide(nn.Module):
    def __init__(self, d=64, h=512, n=4):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, h) for _ in range(n)])
    def forward(self, x):
        return self.blocks(x)
torch.manual_seed(0)
m = Wide()
g = pipeplan_export.export(m, (torch.randn(mb, 64),), name="wide", package=out + "/wide.ptpkg",
                           loss="mse")
pipeplan_export.write_graph(g, out + "/wide.json")
gen = torch.Generator().manual_seed(1)
torch.save({"inputs": torch.randn(rows, 64, generator=gen),
            "targets": torch.randn(rows, 64, generator=gen)}, out + "/wide_data.pt")
)";

struct Fixture {
  std::string skip_reason;
  std::string dir;
  std::vector<int> node_stage;    // the plan's split
  std::vector<int> inflight;      // per stage, 1F1B
  std::vector<double> predicted;  // per stage: peak bytes without recompute
  std::vector<double> predicted_recompute;
  std::string stages_dir;
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

std::optional<std::string> Shell(const std::string& command) {
  const std::string log = F().dir + "/command.log";
  if (std::system(("OMP_NUM_THREADS=1 " + command + " > " + log + " 2>&1").c_str()) == 0) {
    return std::nullopt;
  }
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return "`" + command + "` failed:\n" + text.str();
}

OptimizerOptions Adam() {
  OptimizerOptions o;
  o.kind = "adam";
  o.lr = 1e-3;
  return o;
}

// Plans the graph on 2 ranks as a job with Adam in float32 is planned, and
// predicts each stage's peak with and without recompute by the core's cost
// model (the memory the planner caps and reports).
std::optional<std::string> PlanAndPredict(Fixture& f) {
  v1::PlanRequest req;
  auto text = common::ReadFileToString(f.dir + "/wide.json", "graph");
  if (!text.ok()) return text.status().ToString();
  if (auto s = ParseJson(*text, req.mutable_graph()); !s.ok()) return s.ToString();
  for (int d = 0; d < kRanks; ++d) {
    v1::Device* dev = req.mutable_cluster()->add_devices();
    dev->set_id("cpu" + std::to_string(d));
    dev->set_host("h");
    dev->set_flops(1e11);
    dev->set_memory_bytes(1e10);
  }
  req.mutable_cluster()->set_intra_host_bandwidth(1e10);
  req.mutable_cluster()->set_inter_host_bandwidth(1e10);
  auto in = PlanInputs::FromRequest(req);
  if (!in.ok()) return in.status().ToString();
  const PlanOptions o{.num_ranks = kRanks,
                      .num_replicas = 1,
                      .microbatches = kMicrobatches,
                      .global_batch = kMicrobatches * kMicrobatchSize,
                      .optimizer = Optimizer::kAdam,
                      .precision = Precision::kFp32,
                      .schedule = ScheduleKind::k1F1B,
                      .method = PartitionMethod::kDp};
  auto plan = MakePlan(*in->graph, *in->cluster, o);
  if (!plan.ok()) return plan.status().ToString();
  f.node_stage = plan->partition.stage_of_node;
  f.inflight = plan->stage_inflight;
  const CostModel cost(*in->graph, *in->cluster,
                       CostOptionsFor(*in->graph, o, kMicrobatches, /*replicas=*/1));
  auto stages = cost.Evaluate(f.node_stage, plan->stage_device);
  if (!stages.ok()) return stages.status().ToString();
  for (size_t s = 0; s < stages->size(); ++s) {
    StageCost st = (*stages)[s];
    f.predicted.push_back(st.peak_memory_bytes(f.inflight[s]));
    ApplyRecompute(st);
    f.predicted_recompute.push_back(st.peak_memory_bytes(f.inflight[s]));
  }
  return std::nullopt;
}

void Build() {
  Fixture& f = F();
  std::string tmpl = (fs::temp_directory_path() / "pipeplan_modelled_XXXXXX").string();
  f.dir = ::mkdtemp(tmpl.data());
  if (std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) != 0) {
    f.skip_reason = "needs " PIPEPLAN_DEFAULT_PYTHON " with torch to build the fixtures";
    return;
  }
  std::ofstream(f.dir + "/model.py") << kModel;
  std::optional<std::string> err = Shell(
      std::string(kPython) + " " + f.dir + "/model.py " + f.dir + " " PIPEPLAN_SOURCE_DIR + " " +
      std::to_string(kMicrobatchSize) + " " + std::to_string(2 * kMicrobatches * kMicrobatchSize));
  if (!err) err = PlanAndPredict(f);
  if (!err) {
    std::ostringstream list;
    for (size_t i = 0; i < f.node_stage.size(); ++i) list << (i ? "," : "[") << f.node_stage[i];
    list << "]";
    std::ofstream(f.dir + "/split.json") << list.str();
    f.stages_dir = f.dir + "/stages";
    err = Shell(std::string(kPython) +
                " " PIPEPLAN_SOURCE_DIR "/client/python/pipeplan_stage_compile.py --package " +
                f.dir + "/wide.ptpkg --node-stage " + f.dir + "/split.json --microbatch-size " +
                std::to_string(kMicrobatchSize) + " --out " + f.stages_dir);
  }
  if (err) {
    ADD_FAILURE() << *err;
    f.skip_reason = "fixtures failed";
  }
}

class Environment : public ::testing::Environment {
 public:
  void SetUp() override { Build(); }
  void TearDown() override { fs::remove_all(F().dir); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new Environment);

// One replica-major world of executors and runtimes (replica q's rank r is
// device q * kRanks + r), trained for kSteps on one thread per device.
struct Run {
  // The in-memory transports of a one-replica run (kept for the executors).
  std::unique_ptr<MemoryHub> hub;
  std::vector<std::unique_ptr<Transport>> owned;
  std::vector<std::unique_ptr<TorchExecutor>> executors;
  std::vector<std::unique_ptr<GroupTransport>> groups;
  std::vector<double> losses;                // replica 0's last rank
  std::vector<std::vector<double>> exposed;  // per device, per step
  std::vector<absl::Status> status;
  std::vector<Transport*> pipelines;  // per device
  std::vector<StageRuntime> runtimes;
};

// Device q * kRanks + r's pipeline and (with replicas) replica group.
void Connect(Run& run, const std::vector<Transport*>& world, int replicas, int q, int r,
             TorchExecutorOptions& o) {
  Transport* base = world[q * kRanks + r];
  if (replicas == 1) {
    o.transport = base;
  } else {
    std::vector<int> pipeline, group;
    for (int k = 0; k < kRanks; ++k) pipeline.push_back(q * kRanks + k);
    for (int k = 0; k < replicas; ++k) group.push_back(k * kRanks + r);
    run.groups.push_back(*GroupTransport::Create(base, pipeline));
    o.transport = run.groups.back().get();
    run.groups.push_back(*GroupTransport::Create(base, group));
    o.replica_group = run.groups.back().get();
  }
  run.pipelines.push_back(o.transport);
}

// kSteps on one thread per device.
void Steps(Run& run) {
  const size_t n = run.executors.size();
  run.status.assign(n, absl::OkStatus());
  run.exposed.assign(n, {});
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&run, i] {
      for (int s = 0; s < kSteps && run.status[i].ok(); ++s) {
        auto step = run.runtimes[i].RunStep(s, *run.pipelines[i], *run.executors[i]);
        if (!step.ok()) {
          run.status[i] = step.status();
          return;
        }
        if (auto x = run.executors[i]->LastExposedAllReduceSeconds()) {
          run.exposed[i].push_back(*x);
        }
        if (i == kRanks - 1) run.losses.push_back(*run.executors[i]->LastLoss());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(run.status[i].ok()) << i << ": " << run.status[i];
}

std::unique_ptr<Run> Train(const std::vector<Transport*>& world, int replicas,
                           std::vector<bool> recompute, double bucket_bytes) {
  auto run = std::make_unique<Run>();
  auto lowered = schedule::InsertSendRecv(
      *schedule::BuildSchedule(ScheduleKind::k1F1B, kRanks, kMicrobatches, 1));
  auto package = ReadModelPackage(F().dir + "/wide.ptpkg");
  auto stages = ReadCompiledStages(F().stages_dir);
  EXPECT_TRUE(lowered.ok() && package.ok() && stages.ok());
  if (!lowered.ok() || !package.ok() || !stages.ok()) return nullptr;
  for (int q = 0; q < replicas; ++q) {
    for (int r = 0; r < kRanks; ++r) {
      TorchExecutorOptions o{.package = *package, .stages = *stages};
      o.stage_to_rank = lowered->stage_to_rank;
      o.rank = r;
      o.replica = q;
      o.num_replicas = replicas;
      o.num_microbatches = kMicrobatches;
      o.data = "tensors:" + F().dir + "/wide_data.pt";
      o.optimizer = Adam();
      o.recompute = recompute;
      o.allreduce_bucket_bytes = bucket_bytes;
      o.comm_timeout = absl::Seconds(30);
      Connect(*run, world, replicas, q, r, o);
      auto ex = TorchExecutor::Create(std::move(o));
      EXPECT_TRUE(ex.ok()) << ex.status();
      if (!ex.ok()) return nullptr;
      run->executors.push_back(std::move(*ex));
      run->runtimes.push_back(*StageRuntime::ForRank(*lowered, r, absl::Seconds(30)));
    }
  }
  Steps(*run);
  return run;
}

class TorchModelledTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!F().skip_reason.empty()) GTEST_SKIP() << F().skip_reason;
  }
};

std::unique_ptr<Run> TrainOneReplica(bool recompute) {
  auto hub = std::make_unique<MemoryHub>(kRanks);
  std::vector<std::unique_ptr<Transport>> owned;
  std::vector<Transport*> world;
  for (int r = 0; r < kRanks; ++r) {
    owned.push_back(hub->Connect(r));
    world.push_back(owned.back().get());
  }
  auto run = Train(world, 1, std::vector<bool>(kRanks, recompute), 0);
  if (run) {
    run->hub = std::move(hub);
    run->owned = std::move(owned);
  }
  return run;
}

TEST_F(TorchModelledTest, RecomputeGivesTheSameGradientsAndThePredictedMemory) {
  auto plain = TrainOneReplica(false);
  auto checkpointed = TrainOneReplica(true);
  ASSERT_TRUE(plain && checkpointed);
  EXPECT_EQ(plain->losses, checkpointed->losses);
  for (int r = 0; r < kRanks; ++r) {
    auto a = plain->executors[r]->ExportState();
    auto b = checkpointed->executors[r]->ExportState();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b) << "rank " << r << ": parameters or Adam state differ with recompute";
  }
  for (int s = 0; s < kRanks; ++s) {
    const double without = plain->executors[s]->PeakMemoryBytes();
    const double with = checkpointed->executors[s]->PeakMemoryBytes();
    EXPECT_EQ(plain->executors[s]->PeakMemorySource(), "cpu_allocator");
    std::printf(
        "stage %d (%d in flight): measured %.0f predicted %.0f (%+.1f%%); recompute: "
        "measured %.0f predicted %.0f (%+.1f%%)\n",
        s, F().inflight[s], without, F().predicted[s], 100 * (F().predicted[s] - without) / without,
        with, F().predicted_recompute[s], 100 * (F().predicted_recompute[s] - with) / with);
    EXPECT_NEAR(F().predicted[s], without, 0.10 * without) << "stage " << s;
    EXPECT_NEAR(F().predicted_recompute[s], with, 0.10 * with) << "stage " << s << " recompute";
    if (F().inflight[s] > 1) {
      EXPECT_LT(with, 0.9 * without) << "stage " << s << ": recompute saves too little";
    } else {  // one microbatch in flight: recomputing it holds as much
      EXPECT_LE(with, 1.02 * without) << "stage " << s;
    }
  }
}

std::vector<std::unique_ptr<Transport>> GlooWorld(int n) {
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<Transport>> owned(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = ConnectGloo(
          {.rank = r, .size = n, .host = "127.0.0.1", .timeout = absl::Seconds(20)}, store);
      if (t.ok()) owned[r] = std::move(*t);
    });
  }
  for (auto& t : threads) t.join();
  return owned;
}

TEST_F(TorchModelledTest, BucketedAllReduceMatchesOneAllReduce) {
  auto world = GlooWorld(2 * kRanks);
  std::vector<Transport*> raw;
  for (const auto& t : world) {
    ASSERT_NE(t, nullptr);
    raw.push_back(t.get());
  }
  const std::vector<bool> none(kRanks, false);
  // About one block's weight matrix per bucket: 4+ buckets per rank.
  auto bucketed = Train(raw, 2, none, 64 * 1024);
  auto whole = Train(raw, 2, none, 0);
  ASSERT_TRUE(bucketed && whole);
  ASSERT_EQ(bucketed->losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(bucketed->losses, whole->losses);
  for (size_t i = 0; i < bucketed->executors.size(); ++i) {
    auto a = bucketed->executors[i]->ExportState();
    auto b = whole->executors[i]->ExportState();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b) << "device " << i;
    EXPECT_EQ(bucketed->exposed[i].size(), static_cast<size_t>(kSteps)) << "device " << i;
    for (double x : bucketed->exposed[i]) EXPECT_GE(x, 0);
  }
  for (size_t i = 0; i < bucketed->exposed.size(); ++i) {
    std::printf("device %zu exposed all-reduce (s): bucketed %.6f, one at the end %.6f\n", i,
                bucketed->exposed[i].back(), whole->exposed[i].back());
  }
}

}  // namespace
}  // namespace pipeplan::worker
