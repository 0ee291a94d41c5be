// The gradient all-reduce of one rank as it runs: its gradients are reduced
// over the rank's replica group in buckets of fixed size as its last
// microbatch's backward produces them (evenly over that backward), one bucket
// after another on the ring, each started when it is full and the previous
// bucket is done (PyTorch DDP with gradient accumulation: no_sync until the
// last microbatch). The last bucket starts when the backward ends, so at
// least its ring time is exposed.
//
// Internal to the planner. Thread safety: plain functions.
#ifndef PIPEPLAN_CORE_SEARCH_ALLREDUCE_H_
#define PIPEPLAN_CORE_SEARCH_ALLREDUCE_H_

#include <span>

#include "pipeplan/core/cluster.h"

namespace pipeplan::search {

// When one replica's last backward on the rank produces gradients.
struct GradientWindow {
  double end = 0;      // the rank's last compute ends
  double seconds = 0;  // how long the backward that produces them runs
};

// When the rank's all-reduce of `bytes` over `group` ends; `windows` has one
// entry per distinct replica (a bucket is ready once every replica filled
// it). `bucket_bytes` <= 0: kDefaultBucketBytes.
double BucketedAllReduceEnd(const Cluster& cluster, std::span<const int> group, double bytes,
                            std::span<const GradientWindow> windows, double bucket_bytes);

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_ALLREDUCE_H_
