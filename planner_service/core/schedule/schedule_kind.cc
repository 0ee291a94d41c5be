#include "pipeplan/core/schedule/schedule_kind.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "string_util.h"

namespace pipeplan::schedule {

std::string_view ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "GPipe";
    case ScheduleKind::k1F1B:
      return "1F1B";
    case ScheduleKind::kInterleaved1F1B:
      return "Interleaved1F1B";
    case ScheduleKind::kLoopedBFS:
      return "LoopedBFS";
    case ScheduleKind::kInterleavedZeroBubble:
      return "InterleavedZeroBubble";
    case ScheduleKind::kZBVZeroBubble:
      return "ZBVZeroBubble";
    case ScheduleKind::kDualPipeV:
      return "DualPipeV";
  }
  return "?";
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  const std::string_view trimmed = internal::StripWhitespace(name);
  for (ScheduleKind kind : kAllScheduleKinds) {
    if (absl::EqualsIgnoreCase(internal::ToAbsl(trimmed), internal::ToAbsl(ScheduleKindName(kind))))
      return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown schedule '%s'; valid names are %s", name,
                      absl::StrJoin(kAllScheduleKinds, ", ", [](std::string* out, ScheduleKind k) {
                        out->append(std::string(ScheduleKindName(k)));
                      })));
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
