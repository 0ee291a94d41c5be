// The worker's stdout: one `event=NAME key=value ...` line per event, flushed
// at once (integration tests and operators read it; docs/worker.md lists the
// events). Used by every part of the worker that logs an event.
#ifndef PIPEPLAN_WORKER_SRC_EVENT_LOG_H_
#define PIPEPLAN_WORKER_SRC_EVENT_LOG_H_

#include <cstdio>
#include <string>

namespace pipeplan::worker {

inline void Emit(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_EVENT_LOG_H_
