// `pipeplan jobs watch JOB`: a job's progress until it ends — step of total,
// loss, samples/s, time left and plan version. On a terminal one line is
// rewritten in place; otherwise (a pipe, a log) a plain line per new step.
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "command.h"
#include "job_table.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/status_macros.h"
#include "progress/step_rows.h"

namespace pipeplan::cli {
namespace {

// Steps the rate is measured over.
constexpr int kWindow = 10;

bool Ended(v1::JobState s) {
  return s == v1::JOB_COMPLETED || s == v1::JOB_FAILED || s == v1::JOB_CANCELLED;
}

// "step 12/100  loss 2.31  41.5 samples/s  ETA 3m20s  plan v2" from the
// newest complete step; the rate from the complete steps' mean step time.
std::string ProgressLine(const v1::Job& job, const std::map<int64_t, StepRow>& rows) {
  const v1::TrainingSpec& t = job.training();
  std::string line = absl::StrCat("job ", job.id(), " ", JobStateText(job));
  int64_t last = -1;
  double seconds = 0;
  int complete = 0;
  std::optional<double> loss;
  for (const auto& [step, row] : rows) {
    if (!row.complete()) continue;
    last = step;
    seconds += row.step_seconds;
    ++complete;
    if (row.loss) loss = row.loss;
  }
  if (last < 0)
    return absl::StrCat(line, "  waiting for the first step  plan v", job.plan_version());
  absl::StrAppend(&line, "  step ", last + 1,
                  t.max_steps() > 0 ? absl::StrCat("/", t.max_steps()) : "");
  if (loss) absl::StrAppendFormat(&line, "  loss %.6g", *loss);
  const double mean = seconds / complete;
  if (mean > 0 && t.batch_size() > 0) {
    absl::StrAppendFormat(&line, "  %.1f samples/s", t.batch_size() / mean);
  }
  if (mean > 0 && t.max_steps() > last + 1) {
    const double left = (t.max_steps() - last - 1) * mean;
    absl::StrAppend(&line, "  ETA ",
                    left < 60 ? absl::StrFormat("%.1fs", left)
                              : absl::FormatDuration(absl::Seconds(std::round(left))));
  }
  absl::StrAppend(&line, "  plan v", job.plan_version());
  return line;
}

absl::Status JobsWatch(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(double interval, ctx.flags.GetDouble("interval", 1.0));
  if (!(interval > 0)) return common::UsageError("--interval wants positive seconds");
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  std::string shown;
  while (true) {
    PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, c->GetJob(ctx.args[0]));
    PIPEPLAN_ASSIGN_OR_RETURN(auto rows, LastSteps(*c, ctx.args[0], kWindow));
    const std::string line = ProgressLine(job, rows);
    if (line != shown) {
      // \r and clearing to the end of the line: the previous one may be longer.
      if (terminal) std::cout << "\r" << line << "\x1b[K" << std::flush;
      if (!terminal) std::cout << line << std::endl;
      shown = line;
    }
    if (Ended(job.state())) {
      if (terminal) std::cout << "\n";
      if (job.state() == v1::JOB_COMPLETED) return absl::OkStatus();
      // Failed or cancelled: the line above says why; the exit code says so.
      return absl::AbortedError(absl::StrCat("job ", job.id(), " ", JobStateText(job)));
    }
    absl::SleepFor(absl::Seconds(interval));
  }
}

}  // namespace

Command JobsWatchCommand() {
  Command c = JobCommand(
      "jobs watch", "follow a job until it ends: step/total, loss, samples/s, ETA, plan version",
      "On a terminal one line is rewritten in place; otherwise a plain line is printed\n"
      "when it changes. The rate and ETA come from the last 10 steps every rank reported.\n"
      "Exits 0 when the job completes and 1 when it fails or is cancelled.\n",
      JobsWatch);
  c.flags.Value("interval", "S", "seconds between looks at the planner (1)");
  return c;
}

}  // namespace pipeplan::cli
