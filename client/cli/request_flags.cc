#include "request_flags.h"

#include <fstream>
#include <sstream>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/memory_model.h"
#include "pipeplan/core/planner.h"

namespace pipeplan::cli {

const common::FlagSet& PlanInputFlags() {
  static const common::FlagSet* flags = [] {
    auto* f = new common::FlagSet("pipeplan");
    f->Section("model and cluster")
        .Value("graph", "FILE", "model graph JSON (docs/graph-format.md)")
        .Value("cluster", "FILE", "cluster topology JSON");
    return f;
  }();
  return *flags;
}

const common::FlagSet& PlanOptionFlags() {
  static const common::FlagSet* flags = [] {
    auto* f = new common::FlagSet("pipeplan");
    f->Section("plan options")
        .Value("ranks", "P", "pipeline ranks (0 or absent: the planner chooses)")
        .Alias("stages")
        .Value("replicas", "D", "data-parallel replicas (0 or absent: the planner chooses)")
        .Value("max-replicas", "D", "most replicas the planner may choose (0: no cap)")
        .Value("microbatches", "M",
               "microbatches per step and replica (0 or absent: the planner chooses)")
        .Value("global-batch", "B",
               "samples per step over all replicas (rescales per-microbatch costs)")
        .Value("allreduce-bucket-bytes", "BYTES",
               "gradient bytes per all-reduce bucket, overlapped with the last\n"
               "backward (0 or absent: 25 MiB, DDP's default)")
        .Value("schedule", "NAME",
               "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,\n"
               "ZBVZeroBubble, DualPipeV (any letter case) or auto")
        .Value("chunks-per-rank", "V", "stages per rank of the looped schedules (2)")
        .Alias("chunks")
        .Value("method", "M", "auto, dp, ideal_dp, milp, uniform, params or time")
        .Value("comm", "MODEL", "direct (default) or relay")
        .Value("optimizer", "NAME",
               "sgd, momentum, adam or adamw (adam): the optimizer state the memory\n"
               "model counts (and, with --model-package, the optimizer that trains)")
        .Value("precision", "NAME",
               "fp32, bf16-mixed or fp64 (bf16-mixed; a training job: its dtype)")
        .Value("optimizer-multiplier", "X",
               "optimizer bytes per parameter byte; overrides --optimizer when > 0")
        .Value("cut-granularity", "G",
               "node (default), module:DEPTH or layer: where stages may be cut")
        .Value("time-limit", "S", "solver time limit in seconds (10)")
        .Value("gap", "G", "stop when the proven relative gap is below G");
    return f;
  }();
  return *flags;
}

namespace {

template <typename Message>
absl::Status ReadJsonFile(const std::string& path, Message* message) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::string text, common::ReadFileToString(path));
  absl::Status s = ParseJson(text, message);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

// The flag's value as a usage error when the core rejects it.
template <typename T>
absl::StatusOr<T> FlagValue(const std::string& flag, absl::StatusOr<T> parsed) {
  if (!parsed.ok()) {
    return common::UsageError(absl::StrCat("--", flag, ": ", parsed.status().message()));
  }
  return parsed;
}

// --name, when given, read as the setter's type (an integer or a number) and
// set on `o`.
template <typename T>
absl::Status SetNumber(const common::ParsedFlags& flags, const std::string& name,
                       void (v1::PlanOptions::*set)(T), v1::PlanOptions* o) {
  if (!flags.Has(name)) return absl::OkStatus();
  if constexpr (std::is_floating_point_v<T>) {
    PIPEPLAN_ASSIGN_OR_RETURN(double v, flags.GetDouble(name, 0));
    (o->*set)(v);
  } else {
    PIPEPLAN_ASSIGN_OR_RETURN(int v, flags.GetInt(name, 0));
    (o->*set)(v);
  }
  return absl::OkStatus();
}

absl::Status ApplyNamedOptions(const common::ParsedFlags& flags, v1::PlanOptions* o) {
  if (auto name = flags.Get("schedule")) {
    if (absl::AsciiStrToLower(*name) == "auto") {
      o->set_schedule(v1::SCHEDULE_AUTO);
    } else {
      PIPEPLAN_ASSIGN_OR_RETURN(auto kind,
                                FlagValue("schedule", schedule::ParseScheduleKind(*name)));
      o->set_schedule(ScheduleToProto(kind));
    }
  }
  if (auto name = flags.Get("method")) {
    PIPEPLAN_ASSIGN_OR_RETURN(PartitionMethod m, FlagValue("method", ParsePartitionMethod(*name)));
    o->set_method(MethodToProto(m));
  }
  if (auto name = flags.Get("optimizer")) {
    PIPEPLAN_ASSIGN_OR_RETURN(Optimizer optimizer, FlagValue("optimizer", ParseOptimizer(*name)));
    o->set_optimizer(OptimizerToProto(optimizer));
  }
  if (auto name = flags.Get("precision")) {
    PIPEPLAN_ASSIGN_OR_RETURN(Precision precision, FlagValue("precision", ParsePrecision(*name)));
    o->set_precision(PrecisionToProto(precision));
  }
  if (auto g = flags.Get("cut-granularity")) o->set_cut_granularity(*g);
  if (auto comm = flags.Get("comm")) {
    const std::string c = absl::AsciiStrToLower(*comm);
    if (c != "relay" && c != "direct") {
      return common::UsageError(absl::StrCat("--comm wants direct or relay, got \"", *comm, "\""));
    }
    o->set_comm_model(c == "relay" ? v1::COMM_RELAY : v1::COMM_DIRECT);
  }
  return absl::OkStatus();
}

}  // namespace

bool HasOptionFlags(const common::ParsedFlags& flags) {
  for (const common::FlagSpec& f : PlanOptionFlags().flags()) {
    if (flags.Has(f.name)) return true;
  }
  return false;
}

absl::Status ApplyOptionFlags(const common::ParsedFlags& flags, v1::PlanOptions* o) {
  using Options = v1::PlanOptions;
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "ranks", &Options::set_num_ranks, o));
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "replicas", &Options::set_num_replicas, o));
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "max-replicas", &Options::set_max_replicas, o));
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "microbatches", &Options::set_microbatches, o));
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "global-batch", &Options::set_global_batch, o));
  if (flags.Has("allreduce-bucket-bytes")) {
    PIPEPLAN_ASSIGN_OR_RETURN(double v, flags.GetDouble("allreduce-bucket-bytes", 0));
    if (!(v >= 0)) {
      return common::UsageError(absl::StrCat("--allreduce-bucket-bytes must be >= 0, got ", v));
    }
    o->set_allreduce_bucket_bytes(v);
  }
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "chunks-per-rank", &Options::set_chunks_per_rank, o));
  PIPEPLAN_RETURN_IF_ERROR(
      SetNumber(flags, "optimizer-multiplier", &Options::set_optimizer_state_multiplier, o));
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "time-limit", &Options::set_time_limit_seconds, o));
  PIPEPLAN_RETURN_IF_ERROR(SetNumber(flags, "gap", &Options::set_relative_gap, o));
  return ApplyNamedOptions(flags, o);
}

absl::StatusOr<v1::PlanRequest> RequestFromFlags(const common::ParsedFlags& flags) {
  v1::PlanRequest req;
  PIPEPLAN_ASSIGN_OR_RETURN(std::string graph_path, flags.Require("graph"));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string cluster_path, flags.Require("cluster"));
  // Flags first: a typo in a number fails before any file is read.
  PIPEPLAN_RETURN_IF_ERROR(ApplyOptionFlags(flags, req.mutable_options()));
  PIPEPLAN_RETURN_IF_ERROR(ReadJsonFile(graph_path, req.mutable_graph()));
  PIPEPLAN_RETURN_IF_ERROR(ReadJsonFile(cluster_path, req.mutable_cluster()));
  return req;
}

}  // namespace pipeplan::cli
