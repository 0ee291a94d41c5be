// The CPU pool a worker's computes run in (v1::CpuUse): this machine's name
// and the CPU set the process may run on, so the planner can tell which
// workers compete for the same cores (docs/observability.md, "CPU workers share cores").
#ifndef PIPEPLAN_WORKER_REPORT_CPU_USE_H_
#define PIPEPLAN_WORKER_REPORT_CPU_USE_H_

#include <optional>
#include <string>
#include <vector>

#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::worker {

// CPU indices as a compact list: {0, 1, 2, 5} -> "0-2,5".
std::string CpuListString(std::vector<int> cpus);

// This process's pool for computes that keep `threads` CPU threads busy;
// nullopt for threads <= 0 (computes that do not run on the CPUs) or when
// the affinity cannot be read.
std::optional<v1::CpuUse> CurrentCpuUse(int threads);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_REPORT_CPU_USE_H_
