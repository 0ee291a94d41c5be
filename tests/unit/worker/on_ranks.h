// OnRanks: runs one body per rank on its own thread over one in-memory
// transport hub, the way the worker tests stand in for n processes.
#ifndef PIPEPLAN_TESTS_UNIT_WORKER_ON_RANKS_H_
#define PIPEPLAN_TESTS_UNIT_WORKER_ON_RANKS_H_

#include <memory>
#include <thread>
#include <vector>

#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {

// Runs `body(rank, transport)` on `n` threads over one MemoryHub; returns
// when every body has.
template <typename Body>
void OnRanks(int n, Body body) {
  MemoryHub hub(n);
  std::vector<std::unique_ptr<Transport>> transports;
  for (int r = 0; r < n; ++r) transports.push_back(hub.Connect(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(r, *transports[r]); });
  for (auto& t : threads) t.join();
}

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_TESTS_UNIT_WORKER_ON_RANKS_H_
