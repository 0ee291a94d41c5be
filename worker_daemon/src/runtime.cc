#include "pipeplan/worker/runtime.h"

#include <chrono>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/core/status_macros.h"

namespace pipeplan::worker {
namespace {

using schedule::Action;
using schedule::ActionType;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Key of a pending RECV: (backward?, stage, microbatch).
uint64_t RecvKey(bool backward, int stage, int microbatch) {
  return (static_cast<uint64_t>(backward) << 62) | (static_cast<uint64_t>(stage) << 31) |
         static_cast<uint64_t>(microbatch);
}

}  // namespace

uint64_t StageRuntime::Tag(bool backward, int boundary, int microbatch, int num_microbatches) {
  return (static_cast<uint64_t>(boundary) * 2 + (backward ? 1 : 0)) *
             static_cast<uint64_t>(num_microbatches) +
         static_cast<uint64_t>(microbatch);
}

int StageRuntime::PeerOf(const Action& a) const {
  const int peer = PeerStage(a);
  return peer < 0 ? options_.rank : options_.stage_to_rank[peer];
}

absl::StatusOr<StageRuntime> StageRuntime::Create(RuntimeOptions options,
                                                  schedule::RankProgram program) {
  const int p = options.num_stages;
  const int m = options.num_microbatches;
  if (p < 1 || m < 1 || static_cast<int>(options.stage_to_rank.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat(
        "runtime needs num_stages >= 1, num_microbatches >= 1 and one rank per stage; got ", p,
        " stages, ", m, " microbatches, ", options.stage_to_rank.size(), " ranks"));
  }
  std::vector<Action> actions;
  auto check = [&](const Action& a) -> absl::Status {
    if (a.stage < 0 || a.stage >= p || a.microbatch < 0 || a.microbatch >= m) {
      return absl::InvalidArgumentError(absl::StrCat("action ", schedule::ActionToString(a),
                                                     " is outside ", p, " stages x ", m,
                                                     " microbatches"));
    }
    if (options.stage_to_rank[a.stage] != options.rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("action ", schedule::ActionToString(a), " is for stage ", a.stage,
                       " on rank ", options.stage_to_rank[a.stage], ", not rank ", options.rank));
    }
    const bool needs_next = a.type == ActionType::kSendF || a.type == ActionType::kRecvB;
    const bool needs_prev = a.type == ActionType::kSendB || a.type == ActionType::kRecvF;
    if ((needs_next && a.stage + 1 >= p) || (needs_prev && a.stage == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("action ", schedule::ActionToString(a), " has no peer stage"));
    }
    return absl::OkStatus();
  };
  for (const std::optional<Action>& slot : program) {
    if (!slot) continue;
    if (slot->type == ActionType::kOverlapFB) {
      PIPEPLAN_RETURN_IF_ERROR(check(schedule::ForwardHalf(*slot)));
      PIPEPLAN_RETURN_IF_ERROR(check(schedule::BackwardHalf(*slot)));
    } else {
      PIPEPLAN_RETURN_IF_ERROR(check(*slot));
    }
    actions.push_back(*slot);
  }
  return StageRuntime(std::move(options), std::move(actions));
}

absl::StatusOr<StageRuntime> StageRuntime::ForRank(const schedule::PipelineSchedule& lowered,
                                                   int rank, absl::Duration comm_timeout) {
  if (rank < 0 || rank >= static_cast<int>(lowered.programs.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not one of the schedule's ",
                                                   lowered.programs.size(), " ranks"));
  }
  RuntimeOptions options;
  options.rank = rank;
  options.num_stages = lowered.num_stages;
  options.num_microbatches = lowered.num_microbatches;
  options.stage_to_rank = lowered.stage_to_rank;
  options.comm_timeout = comm_timeout;
  return Create(std::move(options), lowered.programs[rank]);
}

absl::StatusOr<StepResult> StageRuntime::RunStep(int64_t step, Transport& transport,
                                                 Executor& executor) const {
  using Clock = std::chrono::steady_clock;
  const auto step_start = Clock::now();
  const int m = options_.num_microbatches;
  StepResult result;
  result.step = step;
  result.timings.reserve(actions_.size());
  struct Pending {
    std::unique_ptr<PendingOp> op;
    size_t timing_index;
  };
  absl::flat_hash_map<uint64_t, Pending> recvs;
  std::vector<Pending> sends;

  PIPEPLAN_RETURN_IF_ERROR(executor.BeginStep(step));

  auto wait_recv = [&](bool backward, int stage, int microbatch) -> absl::Status {
    auto it = recvs.find(RecvKey(backward, stage, microbatch));
    if (it == recvs.end()) return absl::OkStatus();  // local hop, or fed earlier
    const auto t0 = Clock::now();
    absl::Status s = it->second.op->Wait(options_.comm_timeout);
    result.timings[it->second.timing_index].seconds += Since(t0);
    recvs.erase(it);
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("step ", step, ": receiving ", backward ? "gradient" : "activation",
                       " for stage ", stage, " microbatch ", microbatch, ": ", s.message()));
    }
    return absl::OkStatus();
  };
  // The wait for a compute action's input is charged to its RECV, not to the
  // compute: compute timings are what calibration compares with the model.
  auto wait_input = [&](const Action& a) -> absl::Status {
    if (a.type == ActionType::kForward) {
      return wait_recv(false, a.stage, a.microbatch);
    } else if (a.type == ActionType::kBackwardInput || a.type == ActionType::kFullBackward) {
      return wait_recv(true, a.stage, a.microbatch);
    }
    return absl::OkStatus();
  };

  for (const Action& a : actions_) {
    const size_t index = result.timings.size();
    result.timings.push_back({a, 0});
    switch (a.type) {
      case ActionType::kSendF:
      case ActionType::kSendB: {
        const bool backward = a.type == ActionType::kSendB;
        const int boundary = backward ? a.stage - 1 : a.stage;
        PIPEPLAN_ASSIGN_OR_RETURN(std::span<const std::byte> data, executor.SendBuffer(a));
        const auto t0 = Clock::now();
        PIPEPLAN_ASSIGN_OR_RETURN(
            std::unique_ptr<PendingOp> op,
            transport.Send(PeerOf(a), Tag(backward, boundary, a.microbatch, m), data));
        result.timings[index].seconds = Since(t0);
        sends.push_back({std::move(op), index});
        break;
      }
      case ActionType::kRecvF:
      case ActionType::kRecvB: {
        const bool backward = a.type == ActionType::kRecvB;
        const int boundary = backward ? a.stage : a.stage - 1;
        PIPEPLAN_ASSIGN_OR_RETURN(std::span<std::byte> data, executor.RecvBuffer(a));
        const auto t0 = Clock::now();
        PIPEPLAN_ASSIGN_OR_RETURN(
            std::unique_ptr<PendingOp> op,
            transport.Recv(PeerOf(a), Tag(backward, boundary, a.microbatch, m), data));
        result.timings[index].seconds = Since(t0);
        recvs[RecvKey(backward, a.stage, a.microbatch)] = Pending{std::move(op), index};
        break;
      }
      case ActionType::kOverlapFB: {
        PIPEPLAN_RETURN_IF_ERROR(wait_input(schedule::ForwardHalf(a)));
        PIPEPLAN_RETURN_IF_ERROR(wait_input(schedule::BackwardHalf(a)));
        const auto t0 = Clock::now();
        PIPEPLAN_RETURN_IF_ERROR(executor.Compute(schedule::ForwardHalf(a)));
        PIPEPLAN_RETURN_IF_ERROR(executor.Compute(schedule::BackwardHalf(a)));
        result.timings[index].seconds = Since(t0);
        break;
      }
      default: {
        PIPEPLAN_RETURN_IF_ERROR(wait_input(a));
        const auto t0 = Clock::now();
        PIPEPLAN_RETURN_IF_ERROR(executor.Compute(a));
        result.timings[index].seconds = Since(t0);
        break;
      }
    }
  }
  // RECVs nothing consumed (a malformed but harmless program) still complete.
  for (auto& [key, pending] : recvs) {
    const auto t0 = Clock::now();
    absl::Status s = pending.op->Wait(options_.comm_timeout);
    result.timings[pending.timing_index].seconds += Since(t0);
    PIPEPLAN_RETURN_IF_ERROR(s);
  }
  for (Pending& pending : sends) {
    const auto t0 = Clock::now();
    absl::Status s = pending.op->Wait(options_.comm_timeout);
    result.timings[pending.timing_index].seconds += Since(t0);
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("step ", step, ": ",
                       schedule::ActionToString(result.timings[pending.timing_index].action), ": ",
                       s.message()));
    }
  }
  PIPEPLAN_RETURN_IF_ERROR(executor.EndStep());
  result.step_seconds = Since(step_start);
  return result;
}

}  // namespace pipeplan::worker
