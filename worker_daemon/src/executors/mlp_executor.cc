#include "pipeplan/worker/executors/mlp_executor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::worker {
namespace {

using schedule::Action;
using schedule::ActionType;

// splitmix64: a deterministic value in [-1, 1) from a 64-bit key.
float Hash01(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

std::span<std::byte> Bytes(std::vector<float>& t) {
  return std::as_writable_bytes(std::span<float>(t));
}

}  // namespace

std::vector<LayerKind> LayersFromGraph(const v1::ModelGraph& graph) {
  std::vector<LayerKind> layers;
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const v1::Node& n = graph.nodes(i);
    if (n.param_bytes() > 0) {
      layers.push_back(LayerKind::kLinear);
    } else if (i == 0 && (n.op() == "placeholder" || n.op() == "input")) {
      layers.push_back(LayerKind::kIdentity);
    } else {
      layers.push_back(LayerKind::kTanh);
    }
  }
  return layers;
}

MlpExecutor::MlpExecutor(MlpOptions options)
    : options_(std::move(options)),
      elems_(static_cast<size_t>(options_.rows) * static_cast<size_t>(options_.width)) {
  const int w = options_.width;
  const float scale = 1.0f / std::sqrt(static_cast<float>(w));
  for (int s : options_.local_stages) {
    for (int layer : options_.stage_layers[s]) {
      if (options_.layers[layer] != LayerKind::kLinear) continue;
      std::vector<float>& p = params_[layer];
      p.resize(static_cast<size_t>(w) * w + w);
      for (size_t i = 0; i < p.size(); ++i) {
        const uint64_t key = (options_.seed << 40) ^ (static_cast<uint64_t>(layer) << 24) ^ i;
        p[i] = i < static_cast<size_t>(w) * w ? Hash01(key) * scale : 0.0f;
      }
      grads_[layer].assign(p.size(), 0.0f);
    }
  }
}

bool MlpExecutor::IsLocal(int stage) const {
  return std::find(options_.local_stages.begin(), options_.local_stages.end(), stage) !=
         options_.local_stages.end();
}

MlpExecutor::Tensor MlpExecutor::Input(int mb) const {
  Tensor x(elems_);
  for (size_t i = 0; i < elems_; ++i) {
    x[i] = Hash01((options_.seed * 7919 + 17) ^ (static_cast<uint64_t>(mb) << 32) ^ i);
  }
  return x;
}

MlpExecutor::Tensor MlpExecutor::Target(int mb) const {
  // A smooth function of the input: y[r][j] = 0.5 * sin(x[r][j] + x[r][(j+1) % w]).
  const Tensor x = Input(mb);
  const int w = options_.width;
  Tensor y(elems_);
  for (int r = 0; r < options_.rows; ++r) {
    for (int j = 0; j < w; ++j) {
      y[r * w + j] = 0.5f * std::sin(x[r * w + j] + x[r * w + (j + 1) % w]);
    }
  }
  return y;
}

absl::Status MlpExecutor::BeginStep(int64_t) {
  step_loss_ = 0;
  has_loss_ = false;
  return absl::OkStatus();
}

absl::StatusOr<MlpExecutor::Tensor> MlpExecutor::StageInput(int stage, int mb) const {
  if (stage == 0) return Input(mb);
  if (IsLocal(stage - 1)) {
    auto it = out_.find({stage - 1, mb});
    if (it == out_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("F of stage ", stage, " microbatch ", mb, " before its producer"));
    }
    return it->second;
  }
  auto it = recv_f_.find({stage, mb});
  if (it == recv_f_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("F of stage ", stage, " microbatch ", mb, " without a RECV_F"));
  }
  return it->second;
}

MlpExecutor::Tensor MlpExecutor::ApplyLayer(int layer, const Tensor& x) const {
  const int w = options_.width;
  const int rows = options_.rows;
  Tensor y(elems_);
  switch (options_.layers[layer]) {
    case LayerKind::kIdentity:
      y = x;
      break;
    case LayerKind::kTanh:
      for (size_t i = 0; i < elems_; ++i) y[i] = std::tanh(x[i]);
      break;
    case LayerKind::kLinear: {
      const std::vector<float>& p = params_.at(layer);
      const float* W = p.data();
      const float* b = p.data() + static_cast<size_t>(w) * w;
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < w; ++o) {
          float acc = b[o];
          for (int i = 0; i < w; ++i) acc += x[r * w + i] * W[o * w + i];
          y[r * w + o] = acc;
        }
      }
      break;
    }
  }
  return y;
}

void MlpExecutor::AddLoss(int stage, int mb, const Tensor& y) {
  const Tensor target = Target(mb);
  const float denom = static_cast<float>(elems_) * static_cast<float>(options_.num_microbatches);
  Tensor g(elems_);
  double loss = 0;
  for (size_t i = 0; i < elems_; ++i) {
    const float d = y[i] - target[i];
    loss += 0.5 * static_cast<double>(d) * d;
    g[i] = d / denom;
  }
  step_loss_ += loss / denom;
  has_loss_ = true;
  loss_grad_[{stage, mb}] = std::move(g);
}

absl::Status MlpExecutor::Forward(int stage, int mb) {
  absl::StatusOr<Tensor> input = StageInput(stage, mb);
  if (!input.ok()) return input.status();
  Tensor x = *std::move(input);
  Saved& saved = saved_[{stage, mb}];
  for (int layer : options_.stage_layers[stage]) {
    saved.inputs.push_back(x);
    Tensor y = ApplyLayer(layer, x);
    saved.outputs.push_back(y);
    x = std::move(y);
  }
  if (stage == LastStage()) AddLoss(stage, mb, x);
  out_[{stage, mb}] = std::move(x);
  Track();
  return absl::OkStatus();
}

absl::Status MlpExecutor::BackwardInput(int stage, int mb) {
  Tensor g;
  if (stage == LastStage()) {
    g = loss_grad_.at({stage, mb});
  } else if (IsLocal(stage + 1)) {
    auto it = grad_in_.find({stage + 1, mb});
    if (it == grad_in_.end()) {
      return absl::FailedPreconditionError(absl::StrCat("backward of stage ", stage, " microbatch ",
                                                        mb, " before stage ", stage + 1, "'s"));
    }
    g = it->second;
  } else {
    auto it = recv_b_.find({stage, mb});
    if (it == recv_b_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("backward of stage ", stage, " microbatch ", mb, " without a RECV_B"));
    }
    g = it->second;
  }
  auto sit = saved_.find({stage, mb});
  if (sit == saved_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("backward of stage ", stage, " microbatch ", mb, " before its forward"));
  }
  Saved& saved = sit->second;
  const std::vector<int>& layers = options_.stage_layers[stage];
  saved.grad_out.assign(layers.size(), Tensor());
  const int w = options_.width;
  const int rows = options_.rows;
  for (int k = static_cast<int>(layers.size()) - 1; k >= 0; --k) {
    const int layer = layers[k];
    saved.grad_out[k] = g;
    Tensor dx(elems_, 0.0f);
    switch (options_.layers[layer]) {
      case LayerKind::kIdentity:
        dx = g;
        break;
      case LayerKind::kTanh: {
        const Tensor& y = saved.outputs[k];
        for (size_t i = 0; i < elems_; ++i) dx[i] = g[i] * (1.0f - y[i] * y[i]);
        break;
      }
      case LayerKind::kLinear: {
        const float* W = params_.at(layer).data();
        for (int r = 0; r < rows; ++r) {
          for (int o = 0; o < w; ++o) {
            const float go = g[r * w + o];
            for (int i = 0; i < w; ++i) dx[r * w + i] += go * W[o * w + i];
          }
        }
        break;
      }
    }
    g = std::move(dx);
  }
  grad_in_[{stage, mb}] = std::move(g);
  Track();
  return absl::OkStatus();
}

absl::Status MlpExecutor::BackwardWeight(int stage, int mb) {
  auto sit = saved_.find({stage, mb});
  if (sit == saved_.end() || sit->second.grad_out.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("W of stage ", stage, " microbatch ", mb, " before its I"));
  }
  Saved& saved = sit->second;
  const std::vector<int>& layers = options_.stage_layers[stage];
  const int w = options_.width;
  const int rows = options_.rows;
  for (size_t k = 0; k < layers.size(); ++k) {
    if (options_.layers[layers[k]] != LayerKind::kLinear) continue;
    std::vector<float>& grad = grads_.at(layers[k]);
    const Tensor& x = saved.inputs[k];
    const Tensor& g = saved.grad_out[k];
    float* dW = grad.data();
    float* db = grad.data() + static_cast<size_t>(w) * w;
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < w; ++o) {
        const float go = g[r * w + o];
        db[o] += go;
        for (int i = 0; i < w; ++i) dW[o * w + i] += go * x[r * w + i];
      }
    }
  }
  saved_.erase(sit);  // activations are freed once the weight gradient is in
  return absl::OkStatus();
}

absl::Status MlpExecutor::Compute(const Action& a) {
  if (!IsLocal(a.stage) || a.microbatch < 0 || a.microbatch >= options_.num_microbatches) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(a), " is not for a stage of this executor"));
  }
  switch (a.type) {
    case ActionType::kForward:
      return Forward(a.stage, a.microbatch);
    case ActionType::kBackwardInput:
      return BackwardInput(a.stage, a.microbatch);
    case ActionType::kBackwardWeight:
      return BackwardWeight(a.stage, a.microbatch);
    case ActionType::kFullBackward: {
      absl::Status s = BackwardInput(a.stage, a.microbatch);
      if (!s.ok()) return s;
      return BackwardWeight(a.stage, a.microbatch);
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(schedule::ActionToString(a), " is not an F, I, W or B action"));
  }
}

absl::StatusOr<std::map<MlpExecutor::Key, MlpExecutor::Tensor>*> MlpExecutor::TransferMap(
    const Action& a, bool send) {
  std::map<Key, Tensor>* map = nullptr;
  if (send) {
    map = a.type == ActionType::kSendF ? &out_ : a.type == ActionType::kSendB ? &grad_in_ : nullptr;
  } else {
    map = a.type == ActionType::kRecvF   ? &recv_f_
          : a.type == ActionType::kRecvB ? &recv_b_
                                         : nullptr;
  }
  if (map == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(a), " is not a ", send ? "SEND" : "RECV", " action"));
  }
  return map;
}

absl::StatusOr<std::span<const std::byte>> MlpExecutor::SendBuffer(const Action& send) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto* source, TransferMap(send, /*send=*/true));
  auto it = source->find({send.stage, send.microbatch});
  if (it == source->end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(schedule::ActionToString(send), " before the compute that produces it"));
  }
  return std::span<const std::byte>(Bytes(it->second));
}

absl::StatusOr<std::span<std::byte>> MlpExecutor::RecvBuffer(const Action& recv) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto* dest, TransferMap(recv, /*send=*/false));
  Tensor& t = (*dest)[{recv.stage, recv.microbatch}];
  t.assign(elems_, 0.0f);
  Track();
  return Bytes(t);
}

void MlpExecutor::Track() {
  double bytes = 0;
  auto add = [&](const std::map<Key, Tensor>& m) {
    for (const auto& [k, t] : m) bytes += static_cast<double>(t.size() * sizeof(float));
  };
  add(out_);
  add(grad_in_);
  add(recv_f_);
  add(recv_b_);
  for (const auto& [k, s] : saved_) {
    for (const Tensor& t : s.inputs) bytes += static_cast<double>(t.size() * sizeof(float));
    for (const Tensor& t : s.outputs) bytes += static_cast<double>(t.size() * sizeof(float));
  }
  for (const auto& [k, p] : params_) bytes += 2.0 * static_cast<double>(p.size() * sizeof(float));
  peak_bytes_ = std::max(peak_bytes_, bytes);
}

absl::Status MlpExecutor::EndStep() {
  for (auto& [layer, p] : params_) {
    std::vector<float>& g = grads_.at(layer);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] -= options_.learning_rate * g[i];
      g[i] = 0.0f;
    }
  }
  if (has_loss_) last_loss_ = step_loss_;
  saved_.clear();
  out_.clear();
  grad_in_.clear();
  recv_f_.clear();
  recv_b_.clear();
  loss_grad_.clear();
  return absl::OkStatus();
}

}  // namespace pipeplan::worker
