#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan::schedule {

bool PipelineSchedule::HasCommunication() const {
  for (const RankProgram& program : programs) {
    for (const std::optional<Action>& slot : program) {
      if (slot && IsCommunication(slot->type)) return true;
    }
  }
  return false;
}

int PipelineSchedule::NumActions() const {
  int n = 0;
  for (const RankProgram& program : programs) {
    for (const std::optional<Action>& slot : program) n += slot.has_value();
  }
  return n;
}

std::vector<int> LoopedStageToRank(int ranks, int stages) {
  std::vector<int> mapping(stages);
  for (int s = 0; s < stages; ++s) mapping[s] = s % ranks;
  return mapping;
}

std::vector<int> VShapeStageToRank(int ranks) {
  std::vector<int> mapping(2 * ranks);
  for (int s = 0; s < 2 * ranks; ++s) mapping[s] = s < ranks ? s : 2 * ranks - 1 - s;
  return mapping;
}

}  // namespace pipeplan::schedule
