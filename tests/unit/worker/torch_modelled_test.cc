// The torch executor runs what the plan models (issue 24):
//  - recompute: a stage the plan marks "recompute" runs its forward under
//    activation checkpointing, with the same losses (and, without
//    BatchNorm, bit-identical parameters and Adam state), and the peak
//    tensor memory each rank measures at the CPU allocator is the planner's
//    predicted peak of its stage within 10%, with and without recompute, the
//    saving shown — for a residual MLP, a GPT and torchvision's ResNet-18
//    (tests/models/modelled_models.py), each exported, planned by the core
//    (Adam, fp32, as the job's spec says; 1F1B, 4 microbatches, 2-3 ranks),
//    compiled for the plan's split and trained by one executor per rank;
//  - buckets: with 2 replicas x 2 ranks of the MLP over Gloo, gradients
//    reduced in small buckets started by the backward give the same losses
//    and state as one all-reduce at the step's end, and each step reports
//    its exposed all-reduce seconds.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

constexpr int kMicrobatches = 4;
constexpr char kPython[] = PIPEPLAN_DEFAULT_PYTHON;

// A model of tests/models/modelled_models.py, planned on `ranks` ranks with
// 1F1B over kMicrobatches microbatches of `microbatch` rows, trained
// `steps` steps (the peak comes from the second: Adam's state exists from
// the first update on).
struct ModelSpec {
  const char* name;
  int ranks;
  int microbatch;
  int steps;
};

constexpr ModelSpec kWide{"wide", 2, 128, 3};
constexpr ModelSpec kModels[] = {kWide, {"gpt", 3, 8, 2}, {"resnet18", 2, 8, 2}};

struct Fixture {
  ModelSpec spec;
  std::string skip_reason;
  std::string dir;
  std::vector<int> node_stage;    // the plan's split
  std::vector<int> inflight;      // per stage, 1F1B
  std::vector<StageCost> stages;  // the core's cost of each stage, without recompute
  std::string stages_dir;
};

std::string& WorkDir() {
  static std::string* dir = new std::string();
  return *dir;
}

std::optional<std::string> Shell(const std::string& command) {
  const std::string log = WorkDir() + "/command.log";
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

// Plans the graph as a job with Adam in float32 is planned, and keeps each
// stage's cost by the core's cost model (the memory the planner caps and
// reports).
std::optional<std::string> PlanAndPredict(Fixture& f) {
  v1::PlanRequest req;
  auto text = common::ReadFileToString(f.dir + "/" + f.spec.name + ".json", "graph");
  if (!text.ok()) return text.status().ToString();
  if (auto s = ParseJson(*text, req.mutable_graph()); !s.ok()) return s.ToString();
  for (int d = 0; d < f.spec.ranks; ++d) {
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
  const PlanOptions o{.num_ranks = f.spec.ranks,
                      .num_replicas = 1,
                      .microbatches = kMicrobatches,
                      .global_batch = kMicrobatches * f.spec.microbatch,
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
  f.stages = *stages;
  return std::nullopt;
}

// Exports the model, plans it and compiles its stages in f.dir.
std::optional<std::string> Export(Fixture& f) {
  const int rows = 2 * kMicrobatches * f.spec.microbatch;  // 2 replicas' worth
  std::optional<std::string> err =
      Shell(std::string(kPython) + " " PIPEPLAN_SOURCE_DIR "/tests/models/modelled_models.py " +
            f.spec.name + " " + f.dir + " " + std::to_string(f.spec.microbatch) + " " +
            std::to_string(rows));
  if (!err) err = PlanAndPredict(f);
  if (err) return err;
  std::ostringstream list;
  for (size_t i = 0; i < f.node_stage.size(); ++i) list << (i ? "," : "[") << f.node_stage[i];
  list << "]";
  std::ofstream(f.dir + "/split.json") << list.str();
  f.stages_dir = f.dir + "/stages";
  return Shell(std::string(kPython) +
               " " PIPEPLAN_SOURCE_DIR "/client/python/pipeplan_stage_compile.py --package " +
               f.dir + "/" + f.spec.name + ".ptpkg --node-stage " + f.dir +
               "/split.json --microbatch-size " + std::to_string(f.spec.microbatch) + " --out " +
               f.stages_dir);
}

// The model's fixture, built on first use (each model's export and stage
// compile take seconds; a filter that runs one model builds one).
Fixture& F(const ModelSpec& spec) {
  static auto* fixtures = new std::map<std::string, Fixture>();
  auto [it, added] = fixtures->try_emplace(spec.name);
  Fixture& f = it->second;
  if (!added) return f;
  f.spec = spec;
  // ResNet-18 is torchvision's (Debian's python3-torchvision, which
  // scripts/setup.sh installs); the other models need torch alone.
  const std::string modules = std::string(spec.name) == "resnet18" ? "torch, torchvision" : "torch";
  if (std::system(
          (std::string(kPython) + " -c 'import " + modules + "' > /dev/null 2>&1").c_str()) != 0) {
    f.skip_reason = "needs " PIPEPLAN_DEFAULT_PYTHON " with " + modules + " to build the fixtures";
    return f;
  }
  f.dir = WorkDir() + "/" + spec.name;
  fs::create_directories(f.dir);
  if (std::optional<std::string> err = Export(f)) {
    ADD_FAILURE() << *err;
    f.skip_reason = "fixtures failed";
  }
  return f;
}

class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pipeplan_modelled_XXXXXX").string();
    WorkDir() = ::mkdtemp(tmpl.data());
  }
  void TearDown() override { fs::remove_all(WorkDir()); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new Environment);

// One replica-major world of executors and runtimes (replica q's rank r is
// device q * ranks + r), trained for the model's steps on one thread per
// device.
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

// Device q * ranks + r's pipeline and (with replicas) replica group.
void Connect(Run& run, const std::vector<Transport*>& world, int ranks, int replicas, int q, int r,
             TorchExecutorOptions& o) {
  Transport* base = world[q * ranks + r];
  if (replicas == 1) {
    o.transport = base;
  } else {
    std::vector<int> pipeline, group;
    for (int k = 0; k < ranks; ++k) pipeline.push_back(q * ranks + k);
    for (int k = 0; k < replicas; ++k) group.push_back(k * ranks + r);
    run.groups.push_back(*GroupTransport::Create(base, pipeline));
    o.transport = run.groups.back().get();
    run.groups.push_back(*GroupTransport::Create(base, group));
    o.replica_group = run.groups.back().get();
  }
  run.pipelines.push_back(o.transport);
}

// `steps` steps on one thread per device.
void Steps(Run& run, int ranks, int steps) {
  const size_t n = run.executors.size();
  run.status.assign(n, absl::OkStatus());
  run.exposed.assign(n, {});
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&run, i, ranks, steps] {
      for (int s = 0; s < steps && run.status[i].ok(); ++s) {
        auto step = run.runtimes[i].RunStep(s, *run.pipelines[i], *run.executors[i]);
        if (!step.ok()) {
          run.status[i] = step.status();
          return;
        }
        if (auto x = run.executors[i]->LastExposedAllReduceSeconds()) {
          run.exposed[i].push_back(*x);
        }
        if (static_cast<int>(i) == ranks - 1) run.losses.push_back(*run.executors[i]->LastLoss());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(run.status[i].ok()) << i << ": " << run.status[i];
}

std::unique_ptr<Run> Train(const Fixture& f, const std::vector<Transport*>& world, int replicas,
                           bool recompute, double bucket_bytes) {
  const int ranks = f.spec.ranks;
  auto run = std::make_unique<Run>();
  auto lowered = schedule::InsertSendRecv(
      *schedule::BuildSchedule(ScheduleKind::k1F1B, ranks, kMicrobatches, 1));
  auto package = ReadModelPackage(f.dir + "/" + f.spec.name + ".ptpkg");
  auto stages = ReadCompiledStages(f.stages_dir);
  EXPECT_TRUE(lowered.ok() && package.ok() && stages.ok());
  if (!lowered.ok() || !package.ok() || !stages.ok()) return nullptr;
  for (int q = 0; q < replicas; ++q) {
    for (int r = 0; r < ranks; ++r) {
      TorchExecutorOptions o{.package = *package, .stages = *stages};
      o.stage_to_rank = lowered->stage_to_rank;
      o.rank = r;
      o.replica = q;
      o.num_replicas = replicas;
      o.num_microbatches = kMicrobatches;
      o.data = "tensors:" + f.dir + "/" + f.spec.name + "_data.pt";
      o.optimizer = Adam();
      o.recompute = std::vector<bool>(ranks, recompute);
      o.allreduce_bucket_bytes = bucket_bytes;
      o.comm_timeout = absl::Seconds(60);
      Connect(*run, world, ranks, replicas, q, r, o);
      auto ex = TorchExecutor::Create(std::move(o));
      EXPECT_TRUE(ex.ok()) << ex.status();
      if (!ex.ok()) return nullptr;
      run->executors.push_back(std::move(*ex));
      run->runtimes.push_back(*StageRuntime::ForRank(*lowered, r, absl::Seconds(60)));
    }
  }
  Steps(*run, ranks, f.spec.steps);
  return run;
}

std::unique_ptr<Run> TrainOneReplica(const Fixture& f, bool recompute) {
  auto hub = std::make_unique<MemoryHub>(f.spec.ranks);
  std::vector<std::unique_ptr<Transport>> owned;
  std::vector<Transport*> world;
  for (int r = 0; r < f.spec.ranks; ++r) {
    owned.push_back(hub->Connect(r));
    world.push_back(owned.back().get());
  }
  auto run = Train(f, world, 1, recompute, 0);
  if (run) {
    run->hub = std::move(hub);
    run->owned = std::move(owned);
  }
  return run;
}

// Whether the model's state is bit-identical with recompute: BatchNorm
// updates its running statistics in each forward, so a recomputed stage
// updates them twice (as torch.utils.checkpoint does); its gradients and
// losses still match.
bool StateMatchesWithRecompute(const ModelSpec& spec) {
  return std::string(spec.name) != "resnet18";
}

class TorchModelledTest : public ::testing::TestWithParam<ModelSpec> {
 protected:
  void SetUp() override {
    if (!F(GetParam()).skip_reason.empty()) GTEST_SKIP() << F(GetParam()).skip_reason;
  }
};

// Each stage's measured peak against the plan's, both ways.
void ExpectPredictedPeaks(const Fixture& f, const Run& plain, const Run& checkpointed) {
  for (int s = 0; s < f.spec.ranks; ++s) {
    const double without = plain.executors[s]->PeakMemoryBytes();
    const double with = checkpointed.executors[s]->PeakMemoryBytes();
    EXPECT_EQ(plain.executors[s]->PeakMemorySource(), "cpu_allocator");
    StageCost st = f.stages[s];
    const double predicted = st.peak_memory_bytes(f.inflight[s]);
    ApplyRecompute(st);
    const double predicted_recompute = st.peak_memory_bytes(f.inflight[s]);
    std::printf(
        "%s stage %d (%d in flight; params+state %.0f, activations %.0f, inputs %.0f, "
        "workspace %.0f, loss %.0f): measured %.0f predicted %.0f (%+.1f%%); recompute: "
        "measured %.0f predicted %.0f (%+.1f%%)\n",
        f.spec.name, s, f.inflight[s], f.stages[s].param_state_bytes, f.stages[s].activation_bytes,
        f.stages[s].input_bytes, f.stages[s].workspace_bytes, f.stages[s].transient_bytes, without,
        predicted, 100 * (predicted - without) / without, with, predicted_recompute,
        100 * (predicted_recompute - with) / with);
    EXPECT_NEAR(predicted, without, 0.10 * without) << f.spec.name << " stage " << s;
    EXPECT_NEAR(predicted_recompute, with, 0.10 * with) << f.spec.name << " stage " << s << " rc";
    if (f.inflight[s] > 1) {
      EXPECT_LT(with, 0.95 * without) << f.spec.name << " stage " << s << ": saves too little";
    } else {  // one microbatch in flight: recomputing it holds as much
      EXPECT_LE(with, 1.02 * without) << f.spec.name << " stage " << s;
    }
  }
}

TEST_P(TorchModelledTest, RecomputeGivesTheSameGradientsAndThePredictedMemory) {
  const Fixture& f = F(GetParam());
  auto plain = TrainOneReplica(f, false);
  auto checkpointed = TrainOneReplica(f, true);
  ASSERT_TRUE(plain && checkpointed);
  EXPECT_EQ(plain->losses, checkpointed->losses);
  for (int r = 0; r < f.spec.ranks && StateMatchesWithRecompute(f.spec); ++r) {
    auto a = plain->executors[r]->ExportState();
    auto b = checkpointed->executors[r]->ExportState();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b) << "rank " << r << ": parameters or Adam state differ with recompute";
  }
  ExpectPredictedPeaks(f, *plain, *checkpointed);
}

INSTANTIATE_TEST_SUITE_P(Models, TorchModelledTest, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param.name); });

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

TEST(TorchModelledBuckets, BucketedAllReduceMatchesOneAllReduce) {
  const Fixture& f = F(kWide);
  if (!f.skip_reason.empty()) GTEST_SKIP() << f.skip_reason;
  auto world = GlooWorld(2 * f.spec.ranks);
  std::vector<Transport*> raw;
  for (const auto& t : world) {
    ASSERT_NE(t, nullptr);
    raw.push_back(t.get());
  }
  // About one block's weight matrix per bucket: 4+ buckets per rank.
  auto bucketed = Train(f, raw, 2, false, 64 * 1024);
  auto whole = Train(f, raw, 2, false, 0);
  ASSERT_TRUE(bucketed && whole);
  ASSERT_EQ(bucketed->losses.size(), static_cast<size_t>(f.spec.steps));
  EXPECT_EQ(bucketed->losses, whole->losses);
  for (size_t i = 0; i < bucketed->executors.size(); ++i) {
    auto a = bucketed->executors[i]->ExportState();
    auto b = whole->executors[i]->ExportState();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(*a == *b) << "device " << i;
    EXPECT_EQ(bucketed->exposed[i].size(), static_cast<size_t>(f.spec.steps)) << "device " << i;
    for (double x : bucketed->exposed[i]) EXPECT_GE(x, 0);
  }
  for (size_t i = 0; i < bucketed->exposed.size(); ++i) {
    std::printf("device %zu exposed all-reduce (s): bucketed %.6f, one at the end %.6f\n", i,
                bucketed->exposed[i].back(), whole->exposed[i].back());
  }
}

}  // namespace
}  // namespace pipeplan::worker
