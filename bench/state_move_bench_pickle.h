// The state path before issue 26, for state_move_bench.cc's "before"
// column: each parameter's {"param", "optimizer", "state"} dict pickled by
// LibTorch (torch::jit::pickle_save), copied into a byte vector, and on the
// receiving side copied again, unpickled and its tensors cloned — what
// TorchExecutor::ExportState / ImportState and the format-1 checkpoint
// shards did. Only in builds with LibTorch.
#ifndef PIPEPLAN_BENCH_STATE_MOVE_BENCH_PICKLE_H_
#define PIPEPLAN_BENCH_STATE_MOVE_BENCH_PICKLE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pipeplan::bench {

// One parameter's three float tensors (parameter, Adam's two moments) of
// `n` elements each, at `data` (3n floats), and Adam's step.
std::vector<std::byte> PickleParameter(const float* data, int64_t n, int64_t step);
// Unpickles a PickleParameter blob and copies its tensors into `out` (3n floats).
void UnpickleParameter(std::span<const std::byte> blob, float* out, int64_t n);

// A format-1 checkpoint shard: one dict of `params` parameter dicts
// (parameter i at data + 3 n i), pickled at once.
std::vector<char> PickleShard(const float* data, int params, int64_t n, int64_t step);

}  // namespace pipeplan::bench

#endif  // PIPEPLAN_BENCH_STATE_MOVE_BENCH_PICKLE_H_
