// The worker's /metrics endpoint: a small HTTP/1.0 server on one thread of
// our own that serves a prometheus::Registry in the text format.
//
// Why not prometheus-cpp's Exposer: its civetweb threads run on a fixed
// 100 KiB stack (Debian's build), and with LibTorch linked into the worker
// its thread-local storage leaves too little of it: the first scrape crashed
// the worker. This thread has the default stack. Private to
// pipeplan_worker_metrics.
#ifndef PIPEPLAN_WORKER_SRC_METRICS_ENDPOINT_H_
#define PIPEPLAN_WORKER_SRC_METRICS_ENDPOINT_H_

#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace pipeplan::worker {

class MetricsEndpoint {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks one). UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  MetricsEndpoint(int fd, int port, std::shared_ptr<prometheus::Registry> registry);
  void Serve();
  void Answer(int client);

  const int fd_;
  const int port_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_METRICS_ENDPOINT_H_
