// The all-reduce probe: the ranks of a replica time a ring all-reduce of a
// few MB over their pipeline transport when a plan version starts, and
// every step report of the version carries the time. A plan without
// replicas never all-reduces gradients, and its activations (often tens of
// KB) price the links by their latency alone, so without the probe the
// planner would price a replicated plan's ring by extrapolating a
// bandwidth it never saw (docs/observability.md, "The ring is CPU work").
#ifndef PIPEPLAN_WORKER_TRANSPORT_ALLREDUCE_PROBE_H_
#define PIPEPLAN_WORKER_TRANSPORT_ALLREDUCE_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct AllReduceProbe {
  double bytes = 0;    // of one all-reduce (float32 values)
  double seconds = 0;  // the median of the timed calls
};

// One untimed ring all-reduce (RingAllReduceSum) of `bytes` over
// `transport` to line the ranks up, then three timed ones; returns their
// median. Every rank of the transport calls it at the same point with the
// same arguments; `epoch` (the plan version) keeps probes apart, and their
// calls sit at the top of RingAllReduceSum's call range, away from a
// step's gradient buckets. INVALID_ARGUMENT for bytes < 4 or a transport of
// one rank; otherwise the transport's errors (DEADLINE_EXCEEDED,
// UNAVAILABLE).
absl::StatusOr<AllReduceProbe> ProbeAllReduce(Transport& transport, int64_t bytes, uint64_t epoch,
                                              absl::Duration timeout);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TRANSPORT_ALLREDUCE_PROBE_H_
