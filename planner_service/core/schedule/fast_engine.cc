// Simulate's fast path. Same semantics as Engine (engine.cc) without the
// timeline, fused with CheckStructure's accounting and the memory count, so
// that a valid schedule is read once. Kept deliberately close to Engine; the
// differential test in simulator_test.cc holds the two together.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine.h"
#include "structure.h"

namespace pipeplan::schedule::internal {
namespace {

// Event times of one (stage, microbatch). "bwd" is the input gradient (I or
// B finished). A time is only meaningful once its bit in the (stage,
// microbatch)'s flags is set, so the array is never initialised: only the
// flags (one byte per cell) are cleared per run.
struct Events {
  double fwd, bwd, sent_f, sent_b, recv_f, recv_b;
};

// Structure bits of one (stage, microbatch); each also says that the event
// time of the same name exists.
enum : uint8_t {
  kHasF = 1,
  kHasBwd = 2,
  kHasI = 4,
  kHasW = 8,
  kHasSendF = 16,
  kHasRecvF = 32,
  kHasSendB = 64,
  kHasRecvB = 128,
};

struct StageInfo {
  int rank;
  bool local_prev;  // stage - 1 exists and shares the rank
  bool local_next;  // stage + 1 exists and shares the rank
  bool cross_prev;  // stage - 1 exists on another rank
  bool cross_next;  // stage + 1 exists on another rank
  double f, i, w, b;
  double xfer_f;  // boundary (stage, stage + 1)
  double xfer_b;
  double act_bytes;
};

// One direction of a cross-rank hop between adjacent stages. SEND and RECV
// of either direction run the same steps on these fields.
struct Hop {
  int index;                          // into the engine's per-direction counts
  int to;                             // receiving stage - sending stage
  bool StageInfo::*sender_crosses;    // the receiver is on another rank
  bool StageInfo::*receiver_crosses;  // the sender is on another rank
  uint8_t produced_bit;               // what the send carries
  double Events::*produced;
  uint8_t sent_bit;
  double Events::*sent;
  uint8_t recv_bit;
  double Events::*recv;
  double StageInfo::*xfer;  // kept by the boundary's lower stage
};
constexpr Hop kHops[] = {
    // Forward: a stage's activations go to stage + 1.
    {0, 1, &StageInfo::cross_next, &StageInfo::cross_prev, kHasF, &Events::fwd, kHasSendF,
     &Events::sent_f, kHasRecvF, &Events::recv_f, &StageInfo::xfer_f},
    // Backward: its input gradients go to stage - 1.
    {1, -1, &StageInfo::cross_prev, &StageInfo::cross_next, kHasBwd, &Events::bwd, kHasSendB,
     &Events::sent_b, kHasRecvB, &Events::recv_b, &StageInfo::xfer_b}};
constexpr const Hop& kForwardHop = kHops[0];
constexpr const Hop& kBackwardHop = kHops[1];

// Per-thread scratch, reused so that repeated simulations (the planner's
// search loop) neither page-fault nor allocate after the first.
struct Scratch {
  std::vector<Events> events;
  std::vector<uint8_t> flags;
  std::vector<StageInfo> stages;
  std::vector<int> stage_inflight;
  std::vector<size_t> cursor;
  std::vector<double> clock;
  std::vector<char> blocked;
  // What a blocked rank waits for: the (stage, microbatch) cell and the bit.
  std::vector<size_t> wait_cell;
  std::vector<uint8_t> wait_bit;
  std::vector<int> work;
  struct RankMemory {
    int inflight = 0, peak = 0;
    double bytes = 0, peak_bytes = 0;
  };
  std::vector<RankMemory> memory;

  // Gives back the big buffers after an unusually large schedule.
  void Trim() {
    constexpr size_t kKeepBytes = size_t{256} << 20;
    if (events.capacity() * sizeof(Events) > kKeepBytes) {
      events = {};
      flags = {};
    }
  }
};

class FastEngine {
 public:
  FastEngine(const PipelineSchedule& s, const StageCosts& costs, Scratch& scratch,
             SimulationResult& out)
      : s_(s), costs_(costs), x_(scratch), out_(out), S_(s.num_stages), M_(s.num_microbatches) {}

  bool Run() {
    Prepare();
    if (!RunRanks() || !EveryActionRan()) return false;
    Report();
    return true;
  }

 private:
  // Resets the scratch for this schedule and reads each stage's costs and
  // neighbours.
  void Prepare() {
    const int p = s_.num_ranks;
    comms_ = s_.HasCommunication();
    const size_t cells = static_cast<size_t>(S_) * M_;
    if (x_.events.size() < cells) x_.events.resize(cells);
    x_.flags.assign(cells, 0);
    events_ = x_.events.data();
    flags_ = x_.flags.data();
    x_.stages.resize(S_);
    stages_ = x_.stages.data();
    crossings_ = 0;
    for (int st = 0; st < S_; ++st) ReadStage(st);
    x_.stage_inflight.assign(S_, 0);
    x_.cursor.assign(p, 0);
    x_.clock.assign(p, 0.0);
    x_.blocked.assign(p, 0);
    x_.wait_cell.assign(p, 0);
    x_.wait_bit.assign(p, 0);
    x_.memory.assign(p, {});
    out_.busy_seconds.assign(p, 0.0);
    out_.peak_inflight_per_stage.assign(S_, 0);
  }

  void ReadStage(int st) {
    StageInfo& info = stages_[st];
    info.rank = s_.stage_to_rank[st];
    info.local_prev = st > 0 && s_.stage_to_rank[st - 1] == info.rank;
    info.local_next = st + 1 < S_ && s_.stage_to_rank[st + 1] == info.rank;
    info.cross_prev = st > 0 && !info.local_prev;
    info.cross_next = st + 1 < S_ && !info.local_next;
    crossings_ += info.cross_next;
    info.f = costs_.forward[st];
    info.i = costs_.backward_input[st];
    info.w = costs_.backward_weight[st];
    info.b = info.i + info.w;
    info.xfer_f = st + 1 < S_ && !costs_.forward_transfer.empty() ? costs_.forward_transfer[st] : 0;
    info.xfer_b =
        st + 1 < S_ && !costs_.backward_transfer.empty() ? costs_.backward_transfer[st] : 0;
    info.act_bytes = costs_.activation_bytes.empty() ? 0.0 : costs_.activation_bytes[st];
  }

  // Runs ranks until each has finished or waits; false on an invalid action
  // or a deadlock.
  bool RunRanks() {
    const int p = s_.num_ranks;
    std::vector<int>& work = x_.work;
    work.clear();
    for (int r = p - 1; r >= 0; --r) work.push_back(r);
    while (!work.empty()) {
      const int r = work.back();
      work.pop_back();
      if (!RunRank(r)) {
        if (bad_) return false;
        x_.blocked[r] = 1;
        x_.wait_cell[r] = miss_cell_;
        x_.wait_bit[r] = miss_bit_;
      }
    }
    for (int r = 0; r < p; ++r) {
      if (x_.cursor[r] < s_.programs[r].size()) return false;  // deadlock
    }
    return true;
  }

  // Structure: with no duplicates (checked as each action ran), the counts
  // say every (stage, microbatch) got its F and backward, every W had its I,
  // and every cross-rank hop got its four communication actions.
  bool EveryActionRan() const {
    const int64_t cells = int64_t{S_} * M_;
    const int64_t hops = comms_ ? int64_t{crossings_} * M_ : 0;
    return n_f_ == cells && n_bwd_ == cells && n_i_ == n_w_ && n_send_[0] == hops &&
           n_recv_[0] == hops && n_send_[1] == hops && n_recv_[1] == hops;
  }

  // Step time, idle time and bubble, peak memory per rank.
  void Report() {
    const int p = s_.num_ranks;
    double makespan = makespan_;
    for (double c : x_.clock) makespan = std::max(makespan, c);
    out_.step_seconds = makespan;
    out_.finish_seconds.assign(x_.clock.begin(), x_.clock.end());
    out_.idle_seconds.resize(p);
    double idle = 0;
    for (int r = 0; r < p; ++r) {
      out_.idle_seconds[r] = makespan - out_.busy_seconds[r];
      idle += out_.idle_seconds[r];
    }
    out_.bubble_ratio = makespan > 0 ? idle / (p * makespan) : 0;
    std::vector<double> params(p, 0);
    if (!costs_.param_bytes.empty()) {
      for (int st = 0; st < S_; ++st) params[stages_[st].rank] += costs_.param_bytes[st];
    }
    out_.peak_inflight_microbatches.resize(p);
    out_.peak_memory_bytes.resize(p);
    for (int r = 0; r < p; ++r) {
      out_.peak_inflight_microbatches[r] = x_.memory[r].peak;
      out_.peak_memory_bytes[r] = params[r] + x_.memory[r].peak_bytes;
    }
    out_.timeline.clear();
  }

  Events& At(int stage, int mb) { return events_[static_cast<size_t>(stage) * M_ + mb]; }
  uint8_t& Flags(int stage, int mb) { return flags_[static_cast<size_t>(stage) * M_ + mb]; }
  // The event's time, or -1 if it has not happened.
  double Time(int stage, int mb, uint8_t bit, double Events::*field) {
    const size_t i = static_cast<size_t>(stage) * M_ + mb;
    if (flags_[i] & bit) return events_[i].*field;
    miss_cell_ = i;
    miss_bit_ = bit;
    return -1;
  }
  // Whether the event exists; if not, remembers it as what the rank waits for.
  bool Has(int stage, int mb, uint8_t bit) {
    const size_t i = static_cast<size_t>(stage) * M_ + mb;
    if (flags_[i] & bit) return true;
    miss_cell_ = i;
    miss_bit_ = bit;
    return false;
  }

  // Sets `bit` for (stage, mb); false if it was already set (a duplicate).
  bool Claim(int stage, int mb, uint8_t bit) {
    uint8_t& f = Flags(stage, mb);
    if (f & bit) return false;
    f |= bit;
    return true;
  }

  // Event `bit` of (st, mb) just happened: resumes the rank owning `stage`
  // if it is blocked on exactly that event. (Engine wakes it on any event of
  // the hop; resuming only the rank that can progress saves most resumes.
  // Only the neighbour stage's rank can wait on an event: the other readers
  // run on the producing rank itself.)
  void Wake(int stage, int st, int mb, uint8_t bit) {
    if (static_cast<unsigned>(stage) >= static_cast<unsigned>(S_)) return;
    const int r = stages_[stage].rank;
    if (x_.blocked[r] && x_.wait_bit[r] == bit &&
        x_.wait_cell[r] == static_cast<size_t>(st) * M_ + mb) {
      x_.blocked[r] = 0;
      x_.work.push_back(r);
    }
  }

  // Engine::InputsReady for a simple compute action whose indices are valid.
  double InputsReady(ActionType type, int st, int mb) {
    const StageInfo& info = stages_[st];
    switch (type) {
      case ActionType::kForward: {
        if (st == 0) return 0;
        if (info.local_prev) return Time(st - 1, mb, kHasF, &Events::fwd);
        if (comms_) return Time(st, mb, kHasRecvF, &Events::recv_f);
        const double t = Time(st - 1, mb, kHasF, &Events::fwd);
        return t < 0 ? -1 : t + stages_[st - 1].xfer_f;
      }
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward: {
        const double f = Time(st, mb, kHasF, &Events::fwd);
        if (f < 0 || st == S_ - 1) return f;
        double g;
        if (info.local_next) {
          g = Time(st + 1, mb, kHasBwd, &Events::bwd);
        } else if (comms_) {
          g = Time(st, mb, kHasRecvB, &Events::recv_b);
        } else {
          g = Time(st + 1, mb, kHasBwd, &Events::bwd);
          if (g >= 0) g += info.xfer_b;
        }
        return g < 0 ? -1 : std::max(f, g);
      }
      case ActionType::kBackwardWeight:
        return Time(st, mb, kHasBwd, &Events::bwd);
      default:
        return -1;
    }
  }

  // Structure bookkeeping and memory count of a compute half that just ran on
  // rank r; false on a duplicate or a W without its I.
  bool Account(Scratch::RankMemory& mem, ActionType type, int st, int mb) {
    switch (type) {
      case ActionType::kForward: {
        if (!Claim(st, mb, kHasF)) return false;
        ++n_f_;
        ++mem.inflight;
        mem.bytes += stages_[st].act_bytes;
        int& per_stage = x_.stage_inflight[st];
        int& peak_stage = out_.peak_inflight_per_stage[st];
        peak_stage = std::max(peak_stage, ++per_stage);
        mem.peak = std::max(mem.peak, mem.inflight);
        mem.peak_bytes = std::max(mem.peak_bytes, mem.bytes);
        return true;
      }
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward: {
        const uint8_t bits = type == ActionType::kBackwardInput ? kHasBwd | kHasI : kHasBwd;
        if (!Claim(st, mb, kHasBwd)) return false;
        Flags(st, mb) |= bits;
        ++n_bwd_;
        n_i_ += type == ActionType::kBackwardInput;
        --mem.inflight;
        mem.bytes -= stages_[st].act_bytes;
        --x_.stage_inflight[st];
        return true;
      }
      case ActionType::kBackwardWeight:
        if (!(Flags(st, mb) & kHasI) || !Claim(st, mb, kHasW)) return false;
        ++n_w_;
        return true;
      default:
        return false;
    }
  }

  // Engine::Finish.
  void Finish(ActionType type, int st, int mb, double end) {
    if (type == ActionType::kForward) {
      At(st, mb).fwd = end;
      Wake(st + 1, st, mb, kHasF);
    } else if (type != ActionType::kBackwardWeight) {
      At(st, mb).bwd = end;
      Wake(st - 1, st, mb, kHasBwd);
    }
  }

  bool InRange(int r, int st, int mb) const {
    return static_cast<unsigned>(st) < static_cast<unsigned>(S_) &&
           static_cast<unsigned>(mb) < static_cast<unsigned>(M_) && stages_[st].rank == r;
  }

  // What running one action did: done, blocked waiting for another rank, or
  // found the schedule malformed.
  enum class Step { kDone, kBlocked, kBad };

  // A rank's clock, busy time and memory while it runs.
  struct RankClock {
    double clock, busy;
    Scratch::RankMemory mem;
  };

  // Runs rank r until it finishes (true) or blocks (false; bad_ set if the
  // schedule is malformed rather than just waiting).
  bool RunRank(int r) {
    const RankProgram& program = s_.programs[r];
    const std::optional<Action>* slots = program.data();
    const size_t n = program.size();
    size_t cur = x_.cursor[r];
    RankClock rc{x_.clock[r], out_.busy_seconds[r], x_.memory[r]};
    bool finished = false;
    for (;; ++cur) {
      if (cur == n) {
        finished = true;
        break;
      }
      // Ranks run in short bursts, so their program streams are cold on
      // resume; fetching ahead hides the latency.
      __builtin_prefetch(
          reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(slots + cur) + 384));
      if (!slots[cur]) continue;
      const Step step = Execute(r, *slots[cur], rc);
      if (step == Step::kDone) continue;
      if (step == Step::kBad) bad_ = true;
      break;
    }
    x_.cursor[r] = cur;
    x_.clock[r] = rc.clock;
    out_.busy_seconds[r] = rc.busy;
    x_.memory[r] = rc.mem;
    return finished;
  }

  // One action of rank r. A blocked or bad action leaves the rank's clock
  // as it got it (or, past its start, as the action left it).
  Step Execute(int r, const Action& a, RankClock& rc) {
    if (a.type == ActionType::kOverlapFB) return RunOverlap(r, a, rc);
    const int st = a.stage, mb = a.microbatch;
    if (!InRange(r, st, mb)) return Step::kBad;
    switch (a.type) {
      case ActionType::kForward:
      case ActionType::kBackwardInput:
      case ActionType::kBackwardWeight:
      case ActionType::kFullBackward:
        return RunCompute(a.type, st, mb, rc);
      case ActionType::kSendF:
        return Send(kForwardHop, st, mb, rc.clock);
      case ActionType::kSendB:
        return Send(kBackwardHop, st, mb, rc.clock);
      case ActionType::kRecvF:
        return Recv(kForwardHop, st, mb, rc.clock);
      case ActionType::kRecvB:
        return Recv(kBackwardHop, st, mb, rc.clock);
      case ActionType::kOverlapFB:
        break;  // handled above
    }
    return Step::kDone;
  }

  // A forward of one microbatch overlapped with a full backward of another.
  Step RunOverlap(int r, const Action& a, RankClock& rc) {
    const int st = a.stage, mb = a.microbatch;
    const int bs = a.backward_stage, bmb = a.backward_microbatch;
    if (!InRange(r, st, mb) || !InRange(r, bs, bmb)) return Step::kBad;
    const double ready_f = InputsReady(ActionType::kForward, st, mb);
    if (ready_f < 0) return Step::kBlocked;
    const double ready_b = InputsReady(ActionType::kFullBackward, bs, bmb);
    if (ready_b < 0) return Step::kBlocked;
    const double start = std::max({rc.clock, ready_f, ready_b});
    const double dur = stages_[st].f + stages_[bs].b;
    rc.clock = start + dur;
    rc.busy += dur;
    if (!Account(rc.mem, ActionType::kForward, st, mb) ||
        !Account(rc.mem, ActionType::kFullBackward, bs, bmb)) {
      return Step::kBad;
    }
    Finish(ActionType::kForward, st, mb, rc.clock);
    Finish(ActionType::kFullBackward, bs, bmb, rc.clock);
    return Step::kDone;
  }

  // F, I, W or B of one microbatch.
  Step RunCompute(ActionType type, int st, int mb, RankClock& rc) {
    const double ready = InputsReady(type, st, mb);
    if (ready < 0) return Step::kBlocked;
    const StageInfo& info = stages_[st];
    const double start = std::max(rc.clock, ready);
    const double dur = type == ActionType::kForward          ? info.f
                       : type == ActionType::kBackwardInput  ? info.i
                       : type == ActionType::kBackwardWeight ? info.w
                                                             : info.b;
    rc.clock = start + dur;
    rc.busy += dur;
    if (!Account(rc.mem, type, st, mb)) return Step::kBad;
    Finish(type, st, mb, rc.clock);
    return Step::kDone;
  }

  // Posts the hop's data at `clock`, or when stage st produces it if later.
  Step Send(const Hop& h, int st, int mb, double clock) {
    if (!(stages_[st].*h.sender_crosses)) return Step::kBad;
    Events& e = At(st, mb);
    if (!Has(st, mb, h.produced_bit)) return Step::kBlocked;
    if (!Claim(st, mb, h.sent_bit)) return Step::kBad;
    ++n_send_[h.index];
    e.*h.sent = std::max(clock, e.*h.produced);
    Wake(st + h.to, st, mb, h.sent_bit);
    return Step::kDone;
  }

  // The data arrives one transfer after the later of its send and `clock`.
  Step Recv(const Hop& h, int st, int mb, double clock) {
    if (!(stages_[st].*h.receiver_crosses)) return Step::kBad;
    const int from = st - h.to;
    const double sent = Time(from, mb, h.sent_bit, h.sent);
    if (sent < 0) return Step::kBlocked;
    if (!Claim(st, mb, h.recv_bit)) return Step::kBad;
    ++n_recv_[h.index];
    const double end = std::max(clock, sent) + stages_[std::min(st, from)].*h.xfer;
    At(st, mb).*h.recv = end;
    makespan_ = std::max(makespan_, end);
    return Step::kDone;
  }

  const PipelineSchedule& s_;
  const StageCosts& costs_;
  Scratch& x_;
  SimulationResult& out_;
  const int S_, M_;
  bool comms_ = false;
  bool bad_ = false;
  int crossings_ = 0;
  size_t miss_cell_ = 0;
  uint8_t miss_bit_ = 0;
  Events* events_ = nullptr;
  uint8_t* flags_ = nullptr;
  StageInfo* stages_ = nullptr;
  double makespan_ = 0;
  int64_t n_f_ = 0, n_bwd_ = 0, n_i_ = 0, n_w_ = 0;
  // Per hop direction (Hop::index): SENDs and RECVs run.
  int64_t n_send_[2] = {}, n_recv_[2] = {};
};

}  // namespace

bool SimulateFast(const PipelineSchedule& schedule, const StageCosts& costs,
                  SimulationResult& out) {
  thread_local Scratch scratch;
  const bool ok = FastEngine(schedule, costs, scratch, out).Run();
  scratch.Trim();
  return ok;
}

}  // namespace pipeplan::schedule::internal
