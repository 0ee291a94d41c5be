// Helpers shared by the server unit tests.
#ifndef PIPEPLAN_TESTS_UNIT_SERVER_TEST_UTIL_H_
#define PIPEPLAN_TESTS_UNIT_SERVER_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "support/test_data.h"

namespace pipeplan::server::testing {

// A fresh directory, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pipeplan-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

using ::pipeplan::testing::DataPath;
using ::pipeplan::testing::ReadJson;

// chain_small on 8xA100 with 4 ranks, 1F1B, 8 microbatches, method dp.
inline v1::PlanRequest SmallRequest() {
  v1::PlanRequest r;
  *r.mutable_graph() = ReadJson<v1::ModelGraph>("chain_small.json");
  *r.mutable_cluster() = ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  r.mutable_options()->set_num_ranks(4);
  r.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  r.mutable_options()->set_microbatches(8);
  r.mutable_options()->set_method(v1::METHOD_DP);
  return r;
}

}  // namespace pipeplan::server::testing

#endif  // PIPEPLAN_TESTS_UNIT_SERVER_TEST_UTIL_H_
