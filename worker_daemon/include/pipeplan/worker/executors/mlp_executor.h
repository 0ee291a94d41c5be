// A reference MLP on CPU, split into pipeline stages exactly as a plan splits
// its graph, with real forward and backward math on float buffers.
//
// The model has one layer per graph node (in graph order, treated as a
// chain): a node with parameters is a Linear(width, width) layer, any other
// node a tanh, and a leading "placeholder" node is the input. Weights are
// initialised from (seed, layer index) only, so every split of the same
// model starts from the same weights and a pipelined step computes the same
// gradients as one process running all layers. Microbatch m's data is a
// fixed function of m; the last stage takes a mean-squared-error loss
// against a fixed target. EndStep applies plain SGD.
#ifndef PIPEPLAN_WORKER_MLP_EXECUTOR_H_
#define PIPEPLAN_WORKER_MLP_EXECUTOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "pipeplan/v1/graph.pb.h"
#include "pipeplan/worker/runtime/executor.h"

namespace pipeplan::worker {

enum class LayerKind { kIdentity, kLinear, kTanh };

// The layers of a graph, one per node.
std::vector<LayerKind> LayersFromGraph(const v1::ModelGraph& graph);

struct MlpOptions {
  std::vector<LayerKind> layers;
  // Per stage, indices into `layers`, in order; stages cover a chain.
  std::vector<std::vector<int>> stage_layers;
  // The stages this executor holds.
  std::vector<int> local_stages;
  int num_microbatches = 1;
  int width = 16;
  int rows = 8;  // samples per microbatch
  float learning_rate = 1.0f;
  uint64_t seed = 1;
};

class MlpExecutor final : public Executor {
 public:
  explicit MlpExecutor(MlpOptions options);

  absl::Status BeginStep(int64_t step) override;
  absl::Status Compute(const schedule::Action& action) override;
  absl::StatusOr<std::span<const std::byte>> SendBuffer(const schedule::Action& send) override;
  absl::StatusOr<std::span<std::byte>> RecvBuffer(const schedule::Action& recv) override;
  absl::Status EndStep() override;
  double PeakMemoryBytes() const override { return peak_bytes_; }
  std::optional<double> LastLoss() const override { return last_loss_; }
  // Its math runs on the calling thread.
  int CpuComputeThreads() const override { return 1; }

  // Weights then bias of every local Linear layer, by layer index.
  const std::map<int, std::vector<float>>& parameters() const { return params_; }

 private:
  using Tensor = std::vector<float>;
  using Key = std::pair<int, int>;  // stage, microbatch
  struct Saved {
    std::vector<Tensor> inputs;    // per layer of the stage: its input
    std::vector<Tensor> outputs;   // per layer: its output
    std::vector<Tensor> grad_out;  // per layer: gradient w.r.t. its output (after I)
  };

  bool IsLocal(int stage) const;
  int LastStage() const { return static_cast<int>(options_.stage_layers.size()) - 1; }
  Tensor Input(int microbatch) const;
  Tensor Target(int microbatch) const;
  absl::Status Forward(int stage, int mb);
  // F's parts: the stage's input (the data, the local producer's output or
  // what RECV_F brought), one layer, and the loss at the last stage.
  absl::StatusOr<Tensor> StageInput(int stage, int mb) const;
  Tensor ApplyLayer(int layer, const Tensor& x) const;
  void AddLoss(int stage, int mb, const Tensor& y);
  absl::Status BackwardInput(int stage, int mb);
  absl::Status BackwardWeight(int stage, int mb);
  // The map a SEND (`send`) or RECV action's buffer lives in by its type;
  // INVALID_ARGUMENT for an action of the other kind.
  absl::StatusOr<std::map<Key, Tensor>*> TransferMap(const schedule::Action& a, bool send);
  void Track();

  MlpOptions options_;
  size_t elems_;  // rows * width
  std::map<int, std::vector<float>> params_;
  std::map<int, std::vector<float>> grads_;
  std::map<Key, Saved> saved_;
  std::map<Key, Tensor> out_;        // stage output (SEND_F source, local hop)
  std::map<Key, Tensor> grad_in_;    // gradient w.r.t. stage input (SEND_B source)
  std::map<Key, Tensor> recv_f_;     // RECV_F destination
  std::map<Key, Tensor> recv_b_;     // RECV_B destination
  std::map<Key, Tensor> loss_grad_;  // last stage: d loss / d output
  double step_loss_ = 0;
  bool has_loss_ = false;
  std::optional<double> last_loss_;
  double peak_bytes_ = 0;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_MLP_EXECUTOR_H_
