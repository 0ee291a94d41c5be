#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 (ASan + UBSan over
# the whole project) into build-fuzz/ and runs each for a while, starting
# from its committed corpus. Prints execs/s and total execs per target; a
# crash stops that target and leaves the input in build-fuzz/crashes/.
#
#   ./scripts/fuzz.sh                       # every target, 60 s each
#   FUZZ_SECONDS=600 ./scripts/fuzz.sh plan_decoder worker_rpc
#   FUZZ_MERGE=1 ./scripts/fuzz.sh          # then add new coverage to tests/fuzz/corpus/
#   FUZZ_RUNS=1000000 ./scripts/fuzz.sh     # stop each at 1M execs (FUZZ_SECONDS caps it)
#
# New corpus entries go to build-fuzz/corpus/<target>/; FUZZ_MERGE=1 merges
# the ones that add coverage into tests/fuzz/corpus/<target>/ (commit them:
# the replay tests run them in every build).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH="${FUZZ_SECONDS:-60}"
JOBS="${PIPEPLAN_JOBS:-2}"
DIR=build-fuzz
ALL=(plan_request plan_decoder worker_rpc model_package schedule_csv)
targets=("$@")
if ((${#targets[@]} == 0)); then targets=("${ALL[@]}"); fi

cmake_args=(-S . -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
            -DCMAKE_CXX_COMPILER=clang++-14 -DPIPEPLAN_FUZZ=ON
            -DPIPEPLAN_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link
            -DPIPEPLAN_WITH_TORCH=OFF -DPIPEPLAN_WITH_NCCL=OFF)
if command -v ccache >/dev/null; then cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake "${cmake_args[@]}" >/dev/null
cmake --build "$DIR" -j"$JOBS" --target "${targets[@]/%/_fuzzer}"

mkdir -p "$DIR/crashes"
printf '%-16s %12s %12s %8s\n' target execs execs/s result
for t in "${targets[@]}"; do
  work="$DIR/corpus/$t"
  mkdir -p "$work"
  log="$DIR/$t.log"
  result=ok
  # -rss_limit_mb: a target that needs more than 2 GiB for one input is a
  # finding too.
  runs=()
  if [[ -n "${FUZZ_RUNS:-}" ]]; then runs=(-runs="$FUZZ_RUNS"); fi
  if ! "$DIR/tests/fuzz/${t}_fuzzer" "$work" "tests/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" \
      "${runs[@]}" -print_final_stats=1 -rss_limit_mb=2048 -max_len=4096 -timeout=20 \
      -artifact_prefix="$DIR/crashes/$t-" >"$log" 2>&1; then
    result="FAILED ($log)"
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  printf '%-16s %12s %12s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$result"
  if [[ -n "${FUZZ_MERGE:-}" ]]; then
    "$DIR/tests/fuzz/${t}_fuzzer" -merge=1 -max_len=4096 "tests/fuzz/corpus/$t" "$work" \
      >>"$log" 2>&1
  fi
done
