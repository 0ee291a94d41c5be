#include "pipeplan/core/schedule/build.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "rank_program.h"

namespace pipeplan::schedule {
namespace {

void Emit(RankProgram& program, int stage, ActionType type, int microbatch) {
  program.emplace_back(Action{stage, type, microbatch});
}

// GPipe: all forwards, then all backwards, both in microbatch order (the
// order ScheduleGPipe runs them in).
RankProgram GPipeRank(int rank, int m, RankProgram program) {
  program.clear();
  program.reserve(2 * m);
  for (int mb = 0; mb < m; ++mb) Emit(program, rank, ActionType::kForward, mb);
  for (int mb = 0; mb < m; ++mb) Emit(program, rank, ActionType::kFullBackward, mb);
  return program;
}

// 1F1B in the order Schedule1F1B's runtime issues it: min(m, p - s) warm-up
// forwards, then one backward / one forward until the forwards run out, then
// the remaining backwards.
RankProgram OneFOneBRank(int rank, int p, int m, RankProgram program) {
  program.clear();
  program.reserve(2 * m);
  const int warmup = std::min(m, p - rank);
  int fwd = 0;
  int bwd = 0;
  while (fwd < warmup) Emit(program, rank, ActionType::kForward, fwd++);
  while (bwd < m) {
    Emit(program, rank, ActionType::kFullBackward, bwd++);
    if (fwd < m) Emit(program, rank, ActionType::kForward, fwd++);
  }
  return program;
}

// Interleaved 1F1B and interleaved zero bubble (ZB1P), following PyTorch's
// _get_1f1b_rank_ops: the rank walks "ops"; op k runs a forward of local chunk
// (k / per_round) % v, and in steady state also a backward of the chunks in
// reverse order. The zero-bubble variant splits each backward into I and W and
// delays the W by `rank` ops so that it fills the bubble the lower ranks leave.
RankProgram InterleavedRank(int rank, int p, int m, int v, bool zero_bubble, RankProgram program) {
  const int rounds = std::max(1, m / p);
  const int per_round = m / rounds;
  const int hop_factor = zero_bubble ? 1 : 2;
  const int warmup = std::min((v - 1) * per_round + hop_factor * (p - 1 - rank), m * v);
  const int steady = m * v - warmup;
  const int total_ops = warmup + steady + warmup;

  auto fwd_local = [&](int op) { return (op / per_round) % v; };
  auto bwd_local = [&](int op) { return v - 1 - ((op - warmup) / per_round) % v; };
  std::vector<int> next_fwd(v, 0), next_bwd(v, 0), next_w(v, 0);
  std::vector<int> backward_chunks;  // local chunk of each backward, in order
  backward_chunks.reserve(m * v);
  size_t weights_done = 0;
  const ActionType backward_type =
      zero_bubble ? ActionType::kBackwardInput : ActionType::kFullBackward;

  program.clear();
  program.reserve(zero_bubble ? 3 * m * v : 2 * m * v);
  auto forward = [&](int op) {
    const int c = fwd_local(op);
    Emit(program, c * p + rank, ActionType::kForward, next_fwd[c]++);
  };
  auto backward = [&](int op) {
    const int c = bwd_local(op);
    Emit(program, c * p + rank, backward_type, next_bwd[c]++);
    backward_chunks.push_back(c);
    if (zero_bubble && op - warmup >= rank) {
      const int wc = backward_chunks[weights_done++];
      Emit(program, wc * p + rank, ActionType::kBackwardWeight, next_w[wc]++);
    }
  };
  for (int op = 0; op < total_ops; ++op) {
    if (op < warmup) {
      forward(op);
    } else if (op < warmup + steady) {
      forward(op);
      backward(op);
    } else {
      backward(op);
    }
  }
  while (zero_bubble && weights_done < backward_chunks.size()) {
    const int wc = backward_chunks[weights_done++];
    Emit(program, wc * p + rank, ActionType::kBackwardWeight, next_w[wc]++);
  }
  return program;
}

// Looped BFS: every local stage runs all its forwards before the next one
// starts (breadth first); backwards run the stages and microbatches in reverse.
RankProgram LoopedBfsRank(int rank, int p, int m, int v, RankProgram program) {
  program.clear();
  program.reserve(2 * m * v);
  for (int c = 0; c < v; ++c) {
    for (int mb = 0; mb < m; ++mb) Emit(program, c * p + rank, ActionType::kForward, mb);
  }
  for (int c = v - 1; c >= 0; --c) {
    for (int mb = m - 1; mb >= 0; --mb) {
      Emit(program, c * p + rank, ActionType::kFullBackward, mb);
    }
  }
  return program;
}

// ZB-V (Section 6 of the zero-bubble paper, as ScheduleZBVZeroBubble builds
// it). It is laid out for max(2p - 1, m) microbatches so the steady state is
// reached; actions of the padding microbatches are dropped afterwards.
RankProgram ZbvRank(int rank, int p, int m, RankProgram program) {
  const int n = std::max(2 * p - 1, m);
  const int chunk0 = rank;
  const int chunk1 = 2 * p - 1 - rank;
  program.clear();
  program.reserve(6 * n);
  auto emit = [&](int stage, ActionType type, int mb) {
    if (mb < m) Emit(program, stage, type, mb);
  };
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  for (int i = 0; i < 2 * (p - rank) - 1; ++i) emit(chunk0, ActionType::kForward, f0++);
  for (int i = 0; i < rank; ++i) {
    emit(chunk1, ActionType::kForward, f1++);
    emit(chunk0, ActionType::kForward, f0++);
  }
  for (int i = 0; i < p - rank; ++i) {
    emit(chunk1, ActionType::kForward, f1++);
    emit(chunk1, ActionType::kBackwardInput, b1);
    emit(chunk1, ActionType::kBackwardWeight, b1++);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) emit(chunk0, ActionType::kForward, f0++);
    emit(chunk0, ActionType::kBackwardInput, b0);
    emit(chunk0, ActionType::kBackwardWeight, b0++);
    emit(chunk1, ActionType::kForward, f1++);
    emit(chunk1, ActionType::kBackwardInput, b1);
    emit(chunk1, ActionType::kBackwardWeight, b1++);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    emit(chunk0, ActionType::kBackwardInput, b0++);
    emit(chunk1, ActionType::kBackwardInput, b1++);
  }
  for (int i = 0; i < p - rank; ++i) {
    emit(chunk0, ActionType::kBackwardInput, b0++);
    emit(chunk0, ActionType::kBackwardWeight, w0++);
  }
  while (w1 < b1) emit(chunk1, ActionType::kBackwardWeight, w1++);
  while (w0 < b0) emit(chunk0, ActionType::kBackwardWeight, w0++);
  return program;
}

// DualPipeV, following ScheduleDualPipeV (itself after DeepSeek's DualPipe):
// the V's two chunks run overlapped forward/backward pairs in steady state and
// fall back to split I/W backwards at the ends to fill bubbles.
class DualPipeVRank {
 public:
  DualPipeVRank(int rank, int p, int m, RankProgram program)
      : rank_(rank), p_(p), m_(m), program_(std::move(program)) {
    program_.clear();
    stage_[0] = rank;
    stage_[1] = 2 * p - 1 - rank;
  }

  RankProgram Build() {
    const int s0 = stage_[0], s1 = stage_[1];
    program_.reserve(4 * m_ + 8);
    for (int i = 0; i < 2 * (p_ - rank_ - 1); ++i) Add(s0, ActionType::kForward);
    for (int i = 0; i < rank_ + 1; ++i) {
      Add(s0, ActionType::kForward);
      Add(s1, ActionType::kForward);
    }
    for (int i = 0; i < p_ - rank_ - 1; ++i) {
      Add(s1, ActionType::kBackwardInput);
      AddPendingWeight();
      Add(s1, ActionType::kForward);
    }
    const int main_steps = m_ - 2 * p_ + rank_ + 1;
    for (int i = 0; i < main_steps; ++i) {
      if (i == 0 && rank_ == p_ - 1) {
        // The last rank holds both middle stages; PyTorch does not overlap this
        // first pair, which shortens the bubble.
        Add(s0, ActionType::kForward);
        Add(s1, ActionType::kFullBackward);
      } else {
        AddOverlap(s0, s1);
      }
      AddOverlap(s1, s0);
    }
    for (int i = 0; i < p_ - rank_ - 1; ++i) {
      Add(s1, ActionType::kFullBackward);
      AddOverlap(s1, s0);
    }
    const int tail = rank_ + 1;
    bool split = false;
    for (int i = 0; i < tail; ++i) {
      if (i == tail / 2 && rank_ % 2 == 1) split = true;
      Add(s1, split ? ActionType::kBackwardInput : ActionType::kFullBackward);
      if (i == tail / 2 && rank_ % 2 == 0) split = true;
      Add(s0, split ? ActionType::kBackwardInput : ActionType::kFullBackward);
    }
    for (int i = 0; i < p_ - rank_ - 1; ++i) {
      AddPendingWeight();
      Add(s0, split ? ActionType::kBackwardInput : ActionType::kFullBackward);
    }
    for (int i = 0; i < rank_ + 1; ++i) AddPendingWeight();
    return std::move(program_);
  }

 private:
  int Local(int stage) const { return stage == stage_[0] ? 0 : 1; }

  void Add(int stage, ActionType type) {
    const int c = Local(stage);
    if (type == ActionType::kForward) {
      Emit(program_, stage, type, next_fwd_[c]++);
      return;
    }
    const int mb = next_bwd_[c]++;
    Emit(program_, stage, type, mb);
    if (type == ActionType::kBackwardInput) pending_weights_.emplace_back(stage, mb);
  }

  void AddOverlap(int forward_stage, int backward_stage) {
    const int fwd_mb = next_fwd_[Local(forward_stage)]++;
    const int bwd_mb = next_bwd_[Local(backward_stage)]++;
    program_.emplace_back(MakeOverlap(forward_stage, fwd_mb, backward_stage, bwd_mb));
  }

  void AddPendingWeight() {
    if (pending_weights_.empty()) return;
    auto [stage, mb] = pending_weights_.front();
    pending_weights_.pop_front();
    Emit(program_, stage, ActionType::kBackwardWeight, mb);
  }

  int rank_, p_, m_;
  int stage_[2];
  int next_fwd_[2] = {0, 0};
  int next_bwd_[2] = {0, 0};
  std::deque<std::pair<int, int>> pending_weights_;
  RankProgram program_;
};

}  // namespace

namespace internal {

absl::Status CheckBuildParameters(ScheduleKind kind, int ranks, int microbatches,
                                  int chunks_per_rank) {
  const std::string_view name = ScheduleKindName(kind);
  if (ranks < 1 || microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s needs ranks >= 1 and microbatches >= 1, got ranks=%d microbatches=%d",
                        name, ranks, microbatches));
  }
  const int per_rank = StagesPerRank(kind, chunks_per_rank);
  if (per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s needs chunks_per_rank >= 1, got %d", name, chunks_per_rank));
  }
  // Keeps every stage*microbatch index and action count well inside int.
  if (int64_t{ranks} * per_rank * microbatches > (int64_t{1} << 26)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s with ranks=%d chunks_per_rank=%d microbatches=%d is too large to plan",
                        name, ranks, per_rank, microbatches));
  }
  if (int64_t{ranks} * per_rank > kMaxStages) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s with ranks=%d chunks_per_rank=%d has %d stages; at most %d are supported", name, ranks,
        per_rank, int64_t{ranks} * per_rank, kMaxStages));
  }
  if (kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kInterleavedZeroBubble) {
    const int rounds = std::max(1, microbatches / ranks);
    if (microbatches % rounds != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s needs the number of microbatches (%d) to be a multiple of the number of rounds "
          "max(1, microbatches / ranks) = %d; use e.g. a multiple of ranks=%d",
          name, microbatches, rounds, ranks));
    }
  }
  if (kind == ScheduleKind::kDualPipeV && microbatches < 2 * ranks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DualPipeV needs at least as many microbatches as stages (2 * ranks = %d), got %d",
        2 * ranks, microbatches));
  }

  return absl::OkStatus();
}

RankProgram BuildRankProgram(ScheduleKind kind, int rank, int ranks, int microbatches,
                             int chunks_per_rank, RankProgram reuse) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return GPipeRank(rank, microbatches, std::move(reuse));
    case ScheduleKind::k1F1B:
      return OneFOneBRank(rank, ranks, microbatches, std::move(reuse));
    case ScheduleKind::kInterleaved1F1B:
      return InterleavedRank(rank, ranks, microbatches, chunks_per_rank, false, std::move(reuse));
    case ScheduleKind::kInterleavedZeroBubble:
      return InterleavedRank(rank, ranks, microbatches, chunks_per_rank, true, std::move(reuse));
    case ScheduleKind::kLoopedBFS:
      return LoopedBfsRank(rank, ranks, microbatches, chunks_per_rank, std::move(reuse));
    case ScheduleKind::kZBVZeroBubble:
      return ZbvRank(rank, ranks, microbatches, std::move(reuse));
    case ScheduleKind::kDualPipeV:
      return DualPipeVRank(rank, ranks, microbatches, std::move(reuse)).Build();
  }
  return {};
}

}  // namespace internal

absl::Status BuildSchedule(ScheduleKind kind, int ranks, int microbatches, int chunks_per_rank,
                           PipelineSchedule* out) {
  if (absl::Status st = internal::CheckBuildParameters(kind, ranks, microbatches, chunks_per_rank);
      !st.ok()) {
    return st;
  }
  const int per_rank = StagesPerRank(kind, chunks_per_rank);
  out->num_ranks = ranks;
  out->num_stages = ranks * per_rank;
  out->num_microbatches = microbatches;
  out->stage_to_rank =
      IsVShaped(kind) ? VShapeStageToRank(ranks) : LoopedStageToRank(ranks, out->num_stages);
  out->programs.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    out->programs[r] = internal::BuildRankProgram(kind, r, ranks, microbatches, chunks_per_rank,
                                                  std::move(out->programs[r]));
  }
  return absl::OkStatus();
}

absl::StatusOr<PipelineSchedule> BuildSchedule(ScheduleKind kind, int ranks, int microbatches,
                                               int chunks_per_rank) {
  PipelineSchedule schedule;
  if (absl::Status st = BuildSchedule(kind, ranks, microbatches, chunks_per_rank, &schedule);
      !st.ok()) {
    return st;
  }
  return schedule;
}

}  // namespace pipeplan::schedule
