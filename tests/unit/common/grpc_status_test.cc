#include "pipeplan/common/grpc_status.h"

#include <gtest/gtest.h>

namespace pipeplan::common {
namespace {

TEST(GrpcStatus, EveryCodeRoundTripsWithItsMessage) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    const absl::Status s(code, c == 0 ? "" : "graph.edges[12].dst \"fc9\" is not a node");
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    if (c != 0) {
      EXPECT_EQ(g.error_message(), s.message());
    }
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
}

TEST(GrpcStatus, NamedCases) {
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kInvalidArgument), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kResourceExhausted), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kFailedPrecondition),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ToGrpcCode(absl::StatusCode::kUnauthenticated), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(FromGrpcCode(grpc::StatusCode::DEADLINE_EXCEEDED), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace pipeplan::common
