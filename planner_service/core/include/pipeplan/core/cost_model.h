// Time and memory of pipeline stages. The cost model turns a graph and a
// cluster into per-node seconds on each device and evaluates a stage
// assignment exactly: compute, the communication of tensors that cross stages
// (activations forward, their gradients backward) and memory.
//
// Communication follows one of two runtimes:
//  - DIRECT: a tensor goes from its producer's stage straight to every later
//    stage that consumes it. The producing stage pays once per tensor that
//    leaves it (on its slowest outgoing link); each consuming stage pays once
//    per tensor it receives, never once per consumer node.
//  - RELAY: only neighbouring stages talk (torch.distributed.pipelining); a
//    tensor is charged to both sides of every stage boundary it crosses.
// Each transfer is paid twice per microbatch: the activation forward and its
// gradient backward.
//
// Memory of a stage = parameter bytes (tied parameters once per stage) x
// (1 weights + 1 gradients + optimizer multiplier) + activation bytes per
// microbatch x microbatches in flight.
//
// Thread safety: read-only after construction; the graph and cluster must
// outlive the model.
#ifndef PIPEPLAN_CORE_COST_MODEL_H_
#define PIPEPLAN_CORE_COST_MODEL_H_

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"

namespace pipeplan {

enum class CommModel { kDirect, kRelay };

struct CostOptions {
  CommModel comm_model = CommModel::kDirect;
  double optimizer_state_multiplier = 0;
  // Multiplies flops, activation and tensor bytes: samples per microbatch
  // divided by the graph's batch_size (1 when costs are per microbatch).
  double sample_scale = 1.0;
};

// Per-microbatch cost of one stage on its device.
struct StageCost {
  int device = 0;
  int num_nodes = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double weight_grad_seconds = 0;  // part of backward_seconds
  // Transfers of the forward pass (activations in and out) and of the
  // backward pass (gradients in and out).
  double forward_comm_seconds = 0;
  double backward_comm_seconds = 0;
  double param_bytes = 0;        // unique parameter bytes
  double param_state_bytes = 0;  // with gradients and optimizer state
  double activation_bytes = 0;   // per microbatch in flight

  double comm_seconds() const { return forward_comm_seconds + backward_comm_seconds; }
  double compute_seconds() const { return forward_seconds + backward_seconds; }
  double total_seconds() const { return compute_seconds() + comm_seconds(); }
  double memory_bytes(int inflight_microbatches) const {
    return param_state_bytes + activation_bytes * inflight_microbatches;
  }
};

class CostModel {
 public:
  CostModel(const Graph& graph, const Cluster& cluster, CostOptions options);

  const Graph& graph() const { return *graph_; }
  const Cluster& cluster() const { return *cluster_; }
  const CostOptions& options() const { return options_; }

  // Seconds of node v on the cluster's fastest device, per microbatch.
  double forward_ref(int v) const { return forward_ref_[v]; }
  double backward_ref(int v) const { return backward_ref_[v]; }
  double work_ref(int v) const { return forward_ref_[v] + backward_ref_[v]; }
  // Multiplier from reference seconds to seconds on device d (>= 1).
  double slowdown(int d) const { return slowdown_[d]; }
  // Bytes of edge e per microbatch.
  double edge_bytes(int e) const { return graph_->edge(e).bytes * options_.sample_scale; }
  double activation_bytes(int v) const {
    return graph_->activation_bytes(v) * options_.sample_scale;
  }
  // Bytes per parameter byte: weights + gradients + optimizer state.
  double param_state_factor() const { return 2 + options_.optimizer_state_multiplier; }

  // Checks that `stage_of_node` is a valid split into stage_device.size()
  // stages (every node assigned, every edge goes to the same or a later
  // stage, no stage empty) and returns every stage's cost. INVALID_ARGUMENT
  // names the first violation.
  absl::StatusOr<std::vector<StageCost>> Evaluate(std::span<const int> stage_of_node,
                                                  std::span<const int> stage_device) const;

 private:
  const Graph* graph_;
  const Cluster* cluster_;
  CostOptions options_;
  std::vector<double> forward_ref_, backward_ref_, weight_fraction_;
  std::vector<double> slowdown_;
};

// The slowest stage's per-microbatch time: the quantity partitioners minimize.
double BottleneckSeconds(std::span<const StageCost> stages);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_COST_MODEL_H_
