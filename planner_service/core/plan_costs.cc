#include "pipeplan/core/plan_costs.h"

#include <algorithm>

namespace pipeplan {

TrainingMemory TrainingMemoryOf(const PlanOptions& options, const Graph& graph) {
  return TrainingMemoryFor(options.optimizer, options.precision, options.optimizer_state_multiplier,
                           graph.element_bytes());
}

CostOptions CostOptionsFor(const Graph& graph, const PlanOptions& options, int microbatches,
                           int replicas) {
  const TrainingMemory memory = TrainingMemoryOf(options, graph);
  CostOptions co{.comm_model = options.comm_model,
                 .optimizer_state_multiplier = memory.param_state_factor - 2,
                 .tensor_scale = memory.tensor_scale,
                 .loss_workspace = true};
  if (options.global_batch > 0 && graph.batch_size() > 0 && microbatches > 0) {
    const double samples =
        static_cast<double>(options.global_batch) / std::max(1, replicas) / microbatches;
    co.sample_scale = samples / graph.batch_size();
  }
  return co;
}

schedule::StageCosts SimulatorCosts(std::span<const StageCost> stages) {
  schedule::StageCosts c;
  for (const StageCost& s : stages) {
    c.forward.push_back(s.forward_seconds + s.forward_comm_seconds);
    c.backward_input.push_back(s.backward_seconds - s.weight_grad_seconds +
                               s.backward_comm_seconds);
    c.backward_weight.push_back(s.weight_grad_seconds);
    c.param_bytes.push_back(s.param_state_bytes);
    c.activation_bytes.push_back(s.activation_bytes);
  }
  return c;
}

}  // namespace pipeplan
