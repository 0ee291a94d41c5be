// The torch-free parts of the torch executor: manifest parsing and its
// errors, checkpoint directories, and the transport-level collectives and
// state moves (over the in-memory transport, ranks as threads).
#include "pipeplan/client/model_package.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "on_ranks.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/transport/collectives.h"
#include "pipeplan/worker/transport/group_transport.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pipeplan_pkg_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path(path_ / fs::path(name)).parent_path());
    std::ofstream(fs::path(path_) / name) << text;
  }

 private:
  std::string path_;
};

constexpr char kStages[] = R"({
  "format": "pipeplan-stages/1", "package_digest": "d", "assignment_digest": "a",
  "microbatch_size": 2, "num_stages": 2, "unknown_field": 1,
  "stages": [
    {"index": 0, "file": "stage_0.pt",
     "inputs": [{"name": "idx", "shape": [2, 4], "dtype": "int64", "requires_grad": false}],
     "outputs": [{"name": "h", "shape": [2, 4, 8], "dtype": "float32", "requires_grad": true},
                 {"name": "m", "shape": [2, 4], "dtype": "bool", "requires_grad": false}],
     "parameters": [{"name": "wte.weight", "path": "wte.weight"}]},
    {"index": 1, "file": "stage_1.pt",
     "inputs": [{"name": "h", "shape": [2, 4, 8], "dtype": "float32", "requires_grad": true},
                {"name": "m", "shape": [2, 4], "dtype": "bool", "requires_grad": false}],
     "outputs": [{"name": "out", "shape": [2, 4, 16], "dtype": "float32", "requires_grad": true}],
     "parameters": [{"name": "wte.weight", "path": "lm_head.weight"},
                    {"name": "ln.bias", "path": "ln.bias"}]}
  ]})";

TEST(ModelPackage, ReadsStagesAndSizesBoundaries) {
  TempDir dir;
  dir.Write("stages.json", kStages);
  auto stages = ReadCompiledStages(dir.path());
  ASSERT_TRUE(stages.ok()) << stages.status();
  ASSERT_EQ(stages->num_stages(), 2);
  EXPECT_EQ(stages->microbatch_size, 2);
  EXPECT_EQ(stages->StagePath(1), dir.path() + "/stage_1.pt");
  // Activations: 2*4*8 floats + 2*4 bools; gradients: the floats only.
  EXPECT_EQ(BoundaryBytes(stages->stages[0].outputs, false), 2 * 4 * 8 * 4 + 2 * 4);
  EXPECT_EQ(BoundaryBytes(stages->stages[0].outputs, true), 2 * 4 * 8 * 4);
  const ParameterOwners owners = OwnersOf(*stages, {0, 1});
  EXPECT_EQ(owners.at("wte.weight"), (std::vector<int>{0, 1}));
  EXPECT_EQ(owners.at("ln.bias"), (std::vector<int>{1}));
  EXPECT_EQ(OwnersOf(*stages, {0, 0}).at("wte.weight"), (std::vector<int>{0}));
}

TEST(ModelPackage, StageErrorsNameTheField) {
  TempDir dir;
  std::string text = kStages;
  text.replace(text.find("\"bool\", \"requires_grad\": false}],\n     \"parameters\""), 6,
               "\"int8\"");
  dir.Write("stages.json", text);
  auto stages = ReadCompiledStages(dir.path());
  ASSERT_EQ(stages.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(stages.status().message()), HasSubstr("stage 0 outputs"));

  dir.Write("stages.json", R"({"format": "pipeplan-stages/1", "microbatch_size": 2,
    "num_stages": 1, "stages": [{"index": 0, "file": "s.pt",
    "inputs": [{"name": "x", "shape": [2], "dtype": "complex64"}]}]})");
  stages = ReadCompiledStages(dir.path());
  EXPECT_THAT(std::string(stages.status().message()), HasSubstr("unknown dtype \"complex64\""));

  dir.Write("stages.json", R"({"format": "pipeplan-stages/1", "microbatch_size": 2,
    "num_stages": 1, "stages": [{"index": 0, "file": "s.pt",
    "inputs": [{"name": "x", "shape": [2], "dtype": "int64", "requires_grad": true}]}]})");
  stages = ReadCompiledStages(dir.path());
  EXPECT_THAT(std::string(stages.status().message()),
              HasSubstr("requires a gradient but is int64"));

  dir.Write("stages.json", "{not json");
  EXPECT_EQ(ReadCompiledStages(dir.path()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCompiledStages(dir.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ModelPackage, ReadsManifest) {
  TempDir dir;
  dir.Write("manifest.json", R"({"format": "pipeplan-model-package/1", "digest": "abc",
    "nodes": ["idx", "wte"], "inputs": [{"name": "idx", "shape": [4, 8], "dtype": "int64",
    "high": 100}], "output": {"shape": [4, 8, 100], "dtype": "float32"}, "batch_dim": 0,
    "parameters": [{"name": "wte.weight", "shape": [100, 16], "dtype": "float32"}],
    "loss": "cross_entropy"})");
  auto package = ReadModelPackage(dir.path());
  ASSERT_TRUE(package.ok()) << package.status();
  EXPECT_EQ(package->inputs[0].high, 100);
  EXPECT_EQ(package->output.shape, (std::vector<int64_t>{4, 8, 100}));
  EXPECT_EQ(package->ParamsPath(), dir.path() + "/params.pt");

  dir.Write("manifest.json", R"({"format": "pipeplan-model-package/2"})");
  EXPECT_THAT(std::string(ReadModelPackage(dir.path()).status().message()),
              HasSubstr("reads pipeplan-model-package/1"));
}

// Sizes are computed in int64 from the manifest's shapes: shapes whose
// product would overflow (found by the model_package fuzzer under UBSan)
// are refused with the tensor named.
TEST(ModelPackage, RefusesTensorsTooLargeToSize) {
  const std::string huge = R"({"format": "pipeplan-model-package/1", "nodes": ["x"],
    "inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32"}],
    "output": {"name": "y", "shape": [4611686018427387904, 4], "dtype": "float32"},
    "batch_dim": 0})";
  auto package = ModelPackageFromJson(huge, "pkg");
  EXPECT_EQ(package.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(package.status().message()),
              HasSubstr("pkg/manifest.json: output \"y\" is larger than 1099511627776 bytes"));
  // 1 TiB is the most a tensor may hold.
  auto edge = ModelPackageFromJson(R"({"format": "pipeplan-model-package/1", "nodes": ["x"],
    "inputs": [{"name": "x", "shape": [1099511627776], "dtype": "int8"}],
    "output": {"shape": [1], "dtype": "float32"}, "batch_dim": 0})",
                                   "pkg");
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(BoundaryBytes(edge->inputs, false), int64_t{1} << 40);
}

TEST(ModelPackage, MustFitTheJobsGraphAndPlan) {
  ModelPackage p;
  p.dir = "pkg";
  p.nodes = {"x", "fc", "out"};
  EXPECT_TRUE(CheckPackageFitsPlan(p, {"x", "fc", "out"}, {0, 0, 1}).ok());
  EXPECT_THAT(std::string(CheckPackageFitsPlan(p, {"x", "fc2", "out"}, {0, 0, 1}).message()),
              HasSubstr("node 1 is \"fc\", the job's graph has \"fc2\""));
  EXPECT_THAT(std::string(CheckPackageFitsPlan(p, {"x", "fc"}, {0, 0}).message()),
              HasSubstr("has 3 nodes, the job's graph 2"));
  EXPECT_THAT(std::string(CheckPackageFitsPlan(p, {"x", "fc", "out"}, {0, 1}).message()),
              HasSubstr("the plan places 2 nodes"));
}

TEST(Checkpoint, ManifestRoundTripAndLatestComplete) {
  TempDir dir;
  const std::string root = dir.path() + "/ckpt";
  auto none = LatestCheckpoint(root);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  CheckpointManifest m;
  m.meta = {30, 2, 30 * 8};
  m.package_digest = "abc";
  m.optimizer = "adamw";
  m.shards = {{ShardFileName(0), 0, {"a", "b"}}, {ShardFileName(1), 1, {}}};
  ASSERT_TRUE(WriteCheckpointManifest(CheckpointDir(root, 30), m).ok());
  // A later checkpoint cut short (no MANIFEST) is not complete.
  const std::string shard = "partial";
  ASSERT_TRUE(WriteFileAtomically(CheckpointDir(root, 40) + "/" + ShardFileName(0),
                                  std::as_bytes(std::span(shard)))
                  .ok());
  auto latest = LatestCheckpoint(root);
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, CheckpointDir(root, 30));
  EXPECT_EQ(ReadCheckpointManifest(CheckpointDir(root, 40)).status().code(),
            absl::StatusCode::kNotFound);

  auto read = ReadCheckpointManifest(**latest);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->meta.step, 30);
  EXPECT_EQ(read->meta.plan_version, 2);
  EXPECT_EQ(read->meta.data_position, 240);
  EXPECT_EQ(read->optimizer, "adamw");
  ASSERT_EQ(read->shards.size(), 2u);
  EXPECT_EQ(read->shards[0].parameters, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(read->shards[1].file, "shard_1.bin");
  EXPECT_EQ(read->format_version, 2);

  auto bytes = ReadFileBytes(CheckpointDir(root, 40) + "/shard_0.bin");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), shard.size());
  for (const auto& e : fs::directory_iterator(CheckpointDir(root, 40))) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
  }
}

// Format 1 manifests (torch.save'd shards) still read; a newer format is
// FAILED_PRECONDITION naming it, so a worker never trains from state it
// cannot read.
TEST(Checkpoint, ManifestFormatVersions) {
  TempDir dir;
  const std::string old_dir = dir.path() + "/v1", new_dir = dir.path() + "/v9";
  const std::string v1 = R"({"format": "pipeplan-checkpoint/1", "step": 20, "optimizer": "sgd",
      "shards": [{"file": "shard_0.pt", "rank": 0, "parameters": ["w"]}]})";
  const std::string v9 = R"({"format": "pipeplan-checkpoint/9", "step": 20, "layout": "new"})";
  ASSERT_TRUE(WriteFileAtomically(old_dir + "/MANIFEST.json", std::as_bytes(std::span(v1))).ok());
  ASSERT_TRUE(WriteFileAtomically(new_dir + "/MANIFEST.json", std::as_bytes(std::span(v9))).ok());
  auto old = ReadCheckpointManifest(old_dir);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->format_version, 1);
  EXPECT_EQ(old->shards.at(0).file, "shard_0.pt");
  auto newer = ReadCheckpointManifest(new_dir);
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(newer.status().message()), HasSubstr("pipeplan-checkpoint/9"));
}

TEST(Collectives, SumOverRanksIsTheSameEverywhere) {
  std::vector<std::vector<double>> results(3);
  OnRanks(3, [&](int r, Transport& t) {
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {  // consecutive calls stay apart
      std::vector<double> v = {0.1 * (r + 1), r == 2 ? 1.0 : 0.0, 1e-17 * r};
      ASSERT_TRUE(SumOverRanks(t, v, epoch, absl::Seconds(10)).ok());
      results[r] = v;
    }
  });
  EXPECT_DOUBLE_EQ(results[0][0], 0.1 + 0.2 + 0.30000000000000004);
  EXPECT_EQ(results[0][1], 1.0);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(results[r], results[0]);  // bit-identical
}

// The ring sums every element over the ranks, bit-identically everywhere,
// for any number of ranks and buffers shorter or longer than the ring.
TEST(Collectives, RingAllReduceSumsEveryElement) {
  for (int n : {1, 2, 3, 5}) {
    for (size_t len : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
      std::vector<std::vector<float>> results(n);
      OnRanks(n, [&](int r, Transport& t) {
        std::vector<float> v(len);
        for (size_t i = 0; i < len; ++i) v[i] = 0.1f * static_cast<float>(r + 1) + i;
        for (uint64_t epoch = 0; epoch < 2; ++epoch) {  // two calls: the sum of sums
          ASSERT_TRUE(RingAllReduceSum(t, v, epoch, absl::Seconds(10)).ok());
        }
        results[r] = v;
      });
      for (size_t i = 0; i < len; ++i) {
        float once = 0;
        for (int r = 0; r < n; ++r) once += 0.1f * static_cast<float>(r + 1) + i;
        EXPECT_NEAR(results[0][i], n * once, 1e-4 * n * once) << n << " ranks, element " << i;
      }
      for (int r = 1; r < n; ++r) EXPECT_EQ(results[r], results[0]) << n << " ranks";
    }
  }
}

// A 2 x 3 grid of ranks: rows and columns as groups, as a plan's replicas'
// pipelines and its ranks' replica groups are carved out of one transport.
TEST(GroupTransport, RowsAndColumnsOfOneTransport) {
  constexpr int kRows = 2, kCols = 3;
  std::vector<int64_t> row_max(kRows * kCols), col_max(kRows * kCols);
  std::vector<std::vector<double>> col_sums(kRows * kCols);
  OnRanks(kRows * kCols, [&](int me, Transport& t) {
    const int row = me / kCols, col = me % kCols;
    std::vector<int> row_members, col_members;
    for (int c = 0; c < kCols; ++c) row_members.push_back(row * kCols + c);
    for (int r = 0; r < kRows; ++r) col_members.push_back(r * kCols + col);
    auto rows = GroupTransport::Create(&t, row_members);
    auto cols = GroupTransport::Create(&t, col_members);
    ASSERT_TRUE(rows.ok() && cols.ok()) << rows.status() << cols.status();
    EXPECT_EQ((*rows)->rank(), col);
    EXPECT_EQ((*cols)->rank(), row);
    auto rmax = (*rows)->AllReduceMax(me, absl::Seconds(10));
    auto cmax = (*cols)->AllReduceMax(me, absl::Seconds(10));
    ASSERT_TRUE(rmax.ok() && cmax.ok()) << rmax.status() << cmax.status();
    row_max[me] = *rmax;
    col_max[me] = *cmax;
    std::vector<double> v = {static_cast<double>(me), 1.0};
    ASSERT_TRUE(RingAllReduceSum(**cols, v, 0, absl::Seconds(10)).ok());
    col_sums[me] = v;
    auto world = t.AllReduceMax(me, absl::Seconds(10));  // the base still works
    ASSERT_TRUE(world.ok());
    EXPECT_EQ(*world, kRows * kCols - 1);
  });
  for (int me = 0; me < kRows * kCols; ++me) {
    const int row = me / kCols, col = me % kCols;
    EXPECT_EQ(row_max[me], row * kCols + kCols - 1);
    EXPECT_EQ(col_max[me], (kRows - 1) * kCols + col);
    EXPECT_EQ(col_sums[me], (std::vector<double>{static_cast<double>(col + kCols + col), 2.0}));
  }
  MemoryHub hub(2);
  auto t = hub.Connect(0);
  EXPECT_EQ(GroupTransport::Create(t.get(), {1}).status().code(),
            absl::StatusCode::kInvalidArgument);  // without this rank
  EXPECT_EQ(GroupTransport::Create(t.get(), {0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupTransport::Create(t.get(), {0, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

std::vector<std::byte> Blob(const std::string& s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

TEST(StateTransfer, MovesEveryNameToItsNewOwners) {
  // Old plan: "tied" on ranks 0 and 2, "a" on 0, "b" on 1, "c" on 2.
  // New plan: "tied" on 1 and 2, "a" on 2, "b" on 1, "c" on 0 and 1.
  const ParameterOwners from = {{"tied", {0, 2}}, {"a", {0}}, {"b", {1}}, {"c", {2}}};
  const ParameterOwners to = {{"tied", {1, 2}}, {"a", {2}}, {"b", {1}}, {"c", {0, 1}}};
  std::vector<NamedState> mine(3);
  mine[0] = {{"tied", Blob("T0")}, {"a", Blob("A")}};
  mine[1] = {{"b", Blob("B")}};
  mine[2] = {{"tied", Blob("T0")}, {"c", Blob(std::string(100000, 'c'))}};
  std::vector<NamedState> got(3);
  OnRanks(3, [&](int r, Transport& t) {
    auto moved = MoveState(t, mine[r], from, to, 7, absl::Seconds(10));
    ASSERT_TRUE(moved.ok()) << moved.status();
    got[r] = std::move(*moved);
  });
  EXPECT_EQ(got[0], (NamedState{{"c", Blob(std::string(100000, 'c'))}}));
  EXPECT_EQ(
      got[1],
      (NamedState{{"tied", Blob("T0")}, {"b", Blob("B")}, {"c", Blob(std::string(100000, 'c'))}}));
  EXPECT_EQ(got[2], (NamedState{{"tied", Blob("T0")}, {"a", Blob("A")}}));
}

TEST(StateTransfer, ErrorsNameTheParameter) {
  OnRanks(1, [&](int, Transport& t) {
    auto s = MoveState(t, NamedState{{"a", Blob("A")}}, {{"a", {0}}}, {{"a", {0}}, {"new", {0}}}, 0,
                       absl::Seconds(1));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("\"new\""));
    s = MoveState(t, NamedState{}, {{"a", {0}}}, {{"a", {0}}}, 0, absl::Seconds(1));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  });
}

}  // namespace
}  // namespace pipeplan::worker
