// Returning freed heap memory to the operating system. glibc's malloc keeps
// freed chunks in per-thread arenas for reuse, so after a deleted job's
// rendezvous values or a large solve are freed the planner's RSS stays high:
//  * large blocks: glibc serves them from their own mappings (returned on
//    free) only until the first such block is freed, then raises the
//    threshold and keeps later ones in its arenas, whose free tops
//    malloc_trim does not release. KeepLargeAllocationsMapped fixes the
//    threshold;
//  * small blocks freed in bulk (a solve's graph): ReleaseFreedMemory hands
//    their whole free pages back. It walks every arena, so callers use it
//    after freeing a lot at once, never on hot paths.
//
// Thread safety: ReleaseFreedMemory may be called from any thread, without
// locks held; KeepLargeAllocationsMapped once, before threads start.
#ifndef PIPEPLAN_SERVER_BASE_RELEASE_MEMORY_H_
#define PIPEPLAN_SERVER_BASE_RELEASE_MEMORY_H_

namespace pipeplan::server {

// malloc_trim(0) with glibc; nothing elsewhere.
void ReleaseFreedMemory();

// Blocks of at least `bytes` get their own mapping, unmapped on free
// (mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD with glibc; nothing
// elsewhere). For the planner's main().
void KeepLargeAllocationsMapped(int bytes = 128 << 10);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_BASE_RELEASE_MEMORY_H_
