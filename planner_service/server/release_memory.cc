#include "pipeplan/server/release_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipeplan::server {

void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace pipeplan::server
