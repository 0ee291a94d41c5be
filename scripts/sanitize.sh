#!/usr/bin/env bash
# The sanitizer leg of CI: AddressSanitizer + UndefinedBehaviorSanitizer
# (-DPIPEPLAN_SANITIZE=address,undefined) over the C++ unit tests of the
# planning core, the schedule library, convert, the server, the worker
# (without torch) and the flag parser, and over every fuzz corpus
# (tests/fuzz); with PIPEPLAN_SANITIZE_LABELS="unit integration" also over
# the integration tests that run without torch: a sanitized pipeplan-planner,
# pipeplan-worker and CLI as real processes on 127.0.0.1 (a finding, or a
# leak at a clean exit, makes the child exit non-zero and its test fail).
# In a build directory of their own. Only the binaries of
# tests with these labels are built (the unit_test_binaries and
# integration_test_binaries targets, so a new test joins without editing this
# file); any sanitizer finding aborts its test, and any failing test fails
# the run.
#
#   ./scripts/sanitize.sh                       # after ./scripts/setup.sh: unit tests
#   PIPEPLAN_SANITIZE_LABELS="unit integration" ./scripts/sanitize.sh
#
# ThreadSanitizer is a leg of its own (scripts/tsan.sh calls this script
# with PIPEPLAN_SANITIZE=thread): Debian's Abseil is not built with it, so
# that build links tests/support/tsan_absl_sync.cc ahead of Abseil to tell
# TSan about absl::Mutex, CondVar and Notification.
#
# PIPEPLAN_SANITIZE_TARGETS builds these targets instead of the labels'
# *_test_binaries; PIPEPLAN_SANITIZE_OPT sets the optimization (-O0; TSan
# runs 5-10x slower at -O0 than at -O1).
#
# Compiler: clang++-14 (setup.sh installs it; it builds this 2.5x faster than
# GCC at the same settings), else $CXX or c++. -O0 -g1 keeps the build short
# (the leg's cost is mostly compiling) and the stack traces readable; the
# planning core alone is compiled at -O1 (planner_service/core/CMakeLists.txt),
# whose searches at -O0 were most of the tests' time.
set -euo pipefail
cd "$(dirname "$0")/.."

SANITIZE="${PIPEPLAN_SANITIZE:-address,undefined}"
DIR="${PIPEPLAN_SANITIZE_DIR:-build-asan}"
JOBS="${PIPEPLAN_JOBS:-2}"
read -r -a LABELS <<<"${PIPEPLAN_SANITIZE_LABELS:-unit}"
read -r -a TARGETS <<<"${PIPEPLAN_SANITIZE_TARGETS:-${LABELS[*]/%/_test_binaries}}"
OPT="${PIPEPLAN_SANITIZE_OPT:--O0}"
# Cases that assert wall time or compare measured with predicted step
# times, which -O0 and the sanitizers stretch (the deadline tests overran
# their 0.2 s and 2 s bounds by 10-15% on a loaded 2-core machine) ...
# (the solvers' own deadline figures live in bench/deadline_bench.cc) ...
TIMED='^FidelityIntegration\.|^ReplanIntegration\.SlowWorker'
# ... and cases that assert the planner's RSS, which ASan's allocator decides
# (freed blocks wait in its quarantine instead of going back to the OS; red
# zones around each): a deleted job's 300 MiB stayed at 429 MiB of RSS.
TIMED+='|^PlannerLimits\.HostileMixStaysUnderTheBounds$'
TIMED+='|^PlannerLimits\.DeletingAJobGivesItsRendezvousMemoryBack$'

start=$(date +%s)
CXX="${CXX:-$(command -v clang++-14 || command -v c++)}"
cmake_args=(-S . -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=$OPT -g1"
            "-DCMAKE_CXX_COMPILER=$CXX" "-DPIPEPLAN_SANITIZE=$SANITIZE"
            -DPIPEPLAN_WITH_TORCH=OFF -DPIPEPLAN_WITH_NCCL=OFF)
if command -v ccache >/dev/null && [[ -z "${CI:-}" ]]; then
  cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake "${cmake_args[@]}" >/dev/null

cmake --build "$DIR" -j"$JOBS" --target "${TARGETS[@]}"
built=$(date +%s)

# CTest knows every test of the project once the binaries are built; run
# the ones with those labels whose program is a binary of this build
# (GoogleTest cases and corpus replays; not the Python checks, and none
# whose binary was left out).
regex=$("${PIPEPLAN_PYTHON:-/usr/bin/python3}" - "$DIR" "${LABELS[@]}" <<'PY'
import json, os, re, subprocess, sys
build = os.path.abspath(sys.argv[1])
wanted = set(sys.argv[2:])
info = json.loads(subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                                 check=True, capture_output=True, text=True).stdout)
names = []
for t in info["tests"]:
    cmd = t.get("command") or []
    labels = next((p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"), [])
    program = os.path.abspath(cmd[0]) if cmd else ""
    if wanted & set(labels) and program.startswith(build + "/") and os.path.exists(program):
        names.append("^" + re.escape(t["name"]) + "$")
if not names:
    sys.exit("sanitize: no test selected")
print("|".join(names))
PY
)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/support/tsan_suppressions.txt}"
ctest --test-dir "$DIR" -R "$regex" -E "$TIMED" --output-on-failure -j"$JOBS" --timeout 900
echo "sanitize ($SANITIZE): build $((built - start)) s, tests $(($(date +%s) - built)) s"
