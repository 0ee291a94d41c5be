// Waits for a gRPC channel to be READY again before a retry resends a call,
// so a retry loop spends its backoff reconnecting rather than failing fast on
// a channel that is still in TRANSIENT_FAILURE.
#ifndef PIPEPLAN_COMMON_CHANNEL_READY_H_
#define PIPEPLAN_COMMON_CHANNEL_READY_H_

#include <grpcpp/channel.h>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pipeplan::common {

// OK once `channel` is READY (asking it to connect if idle); UNAVAILABLE if it
// is not READY by `deadline`. REQUIRES: channel != nullptr.
absl::Status WaitForChannelReady(grpc::Channel* channel, absl::Time deadline);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_CHANNEL_READY_H_
