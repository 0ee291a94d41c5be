#include "pipeplan/server/base/release_memory.h"

// Any C library header defines __GLIBC__ (through <features.h>); test it
// only after one.
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipeplan::server {

void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void KeepLargeAllocationsMapped(int bytes) {
#if defined(__GLIBC__)
  // Setting either turns off glibc's dynamic adjustment of both.
  mallopt(M_MMAP_THRESHOLD, bytes);
  mallopt(M_TRIM_THRESHOLD, bytes);
#else
  (void)bytes;
#endif
}

}  // namespace pipeplan::server
