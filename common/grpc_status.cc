#include "pipeplan/common/grpc_status.h"

#include <string>

#include "pipeplan/common/enum_names.h"

namespace pipeplan::common {

namespace {

// The same seventeen codes on both sides; anything else is UNKNOWN.
constexpr auto kCodes = MakeEnumMap<absl::StatusCode, grpc::StatusCode>(
    {{absl::StatusCode::kOk, grpc::StatusCode::OK},
     {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
     {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
     {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
     {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
     {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
     {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
     {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
     {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
     {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
     {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
     {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
     {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
     {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
     {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
     {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
     {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED}});

}  // namespace

grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  return kCodes.Forward(code).value_or(grpc::StatusCode::UNKNOWN);
}

absl::StatusCode FromGrpcCode(grpc::StatusCode code) {
  return kCodes.Backward(code).value_or(absl::StatusCode::kUnknown);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(FromGrpcCode(status.error_code()), status.error_message());
}

}  // namespace pipeplan::common
