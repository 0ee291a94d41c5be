#include "gradient_buckets.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {

GradientBuckets::GradientBuckets(std::vector<std::pair<std::string, torch::Tensor>> params,
                                 torch::ScalarType type, BucketOptions options)
    : options_(options) {
  const double element = c10::elementSize(type);
  for (auto& [name, p] : params) {
    // A parameter never splits: a bucket closes once it reaches the size.
    if (buckets_.empty() ||
        (options_.bucket_bytes > 0 &&
         static_cast<double>(buckets_.back().filled) * element >= options_.bucket_bytes)) {
      buckets_.emplace_back();
    }
    Bucket& b = buckets_.back();
    const int64_t offset = b.filled;  // `filled` counts elements while building
    b.params.emplace_back(name, offset);
    slot_[name] = {static_cast<int>(buckets_.size()) - 1, offset};
    b.filled += static_cast<int>(p.numel());
    params_[name] = p;
  }
  for (Bucket& b : buckets_) {
    b.flat = torch::zeros({static_cast<int64_t>(b.filled)}, torch::dtype(type));
    b.filled = 0;
  }
  if (options_.threaded) thread_ = std::thread([this] { Loop(); });
}

GradientBuckets::~GradientBuckets() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GradientBuckets::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return pending_ == 0; });
}

void GradientBuckets::BeginStep(int64_t step) {
  Drain();
  step_ = step;
  status_ = absl::OkStatus();
  for (Bucket& b : buckets_) {
    b.filled = 0;
    b.started = false;
  }
}

void GradientBuckets::Ready(const std::string& name, const torch::Tensor& grad) {
  auto it = slot_.find(name);
  if (it == slot_.end()) return;
  Bucket& b = buckets_[it->second.first];
  if (b.started) return;
  const int64_t n = grad.numel();
  b.flat.narrow(0, it->second.second, n).copy_(grad.detach().reshape({-1}));
  if (++b.filled == static_cast<int>(b.params.size())) Start(it->second.first);
}

void GradientBuckets::Start(int b) {
  buckets_[b].started = true;
  if (!options_.threaded) return;  // Finish reduces it
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(b);
    ++pending_;
  }
  cv_.notify_all();
}

absl::Status GradientBuckets::Reduce(int b) {
  torch::Tensor& flat = buckets_[b].flat;
  const uint64_t epoch = static_cast<uint64_t>(step_);
  if (flat.scalar_type() == torch::kFloat64) {
    return RingAllReduceSum(*options_.group,
                            std::span<double>(flat.data_ptr<double>(), flat.numel()), epoch,
                            options_.timeout, static_cast<uint32_t>(b));
  }
  return RingAllReduceSum(*options_.group, std::span<float>(flat.data_ptr<float>(), flat.numel()),
                          epoch, options_.timeout, static_cast<uint32_t>(b));
}

void GradientBuckets::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    const int b = queue_.front();
    queue_.pop_front();
    l.unlock();
    // Once one ring failed the others would only wait out their timeout.
    absl::Status s = status_.ok() ? Reduce(b) : absl::OkStatus();
    l.lock();
    if (!s.ok() && status_.ok()) status_ = s;
    --pending_;
    cv_.notify_all();
  }
}

absl::StatusOr<double> GradientBuckets::Finish() {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.started) continue;
    for (const auto& [name, offset] : bucket.params) {
      const torch::Tensor& p = params_.at(name);
      torch::Tensor part = bucket.flat.narrow(0, offset, p.numel());
      if (p.grad().defined()) {
        part.copy_(p.grad().detach().reshape({-1}));
      } else {
        part.zero_();
      }
    }
    Start(static_cast<int>(b));
  }
  absl::Status status = absl::OkStatus();
  if (options_.threaded) {
    Drain();
    std::lock_guard<std::mutex> l(mu_);
    status = status_;
  } else {
    for (size_t b = 0; b < buckets_.size() && status.ok(); ++b)
      status = Reduce(static_cast<int>(b));
  }
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("step ", step_, ": gradient all-reduce over ",
                                     options_.replicas, " replicas: ", status.message()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  torch::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    bucket.flat.div_(options_.replicas);
    for (const auto& [name, offset] : bucket.params) {
      torch::Tensor& p = params_.at(name);
      p.mutable_grad() = bucket.flat.narrow(0, offset, p.numel())
                             .view(p.sizes())
                             .to(p.device(), p.scalar_type())
                             .clone();
    }
  }
  return seconds;
}

}  // namespace pipeplan::worker
