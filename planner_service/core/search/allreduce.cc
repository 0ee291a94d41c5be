#include "allreduce.h"

#include <algorithm>
#include <cmath>

#include "pipeplan/core/placement.h"
#include "pipeplan/core/plan_options.h"

namespace pipeplan::search {
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

double BucketedAllReduceEnd(const Cluster& cluster, std::span<const int> group, double bytes,
                            std::span<const GradientWindow> windows, double bucket_bytes) {
  const double last_compute = ReadyAt(windows, 1);
  if (group.size() <= 1 || bytes <= 0) return last_compute;
  double bucket = bucket_bytes > 0 ? bucket_bytes : kDefaultBucketBytes;
  bucket = std::max(bucket, bytes / kMaxBuckets);
  const int full = static_cast<int>(std::floor(bytes / bucket));
  const double rest = bytes - full * bucket;
  const double full_seconds = full > 0 ? RingAllReduceSeconds(cluster, group, bucket) : 0;
  const int count = full + (rest > 0 ? 1 : 0);
  double end = 0;
  for (int i = 1; i <= count; ++i) {
    const bool partial = i > full;
    const double filled = partial ? bytes : i * bucket;
    const double seconds = partial ? RingAllReduceSeconds(cluster, group, rest) : full_seconds;
    end = std::max(end, ReadyAt(windows, std::min(1.0, filled / bytes))) + seconds;
  }
  return end;
}

}  // namespace pipeplan::search
