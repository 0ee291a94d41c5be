// Returning freed heap memory to the operating system. glibc's malloc keeps
// freed chunks in per-thread arenas for reuse, so after a deleted job's
// rendezvous values or a large solve are freed the planner's RSS stays high
// until something asks for the pages back. Callers do so after freeing a lot
// at once; the call walks every arena, so it is not for hot paths.
//
// Thread safety: may be called from any thread, without locks held.
#ifndef PIPEPLAN_SERVER_RELEASE_MEMORY_H_
#define PIPEPLAN_SERVER_RELEASE_MEMORY_H_

namespace pipeplan::server {

// malloc_trim(0) with glibc; nothing elsewhere.
void ReleaseFreedMemory();

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_RELEASE_MEMORY_H_
