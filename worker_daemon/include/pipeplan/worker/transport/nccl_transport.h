// Transport over NCCL (GPU). Compiled only when the build found CUDA and
// NCCL (PIPEPLAN_HAVE_NCCL); otherwise ConnectNccl returns UNIMPLEMENTED.
//
// Like PyTorch's ProcessGroupNCCL for point-to-point, every pair of ranks
// gets its own 2-rank communicator and stream, whose ncclUniqueId the lower
// rank publishes through the rendezvous KeyValue. A Send/Recv stages the
// host buffer through device memory: ncclSend/ncclRecv in
// ncclGroupStart/End on the pair's stream, completion by CUDA event.
// AllReduceMax goes through the KeyValue (it runs once per step).
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

// `kv` must outlive the transport; keys are `prefix` + "nccl/...".
absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(const NcclOptions& options, KeyValue& kv,
                                                       const std::string& prefix);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_NCCL_TRANSPORT_H_
