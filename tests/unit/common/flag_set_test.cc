#include "pipeplan/common/flag_set.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/version.h"

namespace pipeplan::common {
namespace {

FlagSet Example() {
  FlagSet f("test");
  f.Value("graph", "FILE", "model graph")
      .Value("ranks", "P", "pipeline ranks")
      .Alias("stages")
      .Value("output", "FMT", "json or table")
      .Short('o')
      .Switch("json", "same as -o json");
  return f;
}

TEST(FlagSet, AcceptsEveryFormAndCollectsPositionals) {
  auto f = Example().Parse({"--graph", "g.json", "JOB", "--ranks=4", "-o", "json", "--json"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f->Get("graph"), "g.json");
  EXPECT_EQ(*f->GetInt("ranks", 0), 4);
  EXPECT_EQ(*f->Get("output"), "json");
  EXPECT_TRUE(f->Has("json"));
  EXPECT_EQ(f->positionals(), std::vector<std::string>{"JOB"});
  EXPECT_EQ(*Example().Parse({"-ojson"})->Get("output"), "json");
  EXPECT_EQ(*Example().Parse({"-o=table"})->Get("output"), "table");
  // After `--` everything is positional; a value may start with '-'.
  f = Example().Parse({"--ranks", "-1", "--", "--graph"});
  EXPECT_EQ(*f->GetInt("ranks", 0), -1);
  EXPECT_EQ(f->positionals(), std::vector<std::string>{"--graph"});
}

TEST(FlagSet, ErrorsAreUsageErrorsNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--rank", "2"}, "unknown flag --rank; did you mean --ranks?"},
           {{"-x"}, "unknown flag -x"},
           {{"--graph"}, "--graph needs a value"},
           {{"--json=yes"}, "--json takes no value"},
           {{"--stages", "2", "--ranks", "2"}, "give --ranks or its deprecated alias, not both"},
       }) {
    absl::StatusOr<ParsedFlags> f = Example().Parse(c.args);
    ASSERT_FALSE(f.ok()) << c.message;
    EXPECT_TRUE(IsUsageError(f.status())) << f.status();
    EXPECT_EQ(ExitCodeFor(f.status()), kExitUsage);
    EXPECT_TRUE(absl::StrContains(f.status().message(), c.message)) << f.status();
  }
  auto f = Example().Parse({"--ranks", "x"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(IsUsageError(f->GetInt("ranks", 0).status()));
  EXPECT_TRUE(absl::StrContains(f->GetInt("ranks", 0).status().message(), "--ranks"));
  EXPECT_TRUE(IsUsageError(f->Require("graph").status()));
}

TEST(FlagSet, DeprecatedAliasSetsTheFlag) {
  auto f = Example().Parse({"--stages", "3"});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->GetInt("ranks", 0), 3);
  EXPECT_FALSE(f->Has("stages"));
}

TEST(FlagSet, HelpWinsOverErrors) {
  auto f = Example().Parse({"--no-such", "--help"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->help_requested());
  // After `--`, --help is an argument.
  f = Example().Parse({"--", "--help"});
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->help_requested());
  const std::string help = Example().Help();
  EXPECT_TRUE(absl::StrContains(help, "-o, --output FMT")) << help;
  EXPECT_TRUE(absl::StrContains(help, "(--stages is a deprecated alias)")) << help;
}

TEST(FlagSet, UntilPositionalStopsAtTheCommand) {
  auto f = Example().Parse({"--graph", "g", "plan", "--no-such"}, FlagSet::Mode::kUntilPositional);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->consumed(), 2u);
  EXPECT_TRUE(f->positionals().empty());
}

TEST(ParsedFlags, ReadIntegerChecksTheRangeOfItsType) {
  FlagSet flags("test");
  flags.Value("n", "N", "").Value("m", "N", "").Value("k", "N", "");
  auto f = flags.Parse({"--n", "4294967296", "--m", "7", "--k", "-1"});
  ASSERT_TRUE(f.ok()) << f.status();
  uint32_t narrow = 5;
  absl::Status s = f->ReadInteger("n", 0, &narrow);
  EXPECT_TRUE(IsUsageError(s));
  EXPECT_EQ(s.message(), "--n wants an integer from 0 to 4294967295, got 4294967296");
  EXPECT_EQ(narrow, 5u);  // refused, not wrapped to 0
  int64_t wide = 0;
  ASSERT_TRUE(f->ReadInteger("n", 0, &wide).ok());
  EXPECT_EQ(wide, int64_t{1} << 32);
  s = f->ReadInteger("k", 0, &wide);
  EXPECT_EQ(s.message(), "--k wants an integer >= 0, got -1");
  int small = 0;
  EXPECT_EQ(f->ReadInteger("m", 8, &small).message(),
            "--m wants an integer from 8 to 2147483647, got 7");
  ASSERT_TRUE(f->ReadInteger("m", 7, &small).ok());
  EXPECT_EQ(small, 7);
  int absent = 3;
  ASSERT_TRUE(f->ReadInteger("absent", 1, &absent).ok());
  EXPECT_EQ(absent, 3);
}

TEST(ParsedFlags, ReadNumberAndSecondsWantFiniteNumbersInRange) {
  FlagSet flags("test");
  flags.Value("zero", "X", "").Value("inf", "X", "").Value("half", "S", "");
  auto f = flags.Parse({"--zero", "0", "--inf", "inf", "--half", "0.5"});
  ASSERT_TRUE(f.ok()) << f.status();
  double x = 2;
  ASSERT_TRUE(f->ReadNumber("zero", /*allow_zero=*/true, &x).ok());
  EXPECT_EQ(x, 0);
  x = 2;
  EXPECT_EQ(f->ReadNumber("zero", /*allow_zero=*/false, &x).message(),
            "--zero wants a positive number, got \"0\"");
  EXPECT_EQ(x, 2);
  EXPECT_EQ(f->ReadNumber("inf", /*allow_zero=*/true, &x).message(),
            "--inf wants a non-negative number, got \"inf\"");
  absl::Duration d = absl::Seconds(9);
  ASSERT_TRUE(f->ReadSeconds("half", /*allow_zero=*/false, &d).ok());
  EXPECT_EQ(d, absl::Milliseconds(500));
  EXPECT_TRUE(IsUsageError(f->ReadSeconds("zero", /*allow_zero=*/false, &d)));
  EXPECT_EQ(d, absl::Milliseconds(500));
  ASSERT_TRUE(f->ReadSeconds("absent", /*allow_zero=*/false, &d).ok());
  EXPECT_EQ(d, absl::Milliseconds(500));
}

// What a binary's main() gets back: the flags, or the exit code after
// --help, --version or a bad flag, with what it printed.
struct MainRun {
  std::optional<ParsedFlags> flags;
  int exit_code = -1;
  std::string out;
  std::string err;
};

MainRun RunMain(const FlagSet& flags, const std::vector<std::string>& args) {
  MainRun run;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  run.flags = ParseMainFlags(flags, "--graph FILE [flags]", args, &run.exit_code);
  run.out = testing::internal::GetCapturedStdout();
  run.err = testing::internal::GetCapturedStderr();
  return run;
}

TEST(ParseMainFlags, AnswersHelpVersionAndBadFlags) {
  FlagSet flags = Example();
  flags.Switch("version", "print the version and exit");

  MainRun run = RunMain(flags, {"--graph", "g.json", "--help"});
  EXPECT_FALSE(run.flags.has_value());
  EXPECT_EQ(run.exit_code, kExitOk);
  EXPECT_TRUE(absl::StartsWith(run.out, "usage: test --graph FILE [flags]\n\n")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "-o, --output FMT")) << run.out;

  run = RunMain(flags, {"--version"});
  EXPECT_FALSE(run.flags.has_value());
  EXPECT_EQ(run.exit_code, kExitOk);
  EXPECT_EQ(run.out, VersionLine("test"));

  run = RunMain(flags, {"--no-such"});
  EXPECT_FALSE(run.flags.has_value());
  EXPECT_EQ(run.exit_code, kExitUsage);
  EXPECT_TRUE(absl::StartsWith(run.err, "test: ")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--no-such")) << run.err;
  EXPECT_TRUE(absl::EndsWith(run.err, "\nrun `test --help` for usage\n")) << run.err;
  EXPECT_EQ(run.out, "");

  run = RunMain(flags, {"--graph", "g.json", "JOB"});
  ASSERT_TRUE(run.flags.has_value());
  EXPECT_EQ(*run.flags->Get("graph"), "g.json");
  EXPECT_EQ(run.flags->positionals(), std::vector<std::string>{"JOB"});
  EXPECT_EQ(run.out + run.err, "");
}

TEST(ParseMainFlags, VersionIsAFlagOnlyWhereDeclared) {
  MainRun run = RunMain(Example(), {"--version"});
  EXPECT_FALSE(run.flags.has_value());
  EXPECT_EQ(run.exit_code, kExitUsage);
  EXPECT_EQ(run.out, "");
}

TEST(UsageFailure, PointsToTheCommandsHelp) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(UsageFailure("pipeplan", "--ranks wants an integer", "jobs create"), kExitUsage);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "pipeplan: --ranks wants an integer\nrun `pipeplan jobs create --help` for usage\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(UsageFailure("pipeplan-worker", "unexpected argument \"x\""), kExitUsage);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "pipeplan-worker: unexpected argument \"x\"\nrun `pipeplan-worker --help` for usage\n");
}

TEST(ExitCode, SharedTable) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::InternalError("x")), 1);
  // A planner's INVALID_ARGUMENT (a bad graph) is a runtime error, not usage.
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("graph.nodes[0]")), 1);
  EXPECT_EQ(ExitCodeFor(UsageError("--x")), 2);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("x")), 3);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("x")), 3);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("x")), 4);
}

TEST(Version, LineNamesTheProgramAndVersion) {
  const std::string line = VersionLine("pipeplan-planner");
  EXPECT_TRUE(absl::StartsWith(line, std::string("pipeplan-planner ") + Version())) << line;
}

}  // namespace
}  // namespace pipeplan::common
