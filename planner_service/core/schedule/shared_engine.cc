#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "engine.h"
#include "event_times.h"
#include "pipeplan/core/schedule/shared_compute.h"
#include "structure.h"

namespace pipeplan::schedule {

namespace {

absl::Status CheckEndWork(const ComputeSharing& sharing, size_t ranks) {
  if (!std::isfinite(sharing.end_work_load) || sharing.end_work_load <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("compute sharing: end_work_load is %g; it must be finite and positive",
                        sharing.end_work_load));
  }
  if (!sharing.rank_end_seconds.empty() && sharing.rank_end_seconds.size() != ranks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("compute sharing: rank_end_seconds has %d entries for %d ranks",
                        sharing.rank_end_seconds.size(), ranks));
  }
  for (size_t r = 0; r < sharing.rank_end_seconds.size(); ++r) {
    const double w = sharing.rank_end_seconds[r];
    if (!std::isfinite(w) || w < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compute sharing: rank %d has end work %g; it must be finite and >= 0", r, w));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool ComputeSharing::empty() const {
  return std::all_of(rank_pool.begin(), rank_pool.end(), [](int p) { return p == -1; });
}

absl::Status CheckComputeSharing(const ComputeSharing& sharing, int num_ranks) {
  const size_t ranks = static_cast<size_t>(std::max(num_ranks, 0));
  if (!sharing.rank_pool.empty() && sharing.rank_pool.size() != ranks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compute sharing: rank_pool has %d entries for %d ranks", sharing.rank_pool.size(), ranks));
  }
  // Without rank_pool nobody shares, so the loads may be left out.
  if (sharing.rank_load.size() != ranks &&
      !(sharing.rank_pool.empty() && sharing.rank_load.empty())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compute sharing: rank_load has %d entries for %d ranks", sharing.rank_load.size(), ranks));
  }
  const int pools = static_cast<int>(sharing.pool_capacity.size());
  for (int p = 0; p < pools; ++p) {
    const double c = sharing.pool_capacity[p];
    if (!std::isfinite(c) || c <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compute sharing: pool %d has capacity %g; it must be finite and positive", p, c));
    }
  }
  for (size_t r = 0; r < sharing.rank_pool.size(); ++r) {
    const int p = sharing.rank_pool[r];
    if (p < -1 || p >= pools) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compute sharing: rank %d is in pool %d; pools are -1 (none) to %d", r, p, pools - 1));
    }
  }
  for (size_t r = 0; r < sharing.rank_load.size(); ++r) {
    const double l = sharing.rank_load[r];
    if (!std::isfinite(l) || l <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compute sharing: rank %d has load %g; it must be finite and positive", r, l));
    }
  }
  return CheckEndWork(sharing, ranks);
}

namespace internal {
namespace {

// A time-ordered simulation: unlike Engine (engine.cc), which runs each rank
// as far as its inputs allow, a compute's end depends on what else runs in
// its pool meanwhile, so all ranks advance together through the instants at
// which some compute starts or ends. Between two such instants every running
// compute progresses at its pool's constant rate. Message posting follows
// Engine's rules (EventTimes), with one difference that keeps time ordered:
// a RECV whose SEND is not posted yet does not hold the rank's program (in
// Engine it only holds the simulation, never the rank's clock); the transfer
// lands when the SEND is posted.
//
// Expects what Engine expects, costs, and a sharing that passed
// CheckComputeSharing and is not empty (so rank_pool has one entry per rank).
class SharedEngine : private EventTimes {
 public:
  SharedEngine(const PipelineSchedule& s, bool comms, const StageCosts& costs,
               const ComputeSharing& sharing, bool record)
      : EventTimes(s, comms, &costs),
        sharing_(sharing),
        record_(record),
        cursor_(s.num_ranks, 0),
        clock_(s.num_ranks, 0.0),
        busy_(s.num_ranks, 0.0),
        blocked_(s.num_ranks, 0),
        start_(s.num_ranks, 0.0),
        remaining_(s.num_ranks, 0.0),
        load_(sharing.pool_capacity.size(), 0.0),
        end_begun_(s.num_ranks, 0),
        end_finish_(s.num_ranks, 0.0),
        pending_(static_cast<size_t>(2) * S_ * M_) {}

  absl::StatusOr<EngineRun> Run() {
    for (int r = s_.num_ranks - 1; r >= 0; --r) work_.push_back(r);
    while (true) {
      while (!work_.empty()) {
        const int r = work_.back();
        work_.pop_back();
        RunRank(r);
      }
      if (running_.empty() && starts_.empty()) break;
      Advance();
    }
    for (int r = 0; r < s_.num_ranks; ++r) {
      // The caller checked the order with Engine; a rank left over here is a
      // bug in this engine, not in the schedule.
      if (cursor_[r] < s_.programs[r].size()) {
        return absl::InternalError(
            absl::StrFormat("shared-pool simulation stalled at rank %d step %d", r, cursor_[r]));
      }
    }
    EngineRun run =
        FinishedRun(std::move(busy_), std::move(clock_), makespan_, std::move(timeline_));
    if (!sharing_.rank_end_seconds.empty()) run.end_work_finish_seconds = std::move(end_finish_);
    return run;
  }

 private:
  // A RECV posted before its SEND: when, and its step in the program.
  struct PendingRecv {
    double posted = -1;
    int step = 0;
  };
  using Start = std::pair<double, int>;  // (time, rank) of a compute to start

  const Action& Current(int r) const { return *s_.programs[r][cursor_[r]]; }
  bool Finished(int r) const { return cursor_[r] >= s_.programs[r].size(); }
  double EndWork(int r) const {
    return sharing_.rank_end_seconds.empty() ? 0.0 : sharing_.rank_end_seconds[r];
  }

  void Record(int rank, size_t step, const Action& a, double start, double end) {
    if (record_) timeline_.push_back({rank, static_cast<int>(step), a, start, end});
  }

  void Wake(int stage) {
    if (stage < 0 || stage >= S_) return;
    const int r = s_.stage_to_rank[stage];
    if (blocked_[r]) {
      blocked_[r] = 0;
      work_.push_back(r);
    }
  }

  // Runs rank r's messages up to its next compute, which it starts now or
  // schedules (its start no longer depends on anything), or blocks on.
  void RunRank(int r) {
    const RankProgram& program = s_.programs[r];
    for (size_t& cur = cursor_[r]; cur < program.size(); ++cur) {
      if (!program[cur]) continue;
      const Action& a = *program[cur];
      if (IsCommunication(a.type)) {
        if (!RunMessage(r, cur, a)) break;
        continue;
      }
      const double ready = ComputeReady(a);
      if (ready < 0) break;
      const double start = std::max({clock_[r], ready, now_});
      if (start > now_) {
        starts_.push({start, r});
      } else {
        Begin(r);
      }
      return;
    }
    if (cursor_[r] < program.size()) {
      blocked_[r] = 1;
    } else {
      StartEndWork(r);
    }
  }

  // A finished rank's end work, once: started (or scheduled) at its clock.
  void StartEndWork(int r) {
    if (end_begun_[r]) return;
    end_begun_[r] = 1;
    if (!(EndWork(r) > 0)) {
      end_finish_[r] = clock_[r];
      return;
    }
    const double start = std::max(clock_[r], now_);
    if (start > now_) {
      starts_.push({start, r});
    } else {
      Begin(r);
    }
  }

  void Begin(int r) {
    start_[r] = now_;
    remaining_[r] = Finished(r) ? EndWork(r) : Duration(Current(r));
    running_.push_back(r);
  }

  // False (nothing changed) only for a SEND whose data is not produced,
  // which a schedule that passed Engine never has.
  bool RunMessage(int r, size_t cur, const Action& a) {
    if (a.type == ActionType::kSendF || a.type == ActionType::kSendB) {
      const double post = PostSend(a, clock_[r]);
      if (post < 0) return false;
      clock_[r] = post + SendHost(a.stage);
      Record(r, cur, a, post, Arrival(a, post));
      const bool fwd = a.type == ActionType::kSendF;
      const Action recv{PeerStage(a), fwd ? ActionType::kRecvF : ActionType::kRecvB, a.microbatch};
      PendingRecv& pending = Pending(recv);
      if (pending.posted >= 0) {
        Land(recv, pending.posted, pending.step);
        pending.posted = -1;
        Wake(recv.stage);
      }
      return true;
    }
    if (LandRecv(a, clock_[r]) >= 0) {
      Land(a, clock_[r], static_cast<int>(cur));
    } else {
      Pending(a) = {clock_[r], static_cast<int>(cur)};
    }
    clock_[r] += RecvHost(a.stage);
    return true;
  }

  PendingRecv& Pending(const Action& recv) {
    const size_t dir = recv.type == ActionType::kRecvF ? 0 : 1;
    return pending_[(dir * S_ + recv.stage) * M_ + recv.microbatch];
  }

  // Records a RECV posted at `posted` whose SEND is posted (LandRecv >= 0).
  void Land(const Action& recv, double posted, int step) {
    const double end = LandRecv(recv, posted);
    makespan_ = std::max(makespan_, end);
    Record(s_.stage_to_rank[recv.stage], step, recv, posted, end);
  }

  // Progress per second of rank r's running compute: min(1, capacity / load)
  // of its pool, from the loads Advance has summed.
  double Rate(int r) const {
    const int p = sharing_.rank_pool[r];
    return p < 0 ? 1.0 : std::min(1.0, sharing_.pool_capacity[p] / load_[p]);
  }

  // Moves time to the next compute end or scheduled start and handles every
  // event of that instant.
  void Advance() {
    std::fill(load_.begin(), load_.end(), 0.0);
    for (int r : running_) {
      const int p = sharing_.rank_pool[r];
      if (p >= 0) load_[p] += sharing_.rank_load[r] * (Finished(r) ? sharing_.end_work_load : 1.0);
    }
    rate_.clear();
    double first_end = std::numeric_limits<double>::infinity();
    for (int r : running_) {
      rate_.push_back(Rate(r));
      first_end = std::min(first_end, remaining_[r] / rate_.back());
    }
    const bool ends = starts_.empty() || now_ + first_end <= starts_.top().first;
    const double next = ends ? now_ + first_end : starts_.top().first;
    const double elapsed = next - now_;
    now_ = next;
    // Compare against first_end itself (not elapsed, which is rounded) so the
    // compute that set the instant always ends at it.
    ended_.clear();
    size_t kept = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      const int r = running_[i];
      if (ends && remaining_[r] / rate_[i] <= first_end) {
        ended_.push_back(r);
      } else {
        // A near tie with the first end may round below zero: it ends at
        // the next call, at this same instant.
        remaining_[r] = std::max(0.0, remaining_[r] - elapsed * rate_[i]);
        running_[kept++] = r;
      }
    }
    running_.resize(kept);
    for (int r : ended_) Complete(r);
    while (!starts_.empty() && starts_.top().first <= now_) {
      Begin(starts_.top().second);
      starts_.pop();
    }
  }

  // Ends rank r's compute (already out of running_) now.
  void Complete(int r) {
    if (Finished(r)) {
      end_finish_[r] = now_;
      return;
    }
    const Action& a = Current(r);
    clock_[r] = now_;
    busy_[r] += now_ - start_[r];
    ForEachHalf(a, [&](const Action& half) { Wake(MarkDone(half, now_)); });
    Record(r, cursor_[r], a, start_[r], now_);
    ++cursor_[r];
    work_.push_back(r);
  }

  const ComputeSharing& sharing_;
  const bool record_;
  double now_ = 0;
  std::vector<size_t> cursor_;
  std::vector<double> clock_;  // when the rank is free for its next action
  std::vector<double> busy_;
  std::vector<char> blocked_;      // waiting for an input of its next compute
  std::vector<double> start_;      // of the rank's running compute
  std::vector<double> remaining_;  // work (seconds alone) of it left
  std::vector<double> load_;       // per pool, of the running computes
  std::vector<char> end_begun_;    // the rank's end work started (or had none)
  std::vector<double> end_finish_;
  std::vector<double> rate_;  // per running_ entry, during Advance
  std::vector<PendingRecv> pending_;
  std::vector<int> running_;  // ranks computing now
  std::vector<int> ended_;    // during Advance
  std::vector<int> work_;
  std::priority_queue<Start, std::vector<Start>, std::greater<Start>> starts_;
  double makespan_ = 0;
  std::vector<TimelineEvent> timeline_;
};

}  // namespace
}  // namespace internal

absl::StatusOr<SimulationResult> SimulateShared(const PipelineSchedule& schedule,
                                                const StageCosts& costs,
                                                const ComputeSharing& sharing,
                                                const SimulateOptions& options) {
  if (sharing.empty()) {
    absl::StatusOr<SimulationResult> plain = Simulate(schedule, costs, options);
    if (!plain.ok()) return plain;
    if (absl::Status st = CheckComputeSharing(sharing, schedule.num_ranks); !st.ok()) return st;
    // Nobody shares: each rank's end work runs at full speed.
    for (size_t r = 0; r < sharing.rank_end_seconds.size(); ++r) {
      plain->end_work_finish_seconds.push_back(plain->finish_seconds[r] +
                                               sharing.rank_end_seconds[r]);
    }
    return plain;
  }
  bool comms = false;
  if (absl::Status st = internal::CheckStructure(schedule, &comms); !st.ok()) return st;
  if (absl::Status st = CheckStageCosts(costs, schedule.num_stages); !st.ok()) return st;
  if (absl::Status st = CheckComputeSharing(sharing, schedule.num_ranks); !st.ok()) return st;
  // Deadlocks depend on the order alone. The ordering-only run of Engine
  // reports them as Simulate does; the shared engine, which never holds a
  // program at a RECV, would run some schedules that Simulate refuses.
  if (absl::StatusOr<internal::EngineRun> order =
          internal::Execute(schedule, comms, /*costs=*/nullptr, /*record_timeline=*/false);
      !order.ok()) {
    return order.status();
  }
  absl::StatusOr<internal::EngineRun> run =
      internal::SharedEngine(schedule, comms, costs, sharing, options.record_timeline).Run();
  if (!run.ok()) return run.status();
  return internal::ResultOf(schedule, costs, *std::move(run));
}

}  // namespace pipeplan::schedule
