// Point-to-point transport between the ranks of one pipeline.
//
// The stage runtime moves activations (SEND_F/RECV_F) and gradients
// (SEND_B/RECV_B) through this interface and knows nothing else about the
// wire: Gloo over TCP on CPU, NCCL on GPU, an in-memory hub in tests.
//
// Semantics: Send and Recv post an operation and return at once; the caller
// keeps the buffer alive and untouched until the op's Wait returns. A send
// and a recv match on (source rank, destination rank, tag); each tag is used
// at most once per direction between two Waits of the runtime's step. Buffer
// sizes of a matching pair must be equal.
//
// Thread safety: one thread drives a Transport; PendingOps are waited on by
// that thread. Abort is the exception: any thread may call it.
#ifndef PIPEPLAN_WORKER_TRANSPORT_H_
#define PIPEPLAN_WORKER_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pipeplan::worker {

class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Blocks until the op completed. DEADLINE_EXCEEDED after `timeout`
  // (the op is then aborted), UNAVAILABLE when the peer went away.
  virtual absl::Status Wait(absl::Duration timeout) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl", "memory".
  virtual std::string name() const = 0;
  // True when Send and Recv also take buffers in CUDA device memory (NCCL):
  // an executor on a GPU then hands its device tensors over directly. False:
  // buffers must be host memory, so a GPU executor stages through (pinned)
  // host buffers.
  virtual bool TakesDeviceBuffers() const { return false; }

  // REQUIRES: 0 <= peer < size(), peer != rank().
  virtual absl::StatusOr<std::unique_ptr<PendingOp>> Send(int peer, uint64_t tag,
                                                          std::span<const std::byte> data) = 0;
  virtual absl::StatusOr<std::unique_ptr<PendingOp>> Recv(int peer, uint64_t tag,
                                                          std::span<std::byte> data) = 0;

  // Collective: every rank calls it once with its value; all get the maximum.
  // Used to agree on the plan version at a step boundary.
  virtual absl::StatusOr<int64_t> AllReduceMax(int64_t value, absl::Duration timeout) = 0;

  // Ends every pending Wait and AllReduceMax, and fails every later
  // operation, with ABORTED; the transport is of no further use. For a
  // watchdog thread that knows the running plan version stalled (a peer
  // hung: no error reaches the ranks waiting on it before the comm timeout).
  virtual void Abort() = 0;

  // Ranks whose connection closed or reset under an op of this transport
  // (the op failed with UNAVAILABLE), sorted: the peers the worker reports
  // to the planner when it drops the step, so that a dead one is declared
  // lost at once instead of after its lease. Empty for transports that
  // cannot tell.
  virtual std::vector<int> UnreachablePeers() const { return {}; }
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TRANSPORT_H_
