#include "pipeplan/core/schedule/csv.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using ::testing::HasSubstr;

void ExpectSameSchedule(const PipelineSchedule& a, const PipelineSchedule& b) {
  EXPECT_EQ(a.num_ranks, b.num_ranks);
  EXPECT_EQ(a.num_stages, b.num_stages);
  EXPECT_EQ(a.num_microbatches, b.num_microbatches);
  EXPECT_EQ(a.stage_to_rank, b.stage_to_rank);
  EXPECT_EQ(a.programs, b.programs);
}

TEST(CsvTest, RoundTripsEveryBuiltInScheduleComputeOnlyAndLowered) {
  for (ScheduleKind kind : kAllScheduleKinds) {
    absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, 3, 6, 2);
    ASSERT_TRUE(s.ok());
    absl::StatusOr<PipelineSchedule> back = ScheduleFromCsv(ScheduleToCsv(*s));
    ASSERT_TRUE(back.ok()) << ScheduleKindName(kind) << ": " << back.status();
    ExpectSameSchedule(*s, *back);
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
    ASSERT_TRUE(lowered.ok());
    absl::StatusOr<PipelineSchedule> lowered_back = ScheduleFromCsv(ScheduleToCsv(*lowered));
    ASSERT_TRUE(lowered_back.ok()) << lowered_back.status();
    ExpectSameSchedule(*lowered, *lowered_back);
  }
}

TEST(CsvTest, ReadsAUserScheduleWithIdleSlotsQuotesAndCrlf) {
  const std::string csv = "0F0,0F1,,0B0,,0B1\r\n\"\",1F0,1B0,\"1F1\",1B1,\r\n";
  absl::StatusOr<PipelineSchedule> s = ScheduleFromCsv(csv);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_ranks, 2);
  EXPECT_EQ(s->num_stages, 2);
  EXPECT_EQ(s->num_microbatches, 2);
  EXPECT_EQ(s->stage_to_rank, (std::vector<int>{0, 1}));
  EXPECT_EQ(testing::ProgramString(s->programs[0]), "0F0,0F1,_,0B0,_,0B1");
  EXPECT_EQ(testing::ProgramString(s->programs[1]), "_,1F0,1B0,1F1,1B1");
  EXPECT_EQ(ScheduleToCsv(*s), "0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
}

TEST(CsvTest, StreamAndFile) {
  std::istringstream in("0F0,0B0\n");
  absl::StatusOr<PipelineSchedule> s = ScheduleFromCsv(in);
  ASSERT_TRUE(s.ok());
  const std::string path = ::testing::TempDir() + "/schedule_csv_test.csv";
  {
    std::ofstream out(path);
    out << ScheduleToCsv(*s);
  }
  // The caller opens the file; the library parses the stream.
  std::ifstream file(path, std::ios::binary);
  absl::StatusOr<PipelineSchedule> loaded = ScheduleFromCsv(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameSchedule(*s, *loaded);
  std::remove(path.c_str());
  // A missing file is the caller's NOT_FOUND: cli_simulate_missing_csv.
}

TEST(CsvTest, RejectsBrokenSchedules) {
  EXPECT_THAT(std::string(ScheduleFromCsv("0F0,0Q0\n").status().message()),
              HasSubstr("rank 0 step 1"));
  EXPECT_THAT(std::string(ScheduleFromCsv("0F0,1F0\n1B0,0B0\n").status().message()),
              HasSubstr("stage 1 already appears on rank 0"));
  EXPECT_THAT(std::string(ScheduleFromCsv("0F0,0B0\n2F0,2B0\n").status().message()),
              HasSubstr("never mentions stage 1"));
  // Parses, but deadlocks: validation is on by default.
  EXPECT_THAT(std::string(ScheduleFromCsv("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n").status().message()),
              HasSubstr("rank 0 step 1 (0B0) can never run"));
  CsvOptions no_validation;
  no_validation.validate = false;
  EXPECT_TRUE(ScheduleFromCsv("0F0,0B0,0F1,0B1\n1F1,1F0,1B0,1B1\n", no_validation).ok());
  EXPECT_THAT(std::string(ScheduleFromCsv("\"0F0\n").status().message()),
              HasSubstr("unterminated quote"));
}

TEST(CsvTest, ExplicitMicrobatchesAndPlacement) {
  CsvOptions options;
  options.num_microbatches = 2;
  // Microbatch 1 is missing, which only an explicit count can reveal.
  EXPECT_THAT(std::string(ScheduleFromCsv("0F0,0B0\n", options).status().message()),
              HasSubstr("stage 0 microbatch 1 has no forward"));
  CsvOptions placed;
  placed.stage_to_rank = {0, 0};
  absl::StatusOr<PipelineSchedule> s = ScheduleFromCsv("0F0,1F0,1B0,0B0\n", placed);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_stages, 2);
}

}  // namespace
}  // namespace pipeplan::schedule
