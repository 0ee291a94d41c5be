// A Store decorator that tracks whether the backing store can write: a write
// that fails with RESOURCE_EXHAUSTED (disk full) or UNAVAILABLE (I/O error,
// read-only file system) marks it failing, the next write that succeeds
// marks it writing again. The planner turns this into its gRPC health
// (NOT_SERVING while writes fail) and keeps answering reads meanwhile.
//
// Thread safety: as the wrapped store; `on_change` runs on the thread whose
// write changed the state, possibly with the caller's locks held, so it must
// only record the state (e.g. set the health status), never call back into
// the registry.
#ifndef PIPEPLAN_SERVER_STORE_WRITE_HEALTH_STORE_H_
#define PIPEPLAN_SERVER_STORE_WRITE_HEALTH_STORE_H_

#include <functional>
#include <memory>

#include "pipeplan/server/store/store.h"

namespace pipeplan::server {

// `on_change(writing)` runs once per change of the state; it starts as
// writing. Errors of other codes (NOT_FOUND, ALREADY_EXISTS, ...) say
// nothing about the disk and leave the state alone.
std::unique_ptr<Store> WithWriteHealth(std::unique_ptr<Store> store,
                                       std::function<void(bool writing)> on_change);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_STORE_WRITE_HEALTH_STORE_H_
