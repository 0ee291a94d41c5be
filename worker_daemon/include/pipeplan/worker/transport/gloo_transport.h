// Transport over Gloo's TCP transport (CPU): a full mesh of TCP pairs built
// through a gloo::rendezvous::Store, then unbound-buffer send/recv.
#ifndef PIPEPLAN_WORKER_GLOO_TRANSPORT_H_
#define PIPEPLAN_WORKER_GLOO_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/transport.h"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace pipeplan::worker {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // Interface address the TCP device binds to (port chosen by the kernel).
  std::string host = "127.0.0.1";
  // Every Gloo operation after the mesh is connected.
  absl::Duration timeout = absl::Seconds(60);
  // Connecting one pair of the mesh once both addresses are known. Gloo
  // waits five times its pair timeout for that, so the pairs get a fifth of
  // this (and no other use of the pair timeout exists in async mode).
  absl::Duration connect_timeout = absl::Seconds(60);
};

// Blocks until every rank joined through `store` (UNAVAILABLE on Gloo
// errors, DEADLINE_EXCEEDED when a rank never comes or a pair does not
// connect within `connect_timeout`). `store` is only used
// during the call.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGloo(const GlooOptions& options,
                                                       gloo::rendezvous::Store& store);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_GLOO_TRANSPORT_H_
