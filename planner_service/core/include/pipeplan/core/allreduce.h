// The gradient all-reduce of one rank as it runs: its gradients are reduced
// over the rank's replica group in buckets of fixed size as its last
// microbatch's backward produces them (evenly over that backward), one bucket
// after another on the ring, each started when it is full and the previous
// bucket is done (PyTorch DDP with gradient accumulation: no_sync until the
// last microbatch). The last bucket starts when the backward ends, so at
// least its ring time is exposed.
//
// The buckets' ring times depend on the cluster only, their start on the
// step's timing: GradientBuckets prices them once, BucketsEnd places them
// after a simulated step (the search, and the as-run model for every sampled
// step, runtime_model.h).
//
// Thread safety: plain functions; no I/O.
#ifndef PIPEPLAN_CORE_ALLREDUCE_H_
#define PIPEPLAN_CORE_ALLREDUCE_H_

#include <span>
#include <vector>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan {

// When one replica's last backward on the rank produces gradients.
struct GradientWindow {
  double end = 0;      // the rank's last compute ends
  double seconds = 0;  // how long the backward that produces them runs
};

// One rank's buckets in the order they are reduced.
struct GradientBuckets {
  std::vector<double> ready_fraction;  // share of the rank's bytes filled when it is ready
  std::vector<double> ring_seconds;    // its all-reduce over the group
};

// The buckets of `bytes` over `group` (none for a group of one or no
// bytes); each ring time multiplied by `ring_scale` (a calibration), its
// links at `ring_bandwidth` bytes/s when that is above 0 (a measured
// ring's; the cluster's latencies kept). `bucket_bytes` <= 0:
// kDefaultBucketBytes. `ring_position`: see AllReduceRing (placement.h);
// the same times, found faster.
GradientBuckets MakeGradientBuckets(const Cluster& cluster, std::span<const int> group,
                                    double bytes, double bucket_bytes, double ring_scale = 1,
                                    std::span<const int> ring_position = {},
                                    double ring_bandwidth = 0);

// When the last bucket's all-reduce ends; `windows` has one entry per
// distinct replica (a bucket is ready once every replica filled it). With no
// buckets: the last compute's end.
double BucketsEnd(const GradientBuckets& buckets, std::span<const GradientWindow> windows);

// Whether the schedule computes weight gradients in actions of their own
// (zero-bubble): a rank's gradients are then produced by its last W.
bool SplitsWeightGradients(const schedule::PipelineSchedule& sched);

// When the rank's all-reduce of `bytes` over `group` ends: the two above.
double BucketedAllReduceEnd(const Cluster& cluster, std::span<const int> group, double bytes,
                            std::span<const GradientWindow> windows, double bucket_bytes,
                            std::span<const int> ring_position = {});

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_ALLREDUCE_H_
