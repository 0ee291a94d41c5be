#include "pipeplan/core/allreduce.h"

#include <algorithm>
#include <cmath>

#include "pipeplan/core/placement.h"
#include "pipeplan/core/plan_options.h"

namespace pipeplan {
namespace {

// More buckets than this are merged: the step would be all latency anyway.
constexpr double kMaxBuckets = 4096;

// When the gradients up to `fraction` of the rank's bytes exist in every
// replica.
double ReadyAt(std::span<const GradientWindow> windows, double fraction) {
  double ready = 0;
  for (const GradientWindow& w : windows) {
    ready = std::max(ready, w.end - w.seconds * (1 - fraction));
  }
  return ready;
}

}  // namespace

GradientBuckets MakeGradientBuckets(const Cluster& cluster, std::span<const int> group,
                                    double bytes, double bucket_bytes, double ring_scale,
                                    std::span<const int> ring_position, double ring_bandwidth) {
  GradientBuckets out;
  if (group.size() <= 1 || bytes <= 0) return out;
  AllReduceRing ring(cluster, group, ring_position);
  if (ring_bandwidth > 0) ring.SetBandwidth(ring_bandwidth);
  double bucket = bucket_bytes > 0 ? bucket_bytes : kDefaultBucketBytes;
  bucket = std::max(bucket, bytes / kMaxBuckets);
  const int full = static_cast<int>(std::floor(bytes / bucket));
  const double rest = bytes - full * bucket;
  const double full_seconds = full > 0 ? ring.Seconds(bucket) : 0;
  for (int i = 1; i <= full; ++i) {
    out.ready_fraction.push_back(std::min(1.0, i * bucket / bytes));
    out.ring_seconds.push_back(full_seconds * ring_scale);
  }
  if (rest > 0) {
    out.ready_fraction.push_back(1.0);
    out.ring_seconds.push_back(ring.Seconds(rest) * ring_scale);
  }
  return out;
}

double BucketsEnd(const GradientBuckets& buckets, std::span<const GradientWindow> windows) {
  if (buckets.ring_seconds.empty()) return ReadyAt(windows, 1);
  double end = 0;
  for (size_t i = 0; i < buckets.ring_seconds.size(); ++i) {
    end = std::max(end, ReadyAt(windows, buckets.ready_fraction[i])) + buckets.ring_seconds[i];
  }
  return end;
}

bool SplitsWeightGradients(const schedule::PipelineSchedule& sched) {
  for (const schedule::RankProgram& program : sched.programs) {
    for (const auto& action : program) {
      if (action && action->type == schedule::ActionType::kBackwardWeight) return true;
    }
  }
  return false;
}

double BucketedAllReduceEnd(const Cluster& cluster, std::span<const int> group, double bytes,
                            std::span<const GradientWindow> windows, double bucket_bytes,
                            std::span<const int> ring_position) {
  return BucketsEnd(MakeGradientBuckets(cluster, group, bytes, bucket_bytes, 1, ring_position),
                    windows);
}

}  // namespace pipeplan
