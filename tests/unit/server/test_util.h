// Helpers shared by the server unit tests.
#ifndef PIPEPLAN_TESTS_UNIT_SERVER_TEST_UTIL_H_
#define PIPEPLAN_TESTS_UNIT_SERVER_TEST_UTIL_H_

#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "support/plan_requests.h"
#include "support/temp_dir.h"
#include "support/test_data.h"

namespace pipeplan::server::testing {

using ::pipeplan::testing::DataPath;
using ::pipeplan::testing::ReadJson;
using ::pipeplan::testing::SmallRequest;
using ::pipeplan::testing::TempDir;

}  // namespace pipeplan::server::testing

#endif  // PIPEPLAN_TESTS_UNIT_SERVER_TEST_UTIL_H_
