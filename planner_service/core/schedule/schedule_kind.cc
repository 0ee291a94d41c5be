#include "pipeplan/core/schedule/schedule_kind.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/enum_names.h"
#include "string_util.h"

namespace pipeplan::schedule {

namespace {

// In kAllScheduleKinds' order, the order the error message offers them.
constexpr auto kKindNames = MakeEnumNames<ScheduleKind>(
    "?", {{ScheduleKind::kGPipe, "GPipe"},
          {ScheduleKind::k1F1B, "1F1B"},
          {ScheduleKind::kInterleaved1F1B, "Interleaved1F1B"},
          {ScheduleKind::kLoopedBFS, "LoopedBFS"},
          {ScheduleKind::kInterleavedZeroBubble, "InterleavedZeroBubble"},
          {ScheduleKind::kZBVZeroBubble, "ZBVZeroBubble"},
          {ScheduleKind::kDualPipeV, "DualPipeV"}});

}  // namespace

std::string_view ScheduleKindName(ScheduleKind kind) { return kKindNames.Name(kind); }

absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  if (auto kind = kKindNames.Parse(internal::StripWhitespace(name), NameCase::kIgnoreCase)) {
    return *kind;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown schedule '%s'; valid names are %s", name, kKindNames.List(", ")));
}

bool IsVShaped(ScheduleKind kind) {
  return kind == ScheduleKind::kZBVZeroBubble || kind == ScheduleKind::kDualPipeV;
}

int StagesPerRank(ScheduleKind kind, int chunks_per_rank) {
  switch (kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B:
      return 1;
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kLoopedBFS:
    case ScheduleKind::kInterleavedZeroBubble:
      return chunks_per_rank;
    case ScheduleKind::kZBVZeroBubble:
    case ScheduleKind::kDualPipeV:
      return 2;
  }
  return 1;
}

}  // namespace pipeplan::schedule
