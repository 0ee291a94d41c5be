#include "pipeplan/worker/runtime/runtime.h"

#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::worker {
namespace {

using schedule::Action;
using schedule::ActionType;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// System clock: comparable across the processes of one host (and across
// hosts as far as their clocks are synchronized).
int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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

namespace {

// One step of one rank: runs the actions in order, posting SEND/RECV on the
// transport and computing on the executor, and charges each action its time.
class StepRun {
 public:
  StepRun(const StageRuntime& runtime, int64_t step, Transport& transport, Executor& executor)
      : runtime_(runtime), step_(step), transport_(transport), executor_(executor) {
    result_.step = step;
    result_.rank = runtime.options().rank;
  }

  absl::StatusOr<StepResult> Run(const std::vector<Action>& actions) && {
    step_start_ = Clock::now();
    result_.start_unix_us = UnixMicros();
    result_.timings.reserve(actions.size());
    PIPEPLAN_RETURN_IF_ERROR(executor_.BeginStep(step_));
    for (const Action& a : actions) {
      const size_t index = result_.timings.size();
      result_.timings.push_back({.action = a, .start_seconds = Since(step_start_)});
      if (IsTransfer(a)) {
        PIPEPLAN_RETURN_IF_ERROR(Post(a, index));
      } else {
        PIPEPLAN_RETURN_IF_ERROR(Compute(a, index));
      }
    }
    PIPEPLAN_RETURN_IF_ERROR(WaitForPosted());
    const auto update_start = Clock::now();
    PIPEPLAN_RETURN_IF_ERROR(executor_.EndStep());
    result_.optimizer_seconds = Since(update_start);
    result_.step_seconds = Since(step_start_);
    for (const ActionTime& t : result_.timings) {
      if (IsTransfer(t.action)) {
        result_.comm_seconds += t.wait_seconds;
      } else {
        result_.compute_seconds += t.seconds;
      }
    }
    return std::move(result_);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::unique_ptr<PendingOp> op;
    size_t timing_index;
  };

  static bool IsTransfer(const Action& a) {
    return a.type == ActionType::kSendF || a.type == ActionType::kSendB ||
           a.type == ActionType::kRecvF || a.type == ActionType::kRecvB;
  }

  // Posts a SEND or RECV; it is charged its posting time now and its final
  // wait later.
  absl::Status Post(const Action& a, size_t index) {
    const bool send = a.type == ActionType::kSendF || a.type == ActionType::kSendB;
    const bool backward = a.type == ActionType::kSendB || a.type == ActionType::kRecvB;
    // Boundary b lies between stages b and b + 1.
    const int boundary = send == backward ? a.stage - 1 : a.stage;
    const uint64_t tag =
        StageRuntime::Tag(backward, boundary, a.microbatch, runtime_.options().num_microbatches);
    std::unique_ptr<PendingOp> op;
    ActionTime& timing = result_.timings[index];
    timing.peer_rank = runtime_.PeerOf(a);
    if (send) {
      PIPEPLAN_ASSIGN_OR_RETURN(std::span<const std::byte> data, executor_.SendBuffer(a));
      const auto t0 = Clock::now();
      timing.post_unix_us = UnixMicros();
      timing.bytes = static_cast<double>(data.size());
      PIPEPLAN_ASSIGN_OR_RETURN(op, transport_.Send(timing.peer_rank, tag, data));
      timing.seconds = Since(t0);
      send_index_[RecvKey(backward, a.stage, a.microbatch)] = sends_.size();
      sends_.push_back({std::move(op), index});
    } else {
      PIPEPLAN_ASSIGN_OR_RETURN(std::span<std::byte> data, executor_.RecvBuffer(a));
      const auto t0 = Clock::now();
      timing.post_unix_us = UnixMicros();
      timing.bytes = static_cast<double>(data.size());
      PIPEPLAN_ASSIGN_OR_RETURN(op, transport_.Recv(timing.peer_rank, tag, data));
      timing.seconds = Since(t0);
      recvs_[RecvKey(backward, a.stage, a.microbatch)] = Pending{std::move(op), index};
    }
    return absl::OkStatus();
  }

  // F, I, W, B, or an OVERLAP_F_B as its forward half then its backward half,
  // after the RECVs that feed it.
  absl::Status Compute(const Action& a, size_t index) {
    const bool overlap = a.type == ActionType::kOverlapFB;
    if (overlap) {
      PIPEPLAN_RETURN_IF_ERROR(WaitInput(schedule::ForwardHalf(a)));
      PIPEPLAN_RETURN_IF_ERROR(WaitInput(schedule::BackwardHalf(a)));
    } else {
      PIPEPLAN_RETURN_IF_ERROR(WaitInput(a));
    }
    PIPEPLAN_RETURN_IF_ERROR(FinishSends(overlap ? schedule::BackwardHalf(a) : a));
    const auto t0 = Clock::now();
    std::optional<double> device_seconds;
    for (const Action& part :
         overlap ? std::vector<Action>{schedule::ForwardHalf(a), schedule::BackwardHalf(a)}
                 : std::vector<Action>{a}) {
      PIPEPLAN_RETURN_IF_ERROR(executor_.Compute(part));
      if (std::optional<double> s = executor_.LastComputeSeconds()) {
        device_seconds = device_seconds.value_or(0) + *s;
      }
    }
    result_.timings[index].seconds = device_seconds.value_or(Since(t0));
    return absl::OkStatus();
  }

  // The wait for a compute action's input is charged to its RECV, not to the
  // compute: compute timings are what calibration compares with the model.
  absl::Status WaitInput(const Action& a) {
    if (a.type == ActionType::kForward) return WaitRecv(false, a.stage, a.microbatch);
    if (a.type == ActionType::kBackwardInput || a.type == ActionType::kFullBackward) {
      return WaitRecv(true, a.stage, a.microbatch);
    }
    return absl::OkStatus();
  }

  absl::Status WaitRecv(bool backward, int stage, int microbatch) {
    auto it = recvs_.find(RecvKey(backward, stage, microbatch));
    if (it == recvs_.end()) return absl::OkStatus();  // local hop, or fed earlier
    const absl::Status s = Wait(it->second);
    recvs_.erase(it);
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("step ", step_, ": receiving ", backward ? "gradient" : "activation",
                       " for stage ", stage, " microbatch ", microbatch, ": ", s.message()));
    }
    return absl::OkStatus();
  }

  // Before a backward of (s, m), so that a stage holds its send buffers no
  // longer than 1F1B holds its activations, lets the executor free:
  //  - SEND_F(s, m): complete, since the gradient that came back for it
  //    (RECV_B, waited by WaitInput) was computed from it;
  //  - the stage's previous SEND_B.
  // Either's RECV was placed on the peer in an earlier lock-step round of
  // the lowering (lowering.h) than this backward, so the wait needs nothing
  // of this rank's later actions and cannot deadlock (also for outputs
  // that carry no gradient back).
  absl::Status FinishSends(const Action& a) {
    if (a.type != ActionType::kBackwardInput && a.type != ActionType::kFullBackward) {
      return absl::OkStatus();
    }
    PIPEPLAN_RETURN_IF_ERROR(FinishSend(false, a.stage, a.microbatch));
    auto [previous, added] = last_backward_.try_emplace(a.stage, a.microbatch);
    if (!added) {
      PIPEPLAN_RETURN_IF_ERROR(FinishSend(true, a.stage, previous->second));
      previous->second = a.microbatch;
    }
    return absl::OkStatus();
  }

  absl::Status FinishSend(bool backward, int stage, int microbatch) {
    auto it = send_index_.find(RecvKey(backward, stage, microbatch));
    if (it == send_index_.end()) return absl::OkStatus();  // a local hop
    Pending& pending = sends_[it->second];
    send_index_.erase(it);
    PIPEPLAN_RETURN_IF_ERROR(WaitSend(pending));
    executor_.SendDone(result_.timings[pending.timing_index].action);
    return absl::OkStatus();
  }

  absl::Status WaitSend(Pending& pending) {
    if (pending.op == nullptr) return absl::OkStatus();  // waited before
    const absl::Status s = Wait(pending);
    pending.op.reset();
    if (s.ok()) return s;
    return absl::Status(
        s.code(),
        absl::StrCat("step ", step_, ": ",
                     schedule::ActionToString(result_.timings[pending.timing_index].action), ": ",
                     s.message()));
  }

  // End of the step: RECVs nothing consumed (a malformed but harmless
  // program) still complete, then every SEND.
  absl::Status WaitForPosted() {
    for (auto& [key, pending] : recvs_) PIPEPLAN_RETURN_IF_ERROR(Wait(pending));
    for (Pending& pending : sends_) PIPEPLAN_RETURN_IF_ERROR(WaitSend(pending));
    return absl::OkStatus();
  }

  // Waits for a posted op and charges the wait to its action.
  absl::Status Wait(Pending& pending) {
    const auto t0 = Clock::now();
    const absl::Status s = pending.op->Wait(runtime_.options().comm_timeout);
    const double waited = Since(t0);
    ActionTime& timing = result_.timings[pending.timing_index];
    timing.seconds += waited;
    timing.wait_seconds = waited;
    timing.complete_unix_us = UnixMicros();
    return s;
  }

  const StageRuntime& runtime_;
  const int64_t step_;
  Transport& transport_;
  Executor& executor_;
  StepResult result_;
  Clock::time_point step_start_;
  absl::flat_hash_map<uint64_t, Pending> recvs_;
  std::vector<Pending> sends_;
  // Key (as RecvKey) of a SEND not yet waited -> its index in sends_.
  absl::flat_hash_map<uint64_t, size_t> send_index_;
  // Stage -> the microbatch of its last backward.
  absl::flat_hash_map<int, int> last_backward_;
};

}  // namespace

absl::StatusOr<StepResult> StageRuntime::RunStep(int64_t step, Transport& transport,
                                                 Executor& executor) const {
  return StepRun(*this, step, transport, executor).Run(actions_);
}

}  // namespace pipeplan::worker
