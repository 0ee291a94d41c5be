// The four-rank torch job and worker of the elastic and snapshot integration
// tests: the fixtures' small transformer (gpt.json, gpt.ptpkg, gpt_data.pt
// and cluster.json in one folder) created with the CLI, 1F1B, 4 microbatches
// of batch 8, AdamW at 1e-3, and `pipeplan-worker --executor torch`
// processes sharing one stage cache.
#ifndef PIPEPLAN_TESTS_INTEGRATION_TORCH_JOB_H_
#define PIPEPLAN_TESTS_INTEGRATION_TORCH_JOB_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "pipeplan/convert/proto_convert.h"
#include "planner_process.h"
#include "worker_process.h"

namespace pipeplan::testing {

// The tiny GPT's graph, package and 48 rows of data (make_fixtures.py) and a
// cluster.json of `devices` CPU devices on one host, all in `dir`; a test
// failure saying why when the fixtures cannot be made.
inline void WriteGptFixtures(const std::string& python, const std::string& source,
                             const std::string& dir, int devices) {
  std::string out;
  ASSERT_EQ(RunCommand({python, source + "/tests/models/make_fixtures.py", "--out-dir", dir,
                        "--model", "gpt", "--rows", "48"},
                       &out, absl::Seconds(300)),
            0)
      << out;
  std::ofstream cluster(dir + "/cluster.json");
  cluster << R"({"devices": [)";
  for (int d = 0; d < devices; ++d) {
    cluster << (d ? "," : "") << R"({"id": "cpu)" << d
            << R"(", "host": "h0", "flops": 1e12, "memory_bytes": 8e9})";
  }
  cluster << "]}";
}

// `jobs create` of the job with `extra` flags; the job's id, or "" (with a
// test failure saying why) when the CLI fails.
inline std::string CreateTorchJob(const std::string& cli, const std::string& planner,
                                  const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {cli,
                                   "--planner",
                                   planner,
                                   "jobs",
                                   "create",
                                   "--graph",
                                   dir + "/gpt.json",
                                   "--cluster",
                                   dir + "/cluster.json",
                                   "--ranks",
                                   "4",
                                   "--schedule",
                                   "1F1B",
                                   "--microbatches",
                                   "4",
                                   "--method",
                                   "dp",
                                   "--model-package",
                                   dir + "/gpt.ptpkg",
                                   "--data",
                                   "tensors:" + dir + "/gpt_data.pt",
                                   "--batch-size",
                                   "8",
                                   "--optimizer",
                                   "adamw",
                                   "--lr",
                                   "1e-3",
                                   "--json"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::string out;
  EXPECT_EQ(RunCommand(argv, &out, absl::Seconds(120)), 0) << out;
  v1::Job job;
  if (!ParseJson(out, &job).ok()) return "";
  return job.id();
}

// Worker `r` of the job as device cpu<r>; `started` numbers its log.
inline std::unique_ptr<WorkerProcess> StartTorchWorker(const std::string& planner,
                                                       const std::string& dir,
                                                       const std::string& job, int r, int started) {
  std::vector<std::string> args =
      WorkerArgs(planner, job, absl::StrCat("w", r), absl::StrCat("cpu", r));
  for (const char* a : {"--executor", "torch", "--stage-cache"}) args.push_back(a);
  args.push_back(dir + "/stage-cache");
  return std::make_unique<WorkerProcess>(dir, absl::StrCat("w", r, "-", started), args);
}

// step -> loss of the single-process reference trainer over `steps` steps of
// the same job (`python` runs `source`/client/python/pipeplan_reference_train.py).
inline std::map<int64_t, double> TorchJobReference(const std::string& python,
                                                   const std::string& source,
                                                   const std::string& dir, int steps) {
  std::string out;
  const std::string losses = dir + "/reference.json";
  EXPECT_EQ(RunCommand({python, source + "/client/python/pipeplan_reference_train.py", "--package",
                        dir + "/gpt.ptpkg", "--data", "tensors:" + dir + "/gpt_data.pt",
                        "--optimizer", "adamw", "--lr", "1e-3", "--batch-size", "8",
                        "--microbatches", "4", "--steps", absl::StrCat(steps), "--out", losses},
                       &out, absl::Seconds(300)),
            0)
      << out;
  std::ifstream in(losses);
  const std::string json((std::istreambuf_iterator<char>(in)), {});
  std::map<int64_t, double> want;
  // {"losses": [{"step": 0, "loss": ...}, ...]}
  size_t pos = 0;
  while ((pos = json.find("\"step\":", pos)) != std::string::npos) {
    const size_t loss = json.find("\"loss\":", pos);
    if (loss == std::string::npos) break;
    want[std::stoll(json.substr(pos + 7))] = std::stod(json.substr(loss + 7));
    pos = loss;
  }
  return want;
}

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_INTEGRATION_TORCH_JOB_H_
