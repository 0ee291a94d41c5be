// The torch executor's gradient all-reduce over data-parallel replicas in
// buckets, overlapped with the backward as PyTorch DDP does: parameters are
// grouped into buckets of about `bucket_bytes` in the order the backward
// produces their gradients (the last stage's last parameter first); as the
// last microbatch's backward produces a parameter's final gradient it is
// copied into its bucket, and a full bucket is reduced by a ring all-reduce
// over the replica group on this object's own thread while the backward
// goes on. Finish starts what is left (parameters no hook filled: unused
// ones, ones two local stages share), waits for every bucket and writes the
// replicas' mean back into each parameter's .grad. The time Finish waits is
// the exposed all-reduce.
//
// Buckets start in the same order on every replica (the same model and
// schedule fill them alike; Finish starts the rest in bucket order), and
// each has its own tags, so the rings meet. Over a transport that must be
// driven by one thread (NCCL) every bucket runs in Finish instead.
//
// Private to pipeplan_torch_executor. Thread safety: one thread (the
// executor's) calls the methods; the reducing thread only touches started
// buckets' buffers.
#ifndef PIPEPLAN_WORKER_SRC_TORCH_GRADIENT_BUCKETS_H_
#define PIPEPLAN_WORKER_SRC_TORCH_GRADIENT_BUCKETS_H_

#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct BucketOptions {
  Transport* group = nullptr;  // this rank in every replica
  int replicas = 1;
  double bucket_bytes = 25.0 * (1 << 20);
  absl::Duration timeout = absl::Seconds(60);
  bool threaded = true;  // false: every bucket runs in Finish
};

class GradientBuckets {
 public:
  // `params` in the order their gradients are expected (first reduced
  // first); every one of `type` once reduced (float32 or float64).
  GradientBuckets(std::vector<std::pair<std::string, torch::Tensor>> params, torch::ScalarType type,
                  BucketOptions options);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // A new step: no bucket filled or started. Waits for a step the runtime
  // abandoned to finish its rings (or time out).
  void BeginStep(int64_t step);
  // `grad` is parameter `name`'s final gradient this step: into its bucket,
  // which starts once every parameter of it is in.
  void Ready(const std::string& name, const torch::Tensor& grad);
  // Starts the buckets not started, waits for all, and sets every
  // parameter's .grad to the replicas' mean. The seconds it waited.
  absl::StatusOr<double> Finish();

 private:
  struct Bucket {
    std::vector<std::pair<std::string, int64_t>> params;  // name, offset
    torch::Tensor flat;                                   // host, `type`
    int filled = 0;
    bool started = false;
  };
  void Start(int b);
  absl::Status Reduce(int b);
  void Loop();
  void Drain();

  std::map<std::string, torch::Tensor> params_;
  std::map<std::string, std::pair<int, int64_t>> slot_;  // bucket, offset
  std::vector<Bucket> buckets_;
  BucketOptions options_;
  int64_t step_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> queue_;  // started buckets the thread has not reduced
  int pending_ = 0;        // started and not reduced
  absl::Status status_;    // the step's first ring error
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TORCH_GRADIENT_BUCKETS_H_
