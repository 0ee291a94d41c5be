// CPU workers of one machine share its cores: which devices share which
// CPUs (from the workers' step reports, v1::CpuUse), what a compute costs
// alone on its pool, and how a plan's ranks load the pools.
//
// Four single-threaded workers on two cores run a compute at full speed
// while at most two compute and at half speed while four do. Measured
// compute times therefore carry the measured plan's overlap: a plan with
// fewer bubbles (data-parallel replicas, zero-bubble schedules) overlaps
// more and runs every action slower. SoloComputeTimes removes that from
// the measurements (each compute's seconds alone on its pool, from the
// reports' own timelines), and the simulator puts it back for any plan
// (schedule/shared_compute.h). docs/observability.md, "CPU workers share cores".
//
// Pure; no I/O.
#ifndef PIPEPLAN_CORE_CPU_POOLS_H_
#define PIPEPLAN_CORE_CPU_POOLS_H_

#include <map>
#include <span>
#include <string>
#include <vector>

#include "pipeplan/core/calibration.h"
#include "pipeplan/core/schedule/shared_compute.h"

namespace pipeplan {

struct CpuPools {
  struct Pool {
    std::string name;  // v1::CpuUse.pool: machine and CPU set
    double cpus = 0;
  };
  std::vector<Pool> pools;
  // Device id -> its pool (index into `pools`) and the threads one of its
  // computes keeps busy. Devices not listed do not share.
  std::map<std::string, int> device_pool;
  std::map<std::string, double> device_threads;

  bool empty() const { return device_pool.empty(); }
};

// The pools the samples' workers reported; a device's latest report (the
// highest step) wins. Samples without a pool, CPUs or threads are left out.
CpuPools CpuPoolsOf(std::span<const StepSample> samples);

// The samples with each compute's seconds replaced by its seconds alone on
// its pool: the wall time it ran, weighted at each instant by its share
// min(1, cpus / threads of the computes running in the pool). A compute
// runs until its rank reaches the next action (a compute's start_seconds is
// when the rank reached it, before it waited for its inputs). Samples of
// devices outside any pool, or without a wall-clock start, are unchanged.
std::vector<StepSample> SoloComputeTimes(std::vector<StepSample> samples, const CpuPools& pools);

// A pool's work over time: what each interval (wall-clock start, end, and
// the threads it keeps busy) would have taken alone on the pool's `cpus`.
struct PoolInterval {
  double start = 0, end = 0, threads = 1;
};

// The integral of the share min(1, cpus / threads running) over time, for
// intervals on one pool: SoloSeconds(i) is interval i's seconds alone.
class ShareIntegral {
 public:
  ShareIntegral(std::span<const PoolInterval> intervals, double cpus);
  // The integral from the first change of load up to `t`.
  double At(double t) const;
  double SoloSeconds(const PoolInterval& i) const { return At(i.end) - At(i.start); }

 private:
  std::vector<double> times_, areas_, shares_;
};

// How the ranks of `lowered` load the pools: rank r's stages run on
// `rank_devices[r]` (the rank's device in every replica; the first is the
// simulated replica's), and every replica's copy of the rank on the same
// pool computes at the same time. Empty when no rank's device is in a pool.
schedule::ComputeSharing SharingOf(const CpuPools& pools,
                                   const std::vector<std::vector<std::string>>& rank_devices);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_CPU_POOLS_H_
