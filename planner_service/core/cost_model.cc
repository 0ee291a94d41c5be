#include "pipeplan/core/cost_model.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan {

namespace {

// An assignment of the right size, and a device for every stage.
absl::Status CheckShape(const Graph& g, const Cluster& cluster, std::span<const int> stage_of_node,
                        std::span<const int> stage_device) {
  const int n = g.num_nodes();
  const int k = static_cast<int>(stage_device.size());
  if (static_cast<int>(stage_of_node.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment has ", stage_of_node.size(), " entries for ", n, " nodes"));
  }
  if (k == 0) return absl::InvalidArgumentError("no stages");
  for (int j = 0; j < k; ++j) {
    if (stage_device[j] < 0 || stage_device[j] >= cluster.num_devices()) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", j, " has no device"));
    }
  }
  return absl::OkStatus();
}

// One tensor produced in stage a and consumed in the stages `touched`
// (sorted), `bytes_to_stage[b]` the largest of its edges into stage b.
// DIRECT: each consuming stage pays its own transfer, the producing stage
// the longest of them. The gradient comes back only when the tensor has one.
void ChargeDirect(const Cluster& cluster, std::span<const int> stage_device, int a, bool grad,
                  const std::vector<int>& touched, const std::vector<double>& bytes_to_stage,
                  std::vector<StageCost>& stages) {
  const int da = stage_device[a];
  double producer = 0;
  for (int b : touched) {
    const double t = cluster.TransferSeconds(da, stage_device[b], bytes_to_stage[b]);
    stages[b].forward_comm_seconds += t;
    if (grad) stages[b].backward_comm_seconds += t;
    producer = std::max(producer, t);
  }
  stages[a].forward_comm_seconds += producer;
  if (grad) stages[a].backward_comm_seconds += producer;
}

// RELAY: across boundary j -> j+1 the tensor carries the largest of the
// edges that still have a consumer beyond j, charged to both sides.
void ChargeRelay(const Cluster& cluster, std::span<const int> stage_device, int a, bool grad,
                 const std::vector<int>& touched, const std::vector<double>& bytes_to_stage,
                 std::vector<StageCost>& stages) {
  double beyond = 0;
  size_t next = touched.size();
  for (int j = touched.back() - 1; j >= a; --j) {
    while (next > 0 && touched[next - 1] > j) {
      beyond = std::max(beyond, bytes_to_stage[touched[--next]]);
    }
    const double t = cluster.TransferSeconds(stage_device[j], stage_device[j + 1], beyond);
    for (int side : {j, j + 1}) {
      stages[side].forward_comm_seconds += t;
      if (grad) stages[side].backward_comm_seconds += t;
    }
  }
}

// One edge that leaves its producer's stage.
struct Crossing {
  int output;
  int stage;
  double bytes;
};

// Communication, tensor by tensor (a tensor is one output of a node);
// INVALID_ARGUMENT for an edge that goes to an earlier stage.
absl::Status AddCommunication(const CostModel& cost, std::span<const int> stage_of_node,
                              std::span<const int> stage_device, std::vector<StageCost>& stages) {
  const Graph& g = cost.graph();
  const int k = static_cast<int>(stage_device.size());
  std::vector<double> bytes_to_stage(k, 0);  // max bytes of the tensor's edges into each stage
  std::vector<int> touched;
  std::vector<Crossing> crossing;
  for (int v = 0; v < g.num_nodes(); ++v) {
    const int a = stage_of_node[v];
    crossing.clear();
    for (int e : g.out_edges(v)) {
      const int b = stage_of_node[g.edge(e).dst];
      if (b < a) {
        return absl::InvalidArgumentError(
            absl::StrCat("edge \"", g.node(v).id, "\" -> \"", g.node(g.edge(e).dst).id,
                         "\" goes backwards from stage ", a, " to stage ", b));
      }
      if (b != a) crossing.push_back({g.edge(e).output, b, std::max(cost.edge_bytes(e), 1e-300)});
    }
    if (crossing.empty()) continue;
    std::sort(crossing.begin(), crossing.end(),
              [](const Crossing& x, const Crossing& y) { return x.output < y.output; });
    for (size_t i = 0; i < crossing.size();) {
      const int output = crossing[i].output;
      for (; i < crossing.size() && crossing[i].output == output; ++i) {
        const int b = crossing[i].stage;
        if (bytes_to_stage[b] == 0) touched.push_back(b);
        bytes_to_stage[b] = std::max(bytes_to_stage[b], crossing[i].bytes);
      }
      std::sort(touched.begin(), touched.end());
      const bool grad = g.output_needs_grad(v, output);
      if (cost.options().comm_model == CommModel::kDirect) {
        ChargeDirect(cost.cluster(), stage_device, a, grad, touched, bytes_to_stage, stages);
      } else {
        ChargeRelay(cost.cluster(), stage_device, a, grad, touched, bytes_to_stage, stages);
      }
      for (int b : touched) {
        stages[b].input_bytes += bytes_to_stage[b];
        stages[b].received_bytes += bytes_to_stage[b];
        stages[a].sent_bytes += bytes_to_stage[b];
        if (grad) stages[b].received_grad_bytes += bytes_to_stage[b];
        bytes_to_stage[b] = 0;
      }
      touched.clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace

// The backward frees each node's saved tensors as it passes it, in reverse
// topological order: when node v back-propagates, the stage still holds
// what v and the nodes before it saved, plus v's working set. The most of
// that over the stage, less its whole activations (held when the backward
// starts), is what the backward adds: a large working set late in the
// backward (a CNN's stem) mostly replaces tensors already freed.
void CostModel::AddBackwardWorkspace(std::span<const int> stage_of_node,
                                     std::vector<StageCost>& stages) const {
  std::vector<double> held(stages.size(), 0), most(stages.size(), 0);
  for (int v : graph_->topo_order()) {
    const int s = stage_of_node[v];
    held[s] += activation_[v];
    most[s] = std::max(most[s], held[s] + workspace_[v]);
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].workspace_bytes = std::max(0.0, most[s] - stages[s].activation_bytes);
  }
}

void ApplyRecompute(StageCost& stage) {
  if (stage.recompute) return;
  stage.backward_seconds += stage.forward_seconds;
  stage.recompute = true;
}

CostModel::CostModel(const Graph& graph, const Cluster& cluster, CostOptions options)
    : graph_(&graph), cluster_(&cluster), options_(options) {
  const int n = graph.num_nodes();
  const double ref = cluster.max_flops();
  const double scale = options.sample_scale;
  forward_ref_.resize(n);
  backward_ref_.resize(n);
  weight_ref_.resize(n);
  activation_.resize(n);
  transient_.assign(n, 0);
  source_input_.assign(n, 0);
  workspace_.assign(n, 0);
  for (int v = 0; v < n; ++v) {
    const NodeSpec& node = graph.node(v);
    // Measured times were taken at the graph's batch size; they scale with
    // the microbatch like flops do.
    forward_ref_[v] =
        node.forward_seconds ? *node.forward_seconds * scale : node.forward_flops * scale / ref;
    const double backward = node.backward_seconds ? *node.backward_seconds * scale
                                                  : graph.backward_flops(v) * scale / ref;
    weight_ref_[v] = backward * graph.weight_grad_fraction(v);
    backward_ref_[v] = backward + (options.recompute ? forward_ref_[v] : 0);
    activation_[v] = graph.activation_bytes(v) * scale * options.tensor_scale;
    // While v back-propagates: its output's gradient, its inputs' gradients
    // and its new weight gradient (measured on the torch executor: a 2-block
    // MLP stage's backward peaks at about its largest node's such sum).
    double workspace = node.output_bytes * scale;
    for (int e : graph.in_edges(v)) {
      const auto& edge = graph.edge(e);
      if (graph.output_needs_grad(edge.src, edge.output)) workspace += edge.bytes * scale;
    }
    workspace_[v] = (workspace + node.param_bytes) * options.tensor_scale;
    if (graph.in_edges(v).empty() && node.param_bytes == 0) {
      // A graph input: what a recomputing stage keeps of it.
      source_input_[v] = node.output_bytes * scale * options.tensor_scale;
    }
    if (options.loss_workspace && graph.out_edges(v).empty() && !graph.in_edges(v).empty()) {
      // The loss upcasts its inputs: fp32 log-probabilities kept for the
      // backward, and their gradient while it runs.
      const double fp32 = 4.0 / graph.element_bytes();
      double inputs = 0;
      for (int e : graph.in_edges(v)) inputs += graph.edge(e).bytes * scale * fp32;
      activation_[v] += inputs;
      transient_[v] = inputs;
    }
  }
  slowdown_.resize(cluster.num_devices());
  for (int d = 0; d < cluster.num_devices(); ++d) slowdown_[d] = ref / cluster.device(d).flops;
}

absl::StatusOr<std::vector<StageCost>> CostModel::Evaluate(
    std::span<const int> stage_of_node, std::span<const int> stage_device) const {
  const Graph& g = *graph_;
  const int n = g.num_nodes();
  const int k = static_cast<int>(stage_device.size());
  PIPEPLAN_RETURN_IF_ERROR(CheckShape(g, *cluster_, stage_of_node, stage_device));
  std::vector<StageCost> stages(k);
  for (int j = 0; j < k; ++j) stages[j].device = stage_device[j];
  for (int v = 0; v < n; ++v) {
    const int s = stage_of_node[v];
    if (s < 0 || s >= k) {
      return absl::InvalidArgumentError(
          absl::StrCat("node \"", g.node(v).id, "\" has stage ", s, ", outside [0, ", k, ")"));
    }
    StageCost& st = stages[s];
    const double slow = slowdown_[st.device];
    ++st.num_nodes;
    st.forward_seconds += forward_ref_[v] * slow;
    st.backward_seconds += backward_ref_[v] * slow;
    st.weight_grad_seconds += weight_ref_[v] * slow;
    st.activation_bytes += activation_[v];
    st.transient_bytes += transient_[v];
    st.input_bytes += source_input_[v];
  }
  AddBackwardWorkspace(stage_of_node, stages);
  for (int j = 0; j < k; ++j) {
    if (stages[j].num_nodes == 0) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", j, " is empty"));
    }
  }
  // Tied parameters are stored once per stage.
  {
    absl::flat_hash_set<std::pair<int, int>> seen;  // (stage, group)
    for (int v = 0; v < n; ++v) {
      const int group = g.param_group(v);
      if (group < 0) continue;
      if (seen.insert({stage_of_node[v], group}).second) {
        stages[stage_of_node[v]].param_bytes += g.param_group_bytes(group);
      }
    }
  }
  for (StageCost& st : stages) {
    st.param_state_bytes = st.param_bytes * param_state_factor();
    st.recompute = options_.recompute;
  }
  PIPEPLAN_RETURN_IF_ERROR(AddCommunication(*this, stage_of_node, stage_device, stages));
  return stages;
}

double BottleneckSeconds(std::span<const StageCost> stages) {
  double worst = 0;
  for (const StageCost& s : stages) worst = std::max(worst, s.total_seconds());
  return worst;
}

}  // namespace pipeplan
