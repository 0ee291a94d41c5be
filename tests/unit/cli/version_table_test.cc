// `pipeplan jobs versions`: each version's prediction (made before it ran)
// against what it measured, the error, and how the switch into it turned
// out (predicted gain against measured gain), in text and JSON.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "job_table.h"

namespace pipeplan::cli {
namespace {

// Version 1 (no prediction) measured 0.4 s; version 2 was predicted at
// 0.25 s (p50 0.26, p90 0.3) from version 1 scored at 0.38 s, and measures
// 0.27 s now.
struct History {
  std::vector<v1::VersionedPlan> versions;
  v1::Job job;
};

History MakeHistory() {
  History h;
  h.versions.resize(2);
  h.versions[0].set_version(1);
  h.versions[0].mutable_plan()->set_step_seconds(0.3);
  h.versions[1].set_version(2);
  h.versions[1].set_reason("calibration: device c2 is 2.0x slower than modelled");
  v1::VersionPrediction* p = h.versions[1].mutable_prediction();
  p->set_step_seconds(0.25);
  p->set_p50_step_seconds(0.26);
  p->set_p90_step_seconds(0.3);
  p->set_calibrated_on_version(1);
  p->set_previous_predicted_step_seconds(0.38);
  p->set_previous_measured_step_seconds(0.4);
  p->set_trigger("calibration");
  h.job.mutable_observation()->set_plan_version(2);
  h.job.mutable_observation()->set_steps(10);
  h.job.mutable_observation()->set_measured_step_seconds(0.27);
  return h;
}

// The text after `"key": ` in the `row`-th row of `json` (rows start at
// "{"): a number or null.
std::string Field(const std::string& json, int row, const std::string& key) {
  size_t at = 0;
  for (int r = 0; r <= row; ++r) at = json.find('{', at + 1);
  const size_t end = json.find('}', at);
  const size_t k = json.find("\"" + key + "\": ", at);
  if (k == std::string::npos || k > end) return "missing";
  const size_t v = k + key.size() + 4;
  return json.substr(v, json.find_first_of(",}", v) - v);
}

double Number(const std::string& json, int row, const std::string& key) {
  return std::stod(Field(json, row, key));
}

TEST(VersionTable, JsonHasPredictedMeasuredErrorAndGains) {
  const History h = MakeHistory();
  const std::string json = VersionsJson(h.versions, h.job);
  // Version 1: measured by version 2's record, no prediction.
  EXPECT_EQ(Number(json, 0, "measured_step_seconds"), 0.4) << json;
  EXPECT_EQ(Field(json, 0, "prediction_error_ratio"), "null") << json;
  EXPECT_EQ(Field(json, 0, "predicted_gain_ratio"), "null") << json;
  EXPECT_EQ(Number(json, 1, "predicted_step_seconds"), 0.25);
  EXPECT_EQ(Number(json, 1, "predicted_p50_step_seconds"), 0.26);
  EXPECT_EQ(Number(json, 1, "predicted_p90_step_seconds"), 0.3);
  EXPECT_EQ(Number(json, 1, "calibrated_on_version"), 1);
  EXPECT_EQ(Number(json, 1, "measured_step_seconds"), 0.27);
  EXPECT_NEAR(Number(json, 1, "prediction_error_ratio"), 0.02 / 0.27, 1e-12);
  EXPECT_NEAR(Number(json, 1, "predicted_gain_ratio"), 0.13 / 0.38, 1e-12);
  EXPECT_NEAR(Number(json, 1, "measured_gain_ratio"), 0.13 / 0.4, 1e-12);
  EXPECT_EQ(Field(json, 1, "trigger"), "\"calibration\"");
}

TEST(VersionTable, TextShowsTheSameRows) {
  const History h = MakeHistory();
  const std::string text = FormatVersions(h.versions, h.job);
  EXPECT_NE(text.find("PREDICTED"), std::string::npos) << text;
  EXPECT_NE(text.find("7.4%"), std::string::npos) << text;
  EXPECT_NE(text.find("34.2%/32.5%"), std::string::npos) << text;
  // A current version without measured steps shows no error.
  History fresh = MakeHistory();
  fresh.job.mutable_observation()->set_steps(0);
  EXPECT_EQ(FormatVersions(fresh.versions, fresh.job).find("7.4%"), std::string::npos);
}

}  // namespace
}  // namespace pipeplan::cli
