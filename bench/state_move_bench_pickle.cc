#include "state_move_bench_pickle.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <cstring>

namespace pipeplan::bench {
namespace {

using Dict = c10::impl::GenericDict;

Dict NewDict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

torch::Tensor View(const float* data, int64_t n) {
  return torch::from_blob(const_cast<float*>(data), {n}, torch::kFloat);
}

// One parameter as the worker's state move ships it: the values and their
// AdamW state, laid out at `data` as param, exp_avg, exp_avg_sq (n each).
Dict ParameterEntry(const float* data, int64_t n, int64_t step) {
  Dict state = NewDict();
  state.insert("step", step);
  state.insert("exp_avg", View(data + n, n));
  state.insert("exp_avg_sq", View(data + 2 * n, n));
  Dict entry = NewDict();
  entry.insert("param", View(data, n));
  entry.insert("optimizer", std::string("adamw"));
  entry.insert("state", state);
  return entry;
}

}  // namespace

std::vector<std::byte> PickleParameter(const float* data, int64_t n, int64_t step) {
  const std::vector<char> bytes = torch::jit::pickle_save(ParameterEntry(data, n, step));
  const auto span = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
  return std::vector<std::byte>(span.begin(), span.end());
}

std::vector<char> PickleShard(const float* data, int params, int64_t n, int64_t step) {
  Dict all = NewDict();
  for (int i = 0; i < params; ++i) {
    all.insert("p" + std::to_string(i), ParameterEntry(data + 3 * n * i, n, step));
  }
  Dict shard = NewDict();
  shard.insert("format", std::string("pipeplan-checkpoint-shard/1"));
  shard.insert("parameters", all);
  return torch::jit::pickle_save(shard);
}

void UnpickleParameter(std::span<const std::byte> blob, float* out, int64_t n) {
  const auto* chars = reinterpret_cast<const char*>(blob.data());
  const torch::IValue value =
      torch::jit::pickle_load(std::vector<char>(chars, chars + blob.size()));
  const Dict entry = value.toGenericDict();
  const Dict state = entry.at("state").toGenericDict();
  // As ImportEntry did: a clone of each, then a copy into the parameter.
  View(out, n).copy_(entry.at("param").toTensor().clone());
  View(out + n, n).copy_(state.at("exp_avg").toTensor().clone());
  View(out + 2 * n, n).copy_(state.at("exp_avg_sq").toTensor().clone());
}

}  // namespace pipeplan::bench
