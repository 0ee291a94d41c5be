// What a plan's options mean for the cost model, the memory model and the
// schedule simulator: the one translation the search, calibration and the
// runtime model share, so that they all score a split the same way.
// Thread safety: plain functions.
#ifndef PIPEPLAN_CORE_PLAN_COSTS_H_
#define PIPEPLAN_CORE_PLAN_COSTS_H_

#include <span>

#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/memory_model.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan {

// The cost model's options for `microbatches` microbatches per replica of
// `replicas`: per-sample costs are rescaled to global_batch / (replicas x
// microbatches) samples when both the global batch and the graph's
// batch_size are known; tensor sizes follow the precision.
CostOptions CostOptionsFor(const Graph& graph, const PlanOptions& options, int microbatches,
                           int replicas = 1);

// The per-parameter memory of `options` for `graph` (memory_model.h).
TrainingMemory TrainingMemoryOf(const PlanOptions& options, const Graph& graph);

// Per-stage simulator costs of evaluated stages, communication charged inside
// each stage's time as the partitioners see it. Every caller that scores a
// split by simulation uses this, so scores agree.
schedule::StageCosts SimulatorCosts(std::span<const StageCost> stages);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLAN_COSTS_H_
