#include "pipeplan/worker/executors/synthetic_executor.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {

using schedule::Action;
using schedule::ActionType;

// The synthetic executor stands in for an accelerator, which leaves the host
// CPU to the worker's transport threads while it computes. So it sleeps, and
// busy-waits only the last kSpinSeconds, a margin for the timer's lateness
// (p99 about 0.2 ms here). A longer spin holds a core per worker: four
// workers on two cores then delay each other's messages, by an amount that
// depends on which ranks compute at once, which no device model describes.
void SpinFor(double seconds) {
  if (seconds <= 0) return;
  constexpr double kSpinSeconds = 0.0003;
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  if (seconds > kSpinSeconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds - kSpinSeconds));
  }
  while (Clock::now() < end) {
  }
}

absl::Status SyntheticExecutor::BeginStep(int64_t step) {
  step_ = step;
  step_factor_ = 1.0;
  if (options_.noise > 0) {
    // One draw per (seed, step): the same run draws the same noise.
    std::mt19937_64 rng(options_.noise_seed * 1'000'003 + static_cast<uint64_t>(step));
    step_factor_ =
        std::uniform_real_distribution<double>(1 - options_.noise, 1 + options_.noise)(rng);
  }
  return absl::OkStatus();
}

double SyntheticExecutor::ComputeSeconds(const Action& a) const {
  auto at = [](const std::vector<double>& v, int s) {
    return s >= 0 && s < static_cast<int>(v.size()) ? v[s] : 0.0;
  };
  const double f = at(options_.forward_seconds, a.stage);
  const double b = at(options_.backward_seconds, a.stage);
  double seconds = 0;
  switch (a.type) {
    case ActionType::kForward:
      seconds = f;
      break;
    case ActionType::kBackwardInput:
      seconds = b * (1 - options_.weight_fraction);
      break;
    case ActionType::kBackwardWeight:
      seconds = b * options_.weight_fraction;
      break;
    case ActionType::kFullBackward:
      seconds = b;
      break;
    default:
      break;
  }
  const double factor = at(options_.time_factor, a.stage);
  if (factor > 0) seconds /= factor;
  return seconds * options_.slowdown * options_.time_scale * step_factor_;
}

absl::Status SyntheticExecutor::Compute(const Action& action) {
  if (!schedule::IsCompute(action.type) || action.type == ActionType::kOverlapFB) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(action), " is not an F, I, W or B action"));
  }
  SpinFor(ComputeSeconds(action));
  return absl::OkStatus();
}

size_t SyntheticExecutor::MessageBytes(int boundary) const {
  double bytes = options_.default_message_bytes;
  if (boundary >= 0 && boundary < static_cast<int>(options_.boundary_bytes.size())) {
    bytes = options_.boundary_bytes[boundary];
  }
  const double capped = std::min(bytes, static_cast<double>(options_.max_message_bytes));
  return std::max<size_t>(1, static_cast<size_t>(capped));
}

std::span<std::byte> SyntheticExecutor::Buffer(const Action& a, int boundary) {
  const std::tuple<int, int, int> key{static_cast<int>(a.type), a.stage, a.microbatch};
  auto [it, inserted] = buffers_.try_emplace(key);
  if (inserted) it->second.assign(MessageBytes(boundary), std::byte{0});
  if (live_.insert(key).second) {
    held_bytes_ += static_cast<double>(it->second.size());
    peak_bytes_ = std::max(peak_bytes_, held_bytes_);
  }
  return it->second;
}

absl::StatusOr<std::span<const std::byte>> SyntheticExecutor::SendBuffer(const Action& send) {
  if (send.type == ActionType::kSendF) return std::span<const std::byte>(Buffer(send, send.stage));
  if (send.type == ActionType::kSendB) {
    return std::span<const std::byte>(Buffer(send, send.stage - 1));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(schedule::ActionToString(send), " is not a SEND action"));
}

absl::StatusOr<std::span<std::byte>> SyntheticExecutor::RecvBuffer(const Action& recv) {
  if (recv.type == ActionType::kRecvF) return Buffer(recv, recv.stage - 1);
  if (recv.type == ActionType::kRecvB) return Buffer(recv, recv.stage);
  return absl::InvalidArgumentError(
      absl::StrCat(schedule::ActionToString(recv), " is not a RECV action"));
}

absl::Status SyntheticExecutor::EndStep() {
  // The buffers stay allocated for the next step, as a caching allocator
  // keeps them: freeing and faulting in megabytes every step is work no
  // model predicts. Held bytes count what the step uses.
  live_.clear();
  held_bytes_ = 0;
  Transport* group = options_.replica_group;
  if (group == nullptr || group->size() < 2) return absl::OkStatus();
  if (gradients_.empty()) {
    const double bytes =
        std::min(options_.gradient_bytes, static_cast<double>(options_.max_message_bytes));
    gradients_.assign(std::max<size_t>(1, static_cast<size_t>(bytes) / sizeof(float)), 1.0f);
    peak_bytes_ = std::max(peak_bytes_, static_cast<double>(gradients_.size() * sizeof(float)));
  }
  absl::Status s =
      RingAllReduceSum(*group, gradients_, static_cast<uint64_t>(step_), options_.comm_timeout);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("step ", step_, ": gradient all-reduce over ",
                                               group->size(), " replicas: ", s.message()));
  }
  // Keep the values bounded: the mean, as the real all-reduce leaves them.
  const float scale = 1.0f / static_cast<float>(group->size());
  for (float& g : gradients_) g *= scale;
  return absl::OkStatus();
}

}  // namespace pipeplan::worker
