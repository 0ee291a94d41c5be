// Per-stage costs that drive the schedule simulator.
//
// The planner fills these from its cost model (or from measured timings) for a
// candidate partition; the simulator turns them into step time, bubble and
// memory. Transfers only ever go between neighbouring stages, so a vector per
// stage boundary is enough; a boundary whose two stages share a rank costs
// nothing regardless of the value given.
#ifndef PIPEPLAN_CORE_SCHEDULE_STAGE_COSTS_H_
#define PIPEPLAN_CORE_SCHEDULE_STAGE_COSTS_H_

#include <vector>

#include "absl/status/status.h"

namespace pipeplan::schedule {

struct StageCosts {
  // Seconds per microbatch, indexed by stage. A full backward B costs
  // backward_input + backward_weight; an OVERLAP_F_B costs F + B (the overlap
  // hides communication the simulator does not model, not compute).
  std::vector<double> forward;
  std::vector<double> backward_input;
  std::vector<double> backward_weight;
  // Bytes, indexed by stage: resident parameters (plus optimizer state if the
  // caller wants it counted) and activations kept per in-flight microbatch.
  // Empty means zero.
  std::vector<double> param_bytes;
  std::vector<double> activation_bytes;
  // Seconds to move one microbatch across boundary b (stage b <-> b + 1):
  // activations forward, gradients backward. Size num_stages - 1, or empty for
  // free communication.
  std::vector<double> forward_transfer;
  std::vector<double> backward_transfer;
  // Host seconds a rank spends posting one SEND (send_host) or one RECV
  // (recv_host) of stage s (the worker's synchronous part of a message:
  // host_overhead.h), indexed by stage. Apart because a SEND writes what it
  // can of the message in the caller's thread and a RECV mostly does not.
  // The rank's clock advances by it; it is not compute, so it counts as
  // bubble. Empty means free posting.
  std::vector<double> send_host;
  std::vector<double> recv_host;

  // Same costs for every stage; communication free, memory zero.
  static StageCosts Uniform(int num_stages, double forward, double backward_input,
                            double backward_weight);
};

// Sizes match num_stages and every value is finite and non-negative.
absl::Status CheckStageCosts(const StageCosts& costs, int num_stages);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_STAGE_COSTS_H_
