// The end of a step: every rank's optimizer update, after the ranks agree.
//
// The torch executor's EndStep reduces the replicas' gradients, then all
// ranks agree on clipping and on skipping a non-finite step (a collective
// over every rank), then each rank runs its optimizer over its own
// parameters. The step therefore ends when the rank with the most to
// update is done: the last rank to arrive plus the longest update, not the
// last rank's own update. On ResNet-18 (64x64 images, 4 CPU workers) the
// stage holding 36 MB of layer4's weights updated for 60-80 ms after the
// others agreed, the stage holding 0.5 MB for 1-5 ms, and the step lasted
// until the long one ended (docs/observability.md, "The step ends with the
// largest update").
//
// FitUpdates reads, per step, when each rank arrived (its EndStep start,
// plus its exposed replica all-reduce), when the last one did (the
// agreement) and when each finished, and fits a rank's update seconds
// alone on its CPUs = fixed + rate x the parameter bytes of its stages
// (a repeated-median line over the ranks; through zero when the ranks
// hold alike bytes). Updates of workers that share CPUs run side by side
// after the agreement, so each is read back to its seconds alone by
// processor sharing, and UpdateTailSeconds puts a plan's own sharing back.
// Executors without an agreement (a rank ending its step before the last
// one arrived, in most steps) leave the fit unfitted: their end is the
// least EndStep (stage_time_fit.h).
//
// Pure; no I/O.
#ifndef PIPEPLAN_CORE_UPDATE_FIT_H_
#define PIPEPLAN_CORE_UPDATE_FIT_H_

#include <span>
#include <vector>

#include "pipeplan/core/calibration.h"
#include "pipeplan/core/schedule/shared_compute.h"

namespace pipeplan {

struct UpdateFit {
  bool fitted = false;
  // A rank's update alone on its CPUs: fixed + per byte x its parameter bytes.
  double fixed_seconds = 0;
  double seconds_per_param_byte = 0;

  double SoloSeconds(double param_bytes) const {
    return fixed_seconds + seconds_per_param_byte * param_bytes;
  }
};

// `samples` of one plan version (warm-up dropped, compute times as
// measured or solo: only the step's clock and EndStep are read);
// `stage_param_bytes` per stage of its plan (a report's rank holds the
// stages its actions name). Steps where a rank lacks a wall-clock start are
// skipped; fewer than two ranks, or no agreement, leave it unfitted.
UpdateFit FitUpdates(std::span<const StepSample> samples,
                     std::span<const double> stage_param_bytes);

// Seconds from the agreement to the last update's end, for ranks holding
// `rank_param_bytes` (one per rank of one replica) under `sharing` (empty:
// each rank updates on its own CPUs; replicas share a pool as
// ComputeSharing's loads say).
double UpdateTailSeconds(const UpdateFit& fit, std::span<const double> rank_param_bytes,
                         const schedule::ComputeSharing& sharing);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_UPDATE_FIT_H_
