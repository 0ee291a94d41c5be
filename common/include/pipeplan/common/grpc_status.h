// The one place where absl::Status meets grpc::Status, in both directions.
// Codes map one to one (gRPC and Abseil share the canonical code space); the
// message is kept verbatim so field-level errors reach the client unchanged.
#ifndef PIPEPLAN_COMMON_GRPC_STATUS_H_
#define PIPEPLAN_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace pipeplan::common {

grpc::StatusCode ToGrpcCode(absl::StatusCode code);
absl::StatusCode FromGrpcCode(grpc::StatusCode code);

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_GRPC_STATUS_H_
