// The torch executor trains real models (tests/models/tiny_models.py: a small
// GPT with tied embeddings, a small CNN, an MLP whose skips cross stages, with
// the mse loss) pipelined by the stage runtime, and its per-step losses equal
// pipeplan_reference_train.py's single-process training within 1e-4
// relative: one rank and two (threads over the in-memory transport, one run
// over Gloo on 127.0.0.1), GPipe, 1F1B, Interleaved1F1B, ZB-H1 and ZBV (two
// stages per rank, local hops). State moves to a different split, and
// checkpoints load under another split, without changing the losses. Data
// parallel x pipeline (2 replicas x 2 ranks and x 1 rank, over Gloo on
// 127.0.0.1) trains as one process on the replicas' whole batch, its
// replicas stay bit-identical, and state moves between one replica and two.
// Bad data files and non-finite losses get their errors.
//
// Fixtures (packages, compiled stages, reference losses) are built at test
// time by PIPEPLAN_DEFAULT_PYTHON (the configured Python with torch) with the
// repository's Python tools.
#include "pipeplan/worker/torch/torch_executor.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/worker/runtime/runtime.h"
#include "pipeplan/worker/torch/torch_devices.h"
#include "pipeplan/worker/transport/device_sharing.h"
#include "pipeplan/worker/transport/gloo_transport.h"
#include "pipeplan/worker/transport/group_transport.h"
#include "pipeplan/worker/transport/in_memory_transport.h"
#include "pipeplan/worker/transport/nccl_transport.h"

namespace pipeplan::worker {
namespace {

namespace fs = std::filesystem;
using schedule::ScheduleKind;
using ::testing::HasSubstr;

constexpr int kMicrobatches = 4;
constexpr int kMicrobatchSize = 2;
constexpr int kBatch = kMicrobatches * kMicrobatchSize;
constexpr int kSteps = 10;
constexpr char kPython[] = PIPEPLAN_DEFAULT_PYTHON;

// ---------------------------------------------------------------------------
// Fixtures built by the Python tools

struct Fixtures {
  std::string skip_reason;  // non-empty: tests skip
  std::string dir;
  std::map<std::string, std::string> stage_dirs;          // by model + node_stage
  std::map<std::string, std::vector<double>> references;  // by command line
};

Fixtures& F() {
  static Fixtures* f = new Fixtures();
  return *f;
}

// The Python tools of this checkout (PIPEPLAN_SOURCE_DIR in the environment
// overrides it, e.g. to try another checkout's tools).
std::string Source(const std::string& rel) {
  const char* env = std::getenv("PIPEPLAN_SOURCE_DIR");
  return std::string(env != nullptr ? env : PIPEPLAN_SOURCE_DIR) + "/" + rel;
}

// Runs a shell command with its output in a log; returns the log on failure.
std::optional<std::string> Shell(const std::string& command) {
  const std::string log = F().dir + "/command.log";
  const int rc = std::system(("OMP_NUM_THREADS=1 " + command + " > " + log + " 2>&1").c_str());
  if (rc == 0) return std::nullopt;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return "`" + command + "` failed:\n" + text.str();
}

std::string Package(const std::string& model) { return F().dir + "/" + model + ".ptpkg"; }
std::string DataFile(const std::string& name) { return F().dir + "/" + name + "_data.pt"; }

// Bad data files for the error tests.
constexpr char kBadData[] = R"(
import sys, torch
d = sys.argv[1]
g = torch.Generator().manual_seed(2)
tok = torch.randint(0, 64, (16, 16), generator=g)
torch.save({"inputs": tok.float(), "targets": tok}, d + "/bad_dtype_data.pt")
torch.save({"inputs": tok[:, :8], "targets": tok[:, :8]}, d + "/bad_shape_data.pt")
torch.save({"inputs": tok, "labels": tok}, d + "/no_targets_data.pt")
torch.save([tok], d + "/list_data.pt")
torch.save({"inputs": tok}, d + "/one_entry_data.pt")
torch.save({"inputs": tok, "targets": tok[:8]}, d + "/bad_rows_data.pt")
torch.save({"inputs": tok, "targets": tok.float()}, d + "/float_targets_data.pt")
open(d + "/garbage_data.pt", "w").write("not a torch file")
)";

void BuildFixtures() {
  Fixtures& f = F();
  std::string tmpl = (fs::temp_directory_path() / "pipeplan_torch_XXXXXX").string();
  f.dir = ::mkdtemp(tmpl.data());
  if (std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) != 0) {
    f.skip_reason =
        "needs " PIPEPLAN_DEFAULT_PYTHON " with torch (python3-torch) to build the fixtures";
    return;
  }
  if (auto err = Shell(std::string(kPython) + " " + Source("tests/models/make_fixtures.py") +
                       " --out-dir " + f.dir + " --model gpt --model cnn --model skip --rows 48")) {
    ADD_FAILURE() << *err;
    f.skip_reason = "fixtures failed";
    return;
  }
  std::ofstream(f.dir + "/bad_data.py") << kBadData;
  if (auto err = Shell(std::string(kPython) + " " + f.dir + "/bad_data.py " + f.dir)) {
    ADD_FAILURE() << *err;
    f.skip_reason = "fixtures failed";
  }
}

// node_stage of `n` nodes cut before the given node indices.
std::vector<int> CutAt(int n, std::vector<int> cuts) {
  std::vector<int> stage(n);
  for (int i = 0; i < n; ++i) {
    for (int c : cuts) stage[i] += i >= c ? 1 : 0;
  }
  return stage;
}

std::vector<int> EvenSplit(int n, int k) {
  std::vector<int> cuts;
  for (int s = 1; s < k; ++s) cuts.push_back(s * n / k);
  return CutAt(n, cuts);
}

int NumNodes(const std::string& model) {
  auto p = ReadModelPackage(Package(model));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? static_cast<int>(p->nodes.size()) : 0;
}

// Compiles `model` for `node_stage` (once per assignment).
std::string Stages(const std::string& model, const std::vector<int>& node_stage) {
  std::string list = "[";
  for (size_t i = 0; i < node_stage.size(); ++i) {
    list += (i ? "," : "") + std::to_string(node_stage[i]);
  }
  list += "]";
  const std::string key = model + list;
  auto it = F().stage_dirs.find(key);
  if (it != F().stage_dirs.end()) return it->second;
  const std::string out = F().dir + "/stages_" + std::to_string(F().stage_dirs.size());
  std::ofstream(out + ".json") << list;
  if (auto err =
          Shell(std::string(kPython) + " " + Source("client/python/pipeplan_stage_compile.py") +
                " --package " + Package(model) + " --node-stage " + out +
                ".json --microbatch-size " + std::to_string(kMicrobatchSize) + " --out " + out)) {
    ADD_FAILURE() << *err;
  }
  return F().stage_dirs[key] = out;
}

std::string OptimizerFlags(const OptimizerOptions& o) {
  std::ostringstream s;
  s.precision(17);
  s << "--optimizer " << o.kind << " --lr " << o.lr;
  if (o.momentum != 0) s << " --momentum " << o.momentum;
  if (o.weight_decay) s << " --weight-decay " << *o.weight_decay;
  if (o.clip_grad_norm > 0) s << " --clip-grad-norm " << o.clip_grad_norm;
  return s.str();
}

// pipeplan_reference_train.py's per-step losses (one process, batches of
// `batch` rows cut into `microbatches`).
std::vector<double> Reference(const std::string& model, const std::string& data,
                              const OptimizerOptions& o, int steps, int batch = kBatch,
                              int microbatches = kMicrobatches) {
  const std::string args = " --package " + Package(model) + " --data " + data + " " +
                           OptimizerFlags(o) + " --batch-size " + std::to_string(batch) +
                           " --microbatches " + std::to_string(microbatches) + " --steps " +
                           std::to_string(steps);
  auto it = F().references.find(args);
  if (it != F().references.end()) return it->second;
  const std::string out = F().dir + "/losses_" + std::to_string(F().references.size()) + ".json";
  if (auto err =
          Shell(std::string(kPython) + " " + Source("client/python/pipeplan_reference_train.py") +
                args + " --out " + out)) {
    ADD_FAILURE() << *err;
    return {};
  }
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<double> losses;
  const std::regex number("\"loss\": ([-+0-9.eE]+)");
  for (auto m = std::sregex_iterator(text.begin(), text.end(), number); m != std::sregex_iterator();
       ++m) {
    losses.push_back(std::stod((*m)[1]));
  }
  EXPECT_EQ(static_cast<int>(losses.size()), steps) << text;
  return F().references[args] = losses;
}

// ---------------------------------------------------------------------------
// A pipelined job: one executor and one runtime per rank

struct JobSpec {
  std::string model;
  std::string stages_dir;
  ScheduleKind kind = ScheduleKind::k1F1B;
  int ranks = 1;
  std::string data;
  OptimizerOptions optimizer;
  bool skip_nonfinite = false;
  int chunks = 1;                    // stages per rank of the interleaved schedules
  int replicas = 1;                  // data-parallel copies of the pipeline
  int microbatches = kMicrobatches;  // per replica
  std::string device = "cpu";        // every executor's torch device
};

class Job {
 public:
  // `transports[i]` is device i's: rank i of one transport over every
  // device, replica-major (replica q's rank r is device q * ranks + r). They
  // must outlive the job. With one replica on a transport of its own size
  // they serve as they are; else the job carves each replica's pipeline and
  // each rank's replica group out of them, as the worker does.
  static std::unique_ptr<Job> Create(const JobSpec& spec, std::vector<Transport*> transports) {
    auto job = std::unique_ptr<Job>(new Job());
    const int m = spec.microbatches;
    auto lowered =
        schedule::InsertSendRecv(*schedule::BuildSchedule(spec.kind, spec.ranks, m, spec.chunks));
    EXPECT_TRUE(lowered.ok()) << lowered.status();
    auto package = ReadModelPackage(Package(spec.model));
    auto stages = ReadCompiledStages(spec.stages_dir);
    EXPECT_TRUE(package.ok() && stages.ok()) << package.status() << stages.status();
    if (!lowered.ok() || !package.ok() || !stages.ok()) return nullptr;
    if (!job->MakeGroups(spec, transports)) return nullptr;
    for (int q = 0; q < spec.replicas; ++q) {
      for (int r = 0; r < spec.ranks; ++r) {
        const int i = q * spec.ranks + r;
        TorchExecutorOptions o;
        o.package = *package;
        o.stages = *stages;
        o.stage_to_rank = lowered->stage_to_rank;
        o.rank = r;
        o.replica = q;
        o.num_replicas = spec.replicas;
        o.num_microbatches = m;
        o.data = spec.data;
        o.optimizer = spec.optimizer;
        o.skip_nonfinite_steps = spec.skip_nonfinite;
        o.transport = job->pipelines[i];
        o.replica_group = job->replica_groups[i];
        o.comm_timeout = absl::Seconds(30);
        o.device = spec.device;
        auto ex = TorchExecutor::Create(std::move(o));
        EXPECT_TRUE(ex.ok()) << "replica " << q << " rank " << r << ": " << ex.status();
        if (!ex.ok()) return nullptr;
        job->executors.push_back(std::move(*ex));
        auto rt = StageRuntime::ForRank(*lowered, r, absl::Seconds(30));
        EXPECT_TRUE(rt.ok()) << rt.status();
        if (!rt.ok()) return nullptr;
        job->runtimes.push_back(std::move(*rt));
      }
    }
    for (const auto& program : lowered->programs) {
      for (const auto& a : program) {
        job->split_backwards += a && a->type == schedule::ActionType::kBackwardInput ? 1 : 0;
      }
    }
    job->transports = std::move(transports);
    job->last_rank = lowered->stage_to_rank.back();
    job->ranks = spec.ranks;
    return job;
  }

  // Runs steps [first, first + steps) on one thread per device; the losses
  // of replica 0's last stage rank (every replica's must be the same: the
  // mean over replicas), and each device's status.
  std::vector<double> Run(int64_t first, int steps) {
    status.assign(executors.size(), absl::OkStatus());
    std::vector<std::vector<double>> losses(executors.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < executors.size(); ++i) {
      threads.emplace_back([&, i] {
        for (int64_t s = first; s < first + steps; ++s) {
          auto result = runtimes[i].RunStep(s, *pipelines[i], *executors[i]);
          if (!result.ok()) {
            status[i] = result.status();
            return;
          }
          if (static_cast<int>(i) % ranks == last_rank) {
            losses[i].push_back(*executors[i]->LastLoss());
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = last_rank + ranks; i < executors.size(); i += ranks) {
      EXPECT_EQ(losses[i], losses[last_rank]) << "device " << i << " reports another loss";
    }
    return losses[last_rank];
  }

  bool AllOk() const {
    for (const absl::Status& s : status) {
      if (!s.ok()) return false;
    }
    return true;
  }

  std::vector<std::unique_ptr<TorchExecutor>> executors;  // by device
  std::vector<StageRuntime> runtimes;
  std::vector<Transport*> transports;
  // Per device, its replica's pipeline and its rank's replica group.
  std::vector<Transport*> pipelines;
  std::vector<Transport*> replica_groups;
  std::vector<absl::Status> status;
  int last_rank = 0;
  int ranks = 1;
  int split_backwards = 0;  // I actions: the backward runs split into I and W

 private:
  bool MakeGroups(const JobSpec& spec, const std::vector<Transport*>& world) {
    if (spec.replicas == 1 && world[0]->size() == spec.ranks) {
      pipelines = world;
      replica_groups.assign(world.size(), nullptr);
      return true;
    }
    for (int q = 0; q < spec.replicas; ++q) {
      for (int r = 0; r < spec.ranks; ++r) {
        std::vector<int> pipeline, group;
        for (int k = 0; k < spec.ranks; ++k) pipeline.push_back(q * spec.ranks + k);
        for (int k = 0; k < spec.replicas; ++k) group.push_back(k * spec.ranks + r);
        Transport* base = world[q * spec.ranks + r];
        auto p = GroupTransport::Create(base, pipeline);
        auto g = GroupTransport::Create(base, group);
        EXPECT_TRUE(p.ok() && g.ok()) << p.status() << g.status();
        if (!p.ok() || !g.ok()) return false;
        pipelines.push_back(p->get());
        replica_groups.push_back(g->get());
        owned_groups_.push_back(std::move(*p));
        owned_groups_.push_back(std::move(*g));
      }
    }
    return true;
  }
  std::vector<std::unique_ptr<GroupTransport>> owned_groups_;
};

struct Hub {
  explicit Hub(int n) : hub(n) {
    for (int r = 0; r < n; ++r) owned.push_back(hub.Connect(r));
  }
  std::vector<Transport*> transports() const {
    std::vector<Transport*> out;
    for (const auto& t : owned) out.push_back(t.get());
    return out;
  }
  MemoryHub hub;
  std::vector<std::unique_ptr<Transport>> owned;
};

void ExpectLossesMatch(const std::vector<double>& got, const std::vector<double>& want,
                       size_t offset = 0) {
  ASSERT_LE(got.size() + offset, want.size());
  ASSERT_FALSE(got.empty());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i + offset], 1e-4 * std::abs(want[i + offset]))
        << "step " << i + offset;
  }
}

OptimizerOptions GptOptimizer() {
  OptimizerOptions o;
  o.kind = "adamw";
  o.lr = 1e-2;
  o.clip_grad_norm = 1.0;
  return o;
}

OptimizerOptions CnnOptimizer() {
  OptimizerOptions o;
  o.kind = "sgd";
  o.lr = 0.05;
  o.momentum = 0.9;
  return o;
}

// Builds the fixtures once for every suite of the binary.
class FixtureEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { BuildFixtures(); }
  void TearDown() override { fs::remove_all(F().dir); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new FixtureEnvironment);

// skip: an MLP whose input and first activation cross several stages
// (relayed), with the mse loss.
OptimizerOptions OptimizerFor(const std::string& model) {
  if (model == "gpt") return GptOptimizer();
  if (model == "cnn") return CnnOptimizer();
  OptimizerOptions o;
  o.kind = "adam";
  o.lr = 1e-2;
  return o;
}

class TorchExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!F().skip_reason.empty()) GTEST_SKIP() << F().skip_reason;
  }

  // Trains `spec` for kSteps over the in-memory transport.
  std::vector<double> Train(const JobSpec& spec) {
    Hub hub(spec.ranks);
    auto job = Job::Create(spec, hub.transports());
    if (job == nullptr) return {};
    const bool zero_bubble = spec.kind == ScheduleKind::kInterleavedZeroBubble ||
                             spec.kind == ScheduleKind::kZBVZeroBubble;
    EXPECT_EQ(job->split_backwards > 0, zero_bubble);
    std::vector<double> losses = job->Run(0, kSteps);
    for (size_t r = 0; r < job->status.size(); ++r) {
      EXPECT_TRUE(job->status[r].ok()) << "rank " << r << ": " << job->status[r];
    }
    return losses;
  }
};

TEST_F(TorchExecutorTest, WholeGptOnOneRankMatchesReference) {
  const std::vector<double> want =
      Reference("gpt", "tensors:" + DataFile("gpt"), GptOptimizer(), kSteps);
  JobSpec spec{"gpt",
               Stages("gpt", EvenSplit(NumNodes("gpt"), 1)),
               ScheduleKind::kGPipe,
               1,
               "tensors:" + DataFile("gpt"),
               GptOptimizer()};
  const std::vector<double> got = Train(spec);
  ExpectLossesMatch(got, want);
  EXPECT_LT(got.back(), got.front());  // it learns
}

struct Case {
  std::string model;
  ScheduleKind kind;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << schedule::ScheduleKindName(c.kind);
}

class TwoRanks : public TorchExecutorTest, public ::testing::WithParamInterface<Case> {};

TEST_P(TwoRanks, MatchesReference) {
  const Case& c = GetParam();
  const OptimizerOptions opt = OptimizerFor(c.model);
  const std::string data = "tensors:" + DataFile(c.model);
  const bool four =
      c.kind == ScheduleKind::kZBVZeroBubble || c.kind == ScheduleKind::kInterleaved1F1B;
  JobSpec spec{
      c.model, Stages(c.model, EvenSplit(NumNodes(c.model), four ? 4 : 2)), c.kind, 2, data, opt};
  spec.chunks = c.kind == ScheduleKind::kInterleaved1F1B ? 2 : 1;
  ExpectLossesMatch(Train(spec), Reference(c.model, data, opt, kSteps));
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, TwoRanks,
    ::testing::Values(Case{"gpt", ScheduleKind::kGPipe}, Case{"gpt", ScheduleKind::k1F1B},
                      Case{"gpt", ScheduleKind::kInterleaved1F1B},
                      Case{"gpt", ScheduleKind::kInterleavedZeroBubble},
                      Case{"gpt", ScheduleKind::kZBVZeroBubble}, Case{"cnn", ScheduleKind::kGPipe},
                      Case{"cnn", ScheduleKind::k1F1B},
                      Case{"cnn", ScheduleKind::kInterleavedZeroBubble},
                      Case{"skip", ScheduleKind::k1F1B},
                      Case{"skip", ScheduleKind::kZBVZeroBubble}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.model + "_" + std::string(schedule::ScheduleKindName(info.param.kind));
    });

TEST_F(TorchExecutorTest, GptOverGlooMatchesReference) {
  const std::string data = "tensors:" + DataFile("gpt");
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<Transport>> owned(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto t = ConnectGloo(
          {.rank = r, .size = 2, .host = "127.0.0.1", .timeout = absl::Seconds(20)}, store);
      if (t.ok()) owned[r] = std::move(*t);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(owned[0] && owned[1]);
  JobSpec spec{
      "gpt",         Stages("gpt", EvenSplit(NumNodes("gpt"), 2)), ScheduleKind::k1F1B, 2, data,
      GptOptimizer()};
  auto job = Job::Create(spec, {owned[0].get(), owned[1].get()});
  ASSERT_NE(job, nullptr);
  const std::vector<double> got = job->Run(0, kSteps);
  ASSERT_TRUE(job->AllOk()) << job->status[0] << job->status[1];
  ExpectLossesMatch(got, Reference("gpt", data, GptOptimizer(), kSteps));
  EXPECT_FALSE(job->executors[0]->LastLoss().has_value());  // only the last stage has a loss
  EXPECT_GT(job->executors[1]->PeakMemoryBytes(), 0);
}

// Moves state between two jobs over the same transports, one thread per rank.
void MoveAll(Job& from, Job& to, const std::vector<Transport*>& transports) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < transports.size(); ++r) {
    threads.emplace_back([&, r] {
      auto mine = from.executors[r]->ExportState();
      ASSERT_TRUE(mine.ok()) << mine.status();
      auto moved = MoveState(*transports[r], *mine, from.executors[r]->owners(),
                             to.executors[r]->owners(), 1, absl::Seconds(20));
      ASSERT_TRUE(moved.ok()) << moved.status();
      absl::Status s = to.executors[r]->ImportState(*moved);
      ASSERT_TRUE(s.ok()) << s;
    });
  }
  for (auto& t : threads) t.join();
}

TEST_F(TorchExecutorTest, StateMovesToADifferentSplit) {
  // Adam, so that losses after the switch depend on the moved moments too.
  OptimizerOptions opt;
  opt.kind = "adam";
  opt.lr = 1e-2;
  const std::string data = "tensors:" + DataFile("gpt");
  const std::vector<double> want = Reference("gpt", data, opt, kSteps);
  const int n = NumNodes("gpt");
  Hub hub(2);
  // Before: 1F1B, the tied embedding on both ranks. After: ZBV, a different
  // cut into four stages; stages 0 and 3 (both ends of the tie) on rank 0.
  auto before =
      Job::Create({"gpt", Stages("gpt", CutAt(n, {n / 3})), ScheduleKind::k1F1B, 2, data, opt},
                  hub.transports());
  auto after = Job::Create({"gpt", Stages("gpt", CutAt(n, {n / 5, n / 2, 4 * n / 5})),
                            ScheduleKind::kZBVZeroBubble, 2, data, opt},
                           hub.transports());
  ASSERT_TRUE(before && after);
  std::vector<double> got = before->Run(0, kSteps / 2);
  ASSERT_TRUE(before->AllOk()) << before->status[0] << before->status[1];
  MoveAll(*before, *after, hub.transports());
  const std::vector<double> rest = after->Run(kSteps / 2, kSteps / 2);
  ASSERT_TRUE(after->AllOk()) << after->status[0] << after->status[1];
  got.insert(got.end(), rest.begin(), rest.end());
  ExpectLossesMatch(got, want);
}

// ---------------------------------------------------------------------------
// Data parallel x pipeline: replicas over Gloo on 127.0.0.1

constexpr int kDpSteps = 30;

// `n` connected Gloo transports on 127.0.0.1, one per device.
std::vector<std::unique_ptr<Transport>> GlooWorld(int n) {
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<Transport>> owned(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = ConnectGloo(
          {.rank = r, .size = n, .host = "127.0.0.1", .timeout = absl::Seconds(30)}, store);
      EXPECT_TRUE(t.ok()) << t.status();
      if (t.ok()) owned[r] = std::move(*t);
    });
  }
  for (auto& t : threads) t.join();
  return owned;
}

std::vector<Transport*> Raw(const std::vector<std::unique_ptr<Transport>>& owned) {
  std::vector<Transport*> out;
  for (const auto& t : owned) out.push_back(t.get());
  return out;
}

struct DpCase {
  std::string model;
  ScheduleKind kind;
  int replicas;
  int ranks;
};

void PrintTo(const DpCase& c, std::ostream* os) {
  *os << c.model << " " << schedule::ScheduleKindName(c.kind) << " " << c.replicas << "x"
      << c.ranks;
}

class DataParallel : public TorchExecutorTest, public ::testing::WithParamInterface<DpCase> {};

// d replicas of m microbatches each train what one process trains on a
// batch d times as large (d * m microbatches): the same losses, step after
// step, and replicas that stay bit-identical.
TEST_P(DataParallel, MatchesSingleProcess) {
  const DpCase& c = GetParam();
  const OptimizerOptions opt = OptimizerFor(c.model);
  const std::string data = "tensors:" + DataFile(c.model);
  JobSpec spec{
      c.model, Stages(c.model, EvenSplit(NumNodes(c.model), c.ranks)), c.kind, c.ranks, data, opt};
  spec.replicas = c.replicas;
  const auto world = GlooWorld(c.replicas * c.ranks);
  for (const auto& t : world) ASSERT_NE(t, nullptr);
  auto job = Job::Create(spec, Raw(world));
  ASSERT_NE(job, nullptr);
  const std::vector<double> got = job->Run(0, kDpSteps);
  for (size_t i = 0; i < job->status.size(); ++i) {
    ASSERT_TRUE(job->status[i].ok()) << "device " << i << ": " << job->status[i];
  }
  ExpectLossesMatch(got, Reference(c.model, data, opt, kDpSteps, kBatch * c.replicas,
                                   kMicrobatches * c.replicas));
  EXPECT_LT(got.back(), got.front());  // it learns
  for (int r = 0; r < c.ranks; ++r) {
    auto first = job->executors[r]->ExportState();
    ASSERT_TRUE(first.ok()) << first.status();
    for (int q = 1; q < c.replicas; ++q) {
      auto other = job->executors[q * c.ranks + r]->ExportState();
      ASSERT_TRUE(other.ok()) << other.status();
      EXPECT_TRUE(*other == *first) << "replica " << q << " rank " << r << " drifted";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Replicas, DataParallel,
    ::testing::Values(DpCase{"gpt", ScheduleKind::k1F1B, 2, 2},
                      DpCase{"gpt", ScheduleKind::kInterleavedZeroBubble, 2, 2},
                      DpCase{"cnn", ScheduleKind::k1F1B, 2, 2},
                      DpCase{"cnn", ScheduleKind::kInterleavedZeroBubble, 2, 2},
                      DpCase{"gpt", ScheduleKind::k1F1B, 2, 1},
                      DpCase{"cnn", ScheduleKind::kGPipe, 2, 1}),
    [](const ::testing::TestParamInfo<DpCase>& info) {
      return info.param.model + "_" + std::string(schedule::ScheduleKindName(info.param.kind)) +
             "_" + std::to_string(info.param.replicas) + "x" + std::to_string(info.param.ranks);
    });

// `owners` (ranks of one replica) as devices of every one of `replicas`.
ParameterOwners InReplicas(const ParameterOwners& owners, int replicas, int ranks) {
  ParameterOwners out;
  for (const auto& [name, held] : owners) {
    for (int q = 0; q < replicas; ++q) {
      for (int r : held) out[name].push_back(q * ranks + r);
    }
  }
  return out;
}

// Moves state from `from` to `to` over `world` (one transport per device of
// the larger job), as the worker does at a plan switch.
void MoveAcross(Job& from, Job& to, const JobSpec& a, const JobSpec& b,
                const std::vector<Transport*>& world) {
  const ParameterOwners sources = InReplicas(from.executors[0]->owners(), a.replicas, a.ranks);
  const ParameterOwners dests = InReplicas(to.executors[0]->owners(), b.replicas, b.ranks);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < world.size(); ++i) {
    threads.emplace_back([&, i] {
      NamedState mine;
      if (i < from.executors.size()) {
        auto exported = from.executors[i]->ExportState();
        ASSERT_TRUE(exported.ok()) << exported.status();
        mine = *exported;
      }
      auto moved = MoveState(*world[i], mine, sources, dests, 1, absl::Seconds(20));
      ASSERT_TRUE(moved.ok()) << moved.status();
      if (i < to.executors.size()) {
        absl::Status s = to.executors[i]->ImportState(*moved);
        ASSERT_TRUE(s.ok()) << s;
      }
    });
  }
  for (auto& t : threads) t.join();
}

// A switch between one replica and two (both ways, the global batch kept):
// every new holder of a stage, in every replica, gets its parameters and
// Adam moments, and the losses go on as one process's.
TEST_F(TorchExecutorTest, StateMovesBetweenOneReplicaAndTwo) {
  OptimizerOptions opt;
  opt.kind = "adam";
  opt.lr = 1e-2;
  const std::string data = "tensors:" + DataFile("gpt");
  const int n = NumNodes("gpt");
  const std::vector<double> want =
      Reference("gpt", data, opt, kSteps, 2 * kBatch, 2 * kMicrobatches);
  JobSpec one{"gpt", Stages("gpt", CutAt(n, {n / 3})), ScheduleKind::k1F1B, 2, data, opt};
  one.microbatches = 2 * kMicrobatches;
  JobSpec two{"gpt", Stages("gpt", EvenSplit(n, 2)), ScheduleKind::kInterleavedZeroBubble, 2, data,
              opt};
  two.replicas = 2;
  for (bool grow : {true, false}) {
    SCOPED_TRACE(grow ? "1 -> 2 replicas" : "2 -> 1 replica");
    const JobSpec& a = grow ? one : two;
    const JobSpec& b = grow ? two : one;
    const auto world = GlooWorld(4);
    for (const auto& t : world) ASSERT_NE(t, nullptr);
    const std::vector<Transport*> all = Raw(world);
    auto before = Job::Create(a, {all.begin(), all.begin() + a.replicas * a.ranks});
    auto after = Job::Create(b, {all.begin(), all.begin() + b.replicas * b.ranks});
    ASSERT_TRUE(before && after);
    std::vector<double> got = before->Run(0, kSteps / 2);
    ASSERT_TRUE(before->AllOk()) << before->status[0] << " " << before->status[1];
    MoveAcross(*before, *after, a, b, all);
    const std::vector<double> rest = after->Run(kSteps / 2, kSteps / 2);
    ASSERT_TRUE(after->AllOk()) << after->status[0] << " " << after->status[1];
    got.insert(got.end(), rest.begin(), rest.end());
    ExpectLossesMatch(got, want);
  }
}

// `checkpoint` rewritten in format 1 (torch.save'd shards, before issue 26)
// still loads, to the same numbers, on one rank.
void ExpectFormat1Resumes(const std::string& checkpoint, const std::string& v1,
                          const std::string& data, const std::vector<double>& want, int steps) {
  ASSERT_EQ(
      Shell(std::string(kPython) + " " + Source("tests/unit/worker/checkpoint_to_format1.py") +
            " " + checkpoint + " " + v1),
      std::nullopt);
  Hub hub(1);
  auto job = Job::Create({"cnn", Stages("cnn", EvenSplit(NumNodes("cnn"), 1)), ScheduleKind::kGPipe,
                          1, data, CnnOptimizer()},
                         hub.transports());
  ASSERT_NE(job, nullptr);
  auto meta = job->executors[0]->LoadCheckpoint(v1);
  ASSERT_TRUE(meta.ok()) << meta.status();
  ExpectLossesMatch(job->Run(meta->step, steps - meta->step), want, steps / 2);
}

TEST_F(TorchExecutorTest, CheckpointLoadsUnderAnotherSplit) {
  const std::string data = "tensors:" + DataFile("cnn");
  const std::vector<double> want = Reference("cnn", data, CnnOptimizer(), kSteps);
  const std::string root = F().dir + "/ckpt";
  {
    Hub hub(2);
    auto job = Job::Create({"cnn", Stages("cnn", EvenSplit(NumNodes("cnn"), 2)),
                            ScheduleKind::k1F1B, 2, data, CnnOptimizer()},
                           hub.transports());
    ASSERT_NE(job, nullptr);
    ExpectLossesMatch(job->Run(0, kSteps / 2), want);
    std::vector<absl::Status> status(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        status[r] = job->executors[r]->WriteCheckpoint(CheckpointDir(root, kSteps / 2),
                                                       {kSteps / 2, 1, kSteps / 2 * kBatch});
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(status[0].ok()) << status[0];
    ASSERT_TRUE(status[1].ok()) << status[1];
  }
  auto latest = LatestCheckpoint(root);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_TRUE(fs::exists(**latest + "/shard_1.bin"));
  // Resume on one rank holding the whole model.
  Hub hub(1);
  auto job = Job::Create({"cnn", Stages("cnn", EvenSplit(NumNodes("cnn"), 1)), ScheduleKind::kGPipe,
                          1, data, CnnOptimizer()},
                         hub.transports());
  ASSERT_NE(job, nullptr);
  auto meta = job->executors[0]->LoadCheckpoint(**latest);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->step, kSteps / 2);
  EXPECT_EQ(meta->plan_version, 1);
  EXPECT_EQ(meta->data_position, kSteps / 2 * kBatch);
  ExpectLossesMatch(job->Run(meta->step, kSteps - meta->step), want, kSteps / 2);

  ExpectFormat1Resumes(**latest, root + "/format1", data, want, kSteps);

  // A checkpoint without its MANIFEST is never loaded.
  fs::copy(**latest, root + "/partial");
  fs::remove(root + "/partial/MANIFEST.json");
  EXPECT_EQ(job->executors[0]->LoadCheckpoint(root + "/partial").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TorchExecutorTest, SyntheticDataMatchesReference) {
  for (const std::string model : {"gpt", "cnn"}) {
    const OptimizerOptions opt = OptimizerFor(model);
    JobSpec spec{model,
                 Stages(model, EvenSplit(NumNodes(model), 2)),
                 ScheduleKind::k1F1B,
                 2,
                 "synthetic:seed=3",
                 opt};
    Hub hub(2);
    auto job = Job::Create(spec, hub.transports());
    ASSERT_NE(job, nullptr);
    const std::vector<double> got = job->Run(0, 3);
    ASSERT_TRUE(job->AllOk()) << job->status[0] << job->status[1];
    ExpectLossesMatch(got, Reference(model, "synthetic:seed=3", opt, 3));
  }
}

TEST_F(TorchExecutorTest, BadDataIsRejectedWithTheReason) {
  auto package = ReadModelPackage(Package("gpt"));
  auto stages = ReadCompiledStages(Stages("gpt", EvenSplit(NumNodes("gpt"), 1)));
  ASSERT_TRUE(package.ok() && stages.ok());
  auto create = [&](const std::string& data) {
    TorchExecutorOptions o;
    o.package = *package;
    o.stages = *stages;
    o.stage_to_rank = {0};
    o.num_microbatches = kMicrobatches;
    o.data = data;
    return TorchExecutor::Create(std::move(o)).status();
  };
  const std::map<std::string, std::string> cases = {
      {"tensors:" + DataFile("bad_dtype"),
       "input \"idx\" is float32 [16, 16]; the model takes int64"},
      {"tensors:" + DataFile("bad_shape"), "the model takes int64 rows of shape [16]"},
      {"tensors:" + DataFile("no_targets"), "has no \"targets\" tensor; loss cross_entropy"},
      // Without targets; LibTorch 1.13 cannot even read these (pickle's
      // SETITEM and APPEND), later versions can: either way an error.
      {"tensors:" + DataFile("list"), "list_data.pt: "},
      {"tensors:" + DataFile("one_entry"), "one_entry_data.pt: "},
      {"tensors:" + DataFile("bad_rows"), "same number (>0) of rows, got 16, 8"},
      {"tensors:" + DataFile("float_targets"), "cross_entropy needs integer class targets"},
      {"tensors:" + DataFile("garbage"), "garbage_data.pt: not a torch.save'd file"},
      {"synthetic:seed=-1", "the seed must be in [0, 2^31)"},
      {"csv:x", "want tensors:FILE or synthetic:seed=N"},
  };
  for (const auto& [data, message] : cases) {
    const absl::Status s = create(data);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << data << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message)) << data;
  }
  EXPECT_EQ(create("tensors:" + F().dir + "/missing.pt").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(create("tensors:" + DataFile("gpt")).ok());
}

TEST_F(TorchExecutorTest, NonFiniteLossStopsEveryRankOrIsSkipped) {
  OptimizerOptions blowup;
  blowup.kind = "sgd";
  blowup.lr = 1e30;  // step 0's update leaves the weights huge
  for (const bool skip : {false, true}) {
    Hub hub(2);
    auto job = Job::Create({"cnn", Stages("cnn", EvenSplit(NumNodes("cnn"), 2)),
                            ScheduleKind::k1F1B, 2, "tensors:" + DataFile("cnn"), blowup, skip},
                           hub.transports());
    ASSERT_NE(job, nullptr);
    const std::vector<double> losses = job->Run(0, 3);
    if (!skip) {
      for (const absl::Status& s : job->status) {
        EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
        EXPECT_THAT(std::string(s.message()), HasSubstr("step 1: "));
      }
      EXPECT_EQ(losses.size(), 1u);
    } else {
      ASSERT_TRUE(job->AllOk()) << job->status[0] << job->status[1];
      ASSERT_EQ(losses.size(), 3u);
      EXPECT_FALSE(std::isfinite(losses[2]));
      EXPECT_TRUE(job->executors[0]->LastStepSkipped());
      EXPECT_TRUE(job->executors[1]->LastStepSkipped());
    }
  }
}

// ---------------------------------------------------------------------------
// The executor on a named torch device. Every case runs with "cpu" (so CI
// exercises the device plumbing) and with "cuda:0", whose instances are the
// `gpu` CTest label's and skip on a host without CUDA. On cuda:0 the
// reference is the same job on the CPU, within 1e-4 relative (float32;
// LibTorch leaves TF32 off for float32 matmuls unless asked).

class OnDevice : public TorchExecutorTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    TorchExecutorTest::SetUp();
    if (IsSkipped()) return;
    if (GetParam() != "cpu" && TorchCudaDeviceCount() == 0) {
      GTEST_SKIP() << "needs CUDA: LibTorch sees no CUDA device (a CPU-only LibTorch, or no GPU "
                      "visible)";
    }
  }
  JobSpec Gpt(int ranks, const std::string& device) const {
    JobSpec spec{"gpt",
                 Stages("gpt", EvenSplit(NumNodes("gpt"), ranks)),
                 ranks == 1 ? ScheduleKind::kGPipe : ScheduleKind::k1F1B,
                 ranks,
                 "tensors:" + DataFile("gpt"),
                 GptOptimizer()};
    spec.device = device;
    return spec;
  }
};

// Forward and backward (the losses of every step depend on the previous
// steps' gradients) on the device equal the CPU's.
TEST_P(OnDevice, ForwardBackwardMatchesCpu) {
  const std::vector<double> cpu = Train(Gpt(1, "cpu"));
  ExpectLossesMatch(Train(Gpt(1, GetParam())), cpu);
}

// Two ranks on one device over Gloo (how workers sharing a GPU talk: NCCL
// refuses two ranks on one GPU) train as one rank on it; their boundary
// buffers go through pinned host memory.
TEST_P(OnDevice, TwoRanksShareTheDeviceOverGloo) {
  if (GetParam() != "cpu" && NcclAvailable()) {
    const absl::StatusOr<std::string> uuid = CudaDeviceUuid(0);
    ASSERT_TRUE(uuid.ok()) << uuid.status();
    EXPECT_EQ(TransportForDevices("nccl", {*uuid, *uuid}), "gloo");
  }
  const std::vector<double> one = Train(Gpt(1, GetParam()));
  std::vector<std::unique_ptr<Transport>> world = GlooWorld(2);
  auto job = Job::Create(Gpt(2, GetParam()), Raw(world));
  ASSERT_NE(job, nullptr);
  const std::vector<double> two = job->Run(0, kSteps);
  ASSERT_TRUE(job->AllOk()) << job->status[0] << " " << job->status[1];
  ExpectLossesMatch(two, one);
}

// A checkpoint written on the device loads on the CPU and one written on the
// CPU loads on the device (shards hold host copies; loading copies to the
// executor's device), and training continues with the same losses.
TEST_P(OnDevice, CheckpointMovesThroughTheCpu) {
  const std::vector<double> want = Train(Gpt(1, GetParam()));
  const std::string root = F().dir + "/device_ckpt_" + std::to_string(GetParam().size());
  Hub hub_a(1);
  auto a = Job::Create(Gpt(1, GetParam()), hub_a.transports());
  ASSERT_NE(a, nullptr);
  ExpectLossesMatch(a->Run(0, 3), want);
  ASSERT_TRUE(a->executors[0]->WriteCheckpoint(CheckpointDir(root, 3), {3, 1, 3 * kBatch}).ok());
  Hub hub_b(1);
  auto b = Job::Create(Gpt(1, "cpu"), hub_b.transports());
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->executors[0]->LoadCheckpoint(CheckpointDir(root, 3)).ok());
  ExpectLossesMatch(b->Run(3, 3), want, 3);
  ASSERT_TRUE(b->executors[0]->WriteCheckpoint(CheckpointDir(root, 6), {6, 1, 6 * kBatch}).ok());
  Hub hub_c(1);
  auto c = Job::Create(Gpt(1, GetParam()), hub_c.transports());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->executors[0]->LoadCheckpoint(CheckpointDir(root, 6)).ok());
  ExpectLossesMatch(c->Run(6, kSteps - 6), want, 6);
}

TEST_F(TorchExecutorTest, ADeviceTheHostLacksIsAFailedPrecondition) {
  JobSpec spec{"gpt",
               Stages("gpt", EvenSplit(NumNodes("gpt"), 1)),
               ScheduleKind::kGPipe,
               1,
               "tensors:" + DataFile("gpt"),
               GptOptimizer()};
  TorchExecutorOptions o;
  o.package = *ReadModelPackage(Package("gpt"));
  o.stages = *ReadCompiledStages(spec.stages_dir);
  o.stage_to_rank = {0};
  o.data = spec.data;
  o.device = "cuda:" + std::to_string(TorchCudaDeviceCount());
  absl::StatusOr<std::unique_ptr<TorchExecutor>> ex = TorchExecutor::Create(std::move(o));
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ex.status().message(), HasSubstr("does not exist"));
}

INSTANTIATE_TEST_SUITE_P(Devices, OnDevice, ::testing::Values("cpu", "cuda:0"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "cpu" ? std::string("cpu") : std::string("cuda0");
                         });

}  // namespace
}  // namespace pipeplan::worker
