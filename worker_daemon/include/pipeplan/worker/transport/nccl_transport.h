// Transport over NCCL (GPU). Compiled only when the build found CUDA and
// NCCL (PIPEPLAN_HAVE_NCCL); otherwise ConnectNccl returns UNIMPLEMENTED.
//
// Like PyTorch's ProcessGroupNCCL for point-to-point, every pair of ranks
// gets its own 2-rank communicator and stream, whose ncclUniqueId the lower
// rank publishes through the rendezvous KeyValue. A Send/Recv posts
// ncclSend/ncclRecv in ncclGroupStart/End on the pair's stream, which first
// waits (a CUDA event) for the work queued on the compute stream — torch's
// default stream, where the torch executor computes — so a device tensor is
// sent only once written. Completion is another event, polled by Wait.
// Buffers in this GPU's memory go as they are (TakesDeviceBuffers); host
// buffers are staged through device buffers that a pool keyed by size
// reuses, so steady-state steps allocate nothing. A buffer on another GPU is
// INVALID_ARGUMENT. AllReduceMax goes through the KeyValue (once per step).
//
// NCCL refuses two ranks on one GPU: the rendezvous compares the ranks'
// CudaDeviceUuid first and uses Gloo when two share one (device_sharing.h).
#ifndef PIPEPLAN_WORKER_NCCL_TRANSPORT_H_
#define PIPEPLAN_WORKER_NCCL_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/rendezvous.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  // CUDA device; -1: device 0 (one visible GPU per worker).
  int device_ordinal = -1;
  absl::Duration timeout = absl::Seconds(60);
};

// True when this build has the NCCL transport.
bool NcclAvailable();
// Number of CUDA devices, 0 when there is no GPU or no CUDA (or no NCCL build).
int CudaDeviceCount();
// The UUID of CUDA device `ordinal` as 32 hex digits (what two processes
// compare to know they share a GPU). UNIMPLEMENTED in a build without NCCL,
// INTERNAL from the CUDA runtime for a device that does not exist.
absl::StatusOr<std::string> CudaDeviceUuid(int ordinal);

// `kv` must outlive the transport; keys are `prefix` + "nccl/...".
absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(const NcclOptions& options, KeyValue& kv,
                                                       const std::string& prefix);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_NCCL_TRANSPORT_H_
