// Compiling a plan's stages for the torch executor, cached.
//
// Stage artifacts depend on the plan (node -> stage, microbatch size), so a
// replan needs new ones. The worker runs the Python stage compiler
// (client/python/pipeplan_stage_compile.py) as a subprocess — the C++ side
// never embeds Python — into a cache directory keyed by (package digest,
// assignment, microbatch size, compiler), so the ranks of one host compile
// once and a return to an earlier plan costs nothing. "Compiler" is the
// bytes of the compiler script and of the pipeplan Python package beside it
// (its seeding of random operators, its tracer): stages an older compiler
// wrote (say, before dropout was seeded) are never reused by a newer one.
// The compiler writes atomically; a directory with a stages.json is
// complete.
#ifndef PIPEPLAN_WORKER_STAGE_COMPILER_H_
#define PIPEPLAN_WORKER_STAGE_COMPILER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pipeplan::worker {

struct StageCompileRequest {
  std::string python = PIPEPLAN_DEFAULT_PYTHON;
  // pipeplan_stage_compile.py
  std::string script;
  std::string package_dir;
  std::string package_digest;
  // Plan.node_stage.
  std::vector<int> node_stage;
  int64_t microbatch_size = 0;
  std::string cache_dir;
  absl::Duration timeout = absl::Minutes(30);
  // When set and it turns true, the compiler is killed within about a second
  // (a worker shutting down while a later version compiles in the background).
  const std::atomic<bool>* cancel = nullptr;
  // CPU priority of the compiler process (setpriority): 19 for compiles
  // ahead of need (contingency_compiler.h), which must not slow the steps
  // or the live version's compile.
  int niceness = 0;
};

// The cache directory this request compiles into.
std::string CompiledStagesDir(const StageCompileRequest& request);

// FNV-1a over the bytes of `script` and of every .py file below the
// `pipeplan` folder beside it, in path order (0 for files that cannot be
// read: such a compiler fails at once when run). Part of the cache key.
uint64_t CompilerFingerprint(const std::string& script);

// Returns CompiledStagesDir(request) once it holds complete stages (at once
// on a cache hit). INVALID_ARGUMENT when the compiler rejects its input
// (exit code 2: the plan and the package disagree) with the compiler's
// message; INTERNAL for any other failure (stderr's tail in the message);
// DEADLINE_EXCEEDED after `timeout`, CANCELLED after `cancel` (the compiler
// is killed).
absl::StatusOr<std::string> CompileStages(const StageCompileRequest& request);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_STAGE_COMPILER_H_
