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
// gradient backward (forward only for an output that carries no gradient).
// A tensor is one output of a node: a node's edges of one output share a
// transfer, different outputs add up.
//
// Memory of a stage = parameter bytes (tied parameters once per stage) x
// (1 weights + 1 gradients + optimizer multiplier) + activation bytes per
// microbatch x microbatches in flight + the loss's transient gradient buffer.
// With recomputation a stage keeps only its inputs per microbatch in flight,
// plus one microbatch's activations while it recomputes, and its backward
// runs the forward again (memory_model.h has the per-parameter bytes). Its
// peak adds the boundary buffers and the backward's working set
// (StageCost::peak_memory_bytes).
//
// Thread safety: read-only after construction; the graph and cluster must
// outlive the model.
#ifndef PIPEPLAN_CORE_COST_MODEL_H_
#define PIPEPLAN_CORE_COST_MODEL_H_

#include <algorithm>
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
  // Bytes of activations and transfers per graph byte (0.5 for bf16 on a
  // graph exported in fp32; TrainingMemory::tensor_scale).
  double tensor_scale = 1.0;
  // Every stage recomputes its forward during the backward.
  bool recompute = false;
  // Count the loss's memory: a sink node (no consumers) keeps fp32
  // log-probabilities of its inputs per microbatch in flight, and the stage
  // holding it a transient fp32 gradient of them.
  bool loss_workspace = false;
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
  // Tensors the stage receives (or reads from the data loader) per
  // microbatch: all that recomputation keeps.
  double input_bytes = 0;
  double transient_bytes = 0;  // the loss's gradient buffer, once
  // Boundary buffers (tensors that cross stages, as the worker holds them):
  // per microbatch in flight, the received copies of inputs from earlier
  // stages (kept until the backward; with recompute they are part of
  // input_bytes) and the packed copies of the outputs sent on (kept until
  // their gradient comes back). The gradients of the received inputs that
  // need one accumulate through the backward until sent: transient.
  double received_bytes = 0;
  double sent_bytes = 0;
  double received_grad_bytes = 0;
  // The backward's working set beyond the activations it starts with: one
  // node's backward holds the gradient of its output, those of its inputs
  // and its new weight gradient, while the nodes before it still hold their
  // saved tensors (CostModel::Evaluate takes the most over the stage, in
  // reverse topological order); transient like the loss's buffer, which is
  // the loss node's.
  double workspace_bytes = 0;
  bool recompute = false;

  double comm_seconds() const { return forward_comm_seconds + backward_comm_seconds; }
  double compute_seconds() const { return forward_seconds + backward_seconds; }
  double total_seconds() const { return compute_seconds() + comm_seconds(); }
  // What the partitioners cap: parameters and state plus kept activations.
  double memory_bytes(int inflight_microbatches) const {
    const double kept = recompute ? input_bytes * inflight_microbatches + activation_bytes
                                  : activation_bytes * inflight_microbatches;
    return param_state_bytes + kept;
  }
  // The stage's peak: memory_bytes, the boundary buffers, and the
  // backward's transient buffers (the loss's, or one node's gradients, with
  // the input gradients it accumulates).
  double peak_memory_bytes(int inflight_microbatches) const {
    const double boundary = sent_bytes + (recompute ? 0 : received_bytes);
    return memory_bytes(inflight_microbatches) + boundary * inflight_microbatches +
           std::max(transient_bytes, workspace_bytes) + received_grad_bytes;
  }
};

// Turns on recomputation for a stage evaluated without it: the backward runs
// the forward again (as input-gradient work), and memory keeps only inputs.
void ApplyRecompute(StageCost& stage);

class CostModel {
 public:
  CostModel(const Graph& graph, const Cluster& cluster, CostOptions options);

  const Graph& graph() const { return *graph_; }
  const Cluster& cluster() const { return *cluster_; }
  const CostOptions& options() const { return options_; }

  // Seconds of node v on the cluster's fastest device, per microbatch.
  // With recomputation the backward includes a second forward.
  double forward_ref(int v) const { return forward_ref_[v]; }
  double backward_ref(int v) const { return backward_ref_[v]; }
  double work_ref(int v) const { return forward_ref_[v] + backward_ref_[v]; }
  // Multiplier from reference seconds to seconds on device d (>= 1).
  double slowdown(int d) const { return slowdown_[d]; }
  // Bytes of edge e per microbatch.
  double edge_bytes(int e) const {
    return graph_->edge(e).bytes * options_.sample_scale * options_.tensor_scale;
  }
  // Bytes node v keeps per microbatch in flight (the loss's log-probabilities
  // included when CostOptions::loss_workspace).
  double activation_bytes(int v) const { return activation_[v]; }
  // The loss's transient gradient buffer held by the stage of v.
  double transient_bytes(int v) const { return transient_[v]; }
  // Gradient bytes node v's backward holds at once (StageCost::workspace_bytes).
  double workspace_bytes(int v) const { return workspace_[v]; }
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
  std::vector<double> forward_ref_, backward_ref_, weight_ref_;
  std::vector<double> activation_, transient_, source_input_, workspace_;
  std::vector<double> slowdown_;

  void AddBackwardWorkspace(std::span<const int> stage_of_node,
                            std::vector<StageCost>& stages) const;
};

// The slowest stage's per-microbatch time: the quantity partitioners minimize.
double BottleneckSeconds(std::span<const StageCost> stages);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_COST_MODEL_H_
