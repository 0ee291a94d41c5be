#!/usr/bin/env bash
# The GPU machine's one command (issue 25): build with the PyTorch wheel's
# LibTorch, run `ctest -L gpu`, train with two workers sharing the GPU and
# compare the losses with one-process PyTorch, benchmark GPT-2 small (one
# worker holding the whole model against a plain PyTorch eager loop; then two
# stages on the one GPU, predicted against measured per stage), and print one
# table. At most GPU_CHECK_BUDGET seconds (480) in all: every phase runs under
# `timeout`, gets what is left of the budget at most, and a phase that fails
# or runs out of time is a FAILED row of the table; the next phase still runs
# when it can.
#
#   On the build machine:  bash ../shared/tools/gpu/pack.sh      (fills .gpu/)
#   On the GPU machine:    bash scripts/gpu_check.sh             (device cuda:0)
#   Anywhere, on the CPU:  bash scripts/gpu_check.sh --cpu       (or --dry-run)
#
# --cpu: the same phases on device cpu with tiny sizes and few steps (the
# tiny GPT-2 instead of GPT-2 small) against ./build (built incrementally),
# so that the script itself is tested without a GPU; the workers get no
# --torch-device and the one-worker ratio has no goal.
# --no-build: use the build as it is.
#
# The workers run with `--torch-device DEVICE` (a plan device mapped to a torch
# device on the host) and `--deterministic`, as the reference trainer does, so
# their losses can equal one-process PyTorch on the GPU; `ctest -L gpu` runs
# the same two-workers-on-one-GPU training as a CTest test.
#
# Environment: BUILD (GPU: /tmp/gpu-build, as .gpu/build-on-gpu.sh builds;
# --cpu: build), GPU_CHECK_DEVICE (cuda:0), GPU_CHECK_TRANSPORT (the workers'
# --transport: auto on a GPU, where two workers on one GPU must pick a path
# other than NCCL themselves; gloo on the CPU), GPU_CHECK_STEPS (100 training
# steps; --cpu 20), GPU_CHECK_BUDGET (480 s), PIPEPLAN_PYTHON (the Python with
# torch: by default the first of /usr/bin/python3 and python3 that imports
# it, as CMake picks it). Everything lands in out/gpu-check-<time>/: the
# phases' logs, the results (results.jsonl) and the table (table.txt).
# Exit status: 0 when no row FAILED, else 1.
set -uo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.." || exit 1
ROOT=$(pwd)

# --- the phases that are shell functions ---------------------------------------
# They run in a fresh `bash gpu_check.sh __phase FUNCTION` under `timeout`, with
# the settings exported by the main run; each writes its own row.
row() {  # phase status seconds result
  "$PY" "$ROOT/scripts/gpu_check/check.py" row --results "$RESULTS" --phase "$1" \
    --status "$2" --seconds "$3" --result "$4" ||
    printf '{"phase": "%s", "status": "%s", "seconds": %s, "result": "(row not written)"}\n' \
      "$1" "$2" "$3" >>"$RESULTS"
}
build_gpu() {
  [[ -f .gpu/build-on-gpu.sh ]] || {
    row build FAILED 0 \
      "no .gpu/build-on-gpu.sh: run bash ../shared/tools/gpu/pack.sh on the build machine"
    return 1
  }
  # Only what the phases run: the daemons, the CLI and the gpu tests' binaries
  # (the whole project takes minutes of the GPU machine's short lease).
  local targets="pipeplan-planner;pipeplan-worker;pipeplan;worker_torch_executor_test"
  targets+=";training_integration_test"
  BUILD=$BUILD CMAKE_ARGS="-DPIPEPLAN_PYTHON=$PY -DPIPEPLAN_BUILD_TARGETS=$targets ${CMAKE_ARGS:-}" \
    bash .gpu/build-on-gpu.sh || return 1
  # The configure summary: CUDA, NCCL, LibTorch (with CUDA?), the Python with torch.
  row build ok "$SECONDS" "$BUILD: $(grep -hoE 'pipeplan: .*' "$BUILD.configure.log" |
    sed 's/^pipeplan: //' | paste -sd ';' | sed 's/;/; /g')"
}
build_cpu() {
  cmake --build "$BUILD" -j"${PIPEPLAN_JOBS:-2}" --target pipeplan-planner pipeplan-worker \
    pipeplan || return 1
  row build ok "$SECONDS" "$BUILD (incremental: planner, worker, CLI)"
}
ctest_gpu() {
  local out rc=0
  out=$(ctest --test-dir "$BUILD" -L gpu --timeout 120 -j4 --output-on-failure 2>&1) || rc=$?
  printf '%s\n' "$out"
  local lines total passed skipped failed
  lines=$(grep -E '^ *[0-9]+/[0-9]+ Test +#' <<<"$out")
  total=$(grep -c . <<<"$lines")
  passed=$(grep -c ' Passed ' <<<"$lines")
  skipped=$(grep -cE 'Skipped|Not Run' <<<"$lines")
  failed=$((total - passed - skipped))
  if ((total == 0)); then
    if grep -q 'No tests were found' <<<"$out"; then
      row "ctest -L gpu" ok "$SECONDS" "0 tests: no test carries the gpu label in this build"
      return 0
    fi
    row "ctest -L gpu" FAILED "$SECONDS" "ctest exit $rc: $(tail -n 2 <<<"$out" | tr '\n' ' ')"
    return 1
  fi
  local status=ok detail="$total tests: $passed passed, $skipped skipped, $failed failed"
  ((failed > 0 || rc != 0)) && status=FAILED
  ((skipped > 0)) && detail+=" (skipped: $(grep -E 'Skipped|Not Run' <<<"$lines" |
    sed -E 's/.*Test +#[0-9]+: ([^ ]+).*/\1/' | paste -sd, | cut -c1-200))"
  row "ctest -L gpu" "$status" "$SECONDS" "$detail"
  [[ $status == ok ]]
}
if [[ ${1:-} == __phase ]]; then
  "$2"
  exit $?
fi

MODE=gpu
BUILD_PHASE=1
for arg in "$@"; do
  case $arg in
    --cpu | --dry-run) MODE=cpu ;;
    --no-build) BUILD_PHASE=0 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $arg (--cpu, --dry-run, --no-build, --help)" >&2; exit 2 ;;
  esac
done

T0=$SECONDS
BUDGET=${GPU_CHECK_BUDGET:-480}
RUN=$ROOT/out/gpu-check-$(date +%Y%m%d-%H%M%S)
[[ -e $RUN ]] && RUN=$RUN-$$
mkdir -p "$RUN"
RESULTS=$RUN/results.jsonl
: >"$RESULTS"

if [[ $MODE == cpu ]]; then
  BUILD=${BUILD:-$ROOT/build}
  DEVICE=cpu
  TRANSPORT=${GPU_CHECK_TRANSPORT:-gloo}
  STEPS=${GPU_CHECK_STEPS:-20}
  BENCH=(--model gpt2:tiny --batch 4 --seq 16 --microbatches 2 --memory-bytes 8e9)
  BENCH_STEPS=10
  export OMP_NUM_THREADS=1
else
  BUILD=${BUILD:-/tmp/gpu-build}
  DEVICE=${GPU_CHECK_DEVICE:-cuda:0}
  TRANSPORT=${GPU_CHECK_TRANSPORT:-auto}
  STEPS=${GPU_CHECK_STEPS:-100}
  BENCH=(--model gpt2:small --batch 8 --seq 1024 --microbatches 4 --memory-bytes 80e9)
  BENCH_STEPS=20
  # Run-to-run equal cuBLAS results for the loss comparison.
  export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
fi
BUILD=$(realpath -m "$BUILD")

# The Python with torch, as the top CMakeLists.txt picks it.
if [[ -z ${PIPEPLAN_PYTHON:-} ]]; then
  for candidate in /usr/bin/python3 "$(command -v python3 || true)"; do
    if [[ -x $candidate ]] && "$candidate" -c 'import torch' >/dev/null 2>&1; then
      PIPEPLAN_PYTHON=$candidate
      break
    fi
  done
fi
PY=${PIPEPLAN_PYTHON:-/usr/bin/python3}
export PIPEPLAN_PYTHON=$PY PY BUILD RESULTS
CHECK=("$PY" "$ROOT/scripts/gpu_check/check.py")

echo "gpu_check: mode $MODE, device $DEVICE, build $BUILD, python $PY, budget ${BUDGET}s"
echo "gpu_check: logs in $RUN"

rows_of() { grep -c "\"phase\": \"$1\"" "$RESULTS" 2>/dev/null || true; }

# phase NAME CAP_SECONDS COMMAND...: runs COMMAND under `timeout` with the
# smaller of CAP and what is left of the budget, its output in RUN/NAME.log.
# A command that writes no row of its own gets one here (its exit status, or
# the timeout). Returns the command's exit status.
phase() {
  local name=$1 cap=$2
  shift 2
  local left=$((BUDGET - (SECONDS - T0)))
  local limit=$((cap < left ? cap : left))
  local log=$RUN/${name//[^A-Za-z0-9_.-]/_}.log
  if ((limit < 15)); then
    row "$name" skipped 0 "no time left in the ${BUDGET}s budget"
    return 1
  fi
  local before start rc=0
  before=$(rows_of "$name")
  start=$SECONDS
  printf '== %-22s (up to %3ds) ... ' "$name" "$limit"
  timeout --kill-after=15 "$limit" "$@" >"$log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  echo "exit $rc after ${took}s"
  if [[ $(rows_of "$name") == "$before" ]]; then
    if ((rc == 124 || rc == 137)); then
      row "$name" FAILED "$took" "timed out after ${limit}s (log: $log)"
    elif ((rc != 0)); then
      row "$name" FAILED "$took" \
        "exit $rc: $(tail -n 3 "$log" | tr '\n' ' ' | cut -c1-300) (log: $log)"
    else
      row "$name" ok "$took" "(log: $log)"
    fi
  fi
  return "$rc"
}

# --- 1. build ------------------------------------------------------------------
if [[ $MODE == gpu && -f .gpu/env.sh ]]; then
  source .gpu/env.sh  # the unpacked Debian libraries, for the built binaries
fi
if ((BUILD_PHASE)); then
  phase build 300 bash "$SELF" __phase "build_$MODE"
else
  row build skipped 0 "--no-build: $BUILD as it is"
fi

# --- 2. ctest -L gpu -------------------------------------------------------------
phase "ctest -L gpu" 90 bash "$SELF" __phase ctest_gpu
# --- 3. two workers on one device --------------------------------------------------
COMMON=(--results "$RESULTS" --build "$BUILD" --device "$DEVICE" --transport "$TRANSPORT")
phase "train 2 workers" 150 "${CHECK[@]}" train --phase "train 2 workers" "${COMMON[@]}" \
  --work "$RUN/train" --steps "$STEPS" --timeout 140

# --- 4. benchmark: export, eager, one worker, two stages ---------------------------
BENCH_ARGS=("${COMMON[@]}" --work "$RUN/bench" "${BENCH[@]}" --steps "$BENCH_STEPS")
if phase "bench export" 120 "${CHECK[@]}" export --phase "bench export" "${BENCH_ARGS[@]}" \
  --timeout 110; then
  phase "bench eager PyTorch" 90 "${CHECK[@]}" eager --phase "bench eager PyTorch" \
    "${BENCH_ARGS[@]}" --timeout 80
  phase "bench 1 worker" 120 "${CHECK[@]}" one --phase "bench 1 worker" "${BENCH_ARGS[@]}" \
    --timeout 110
  phase "bench 2 stages" 150 "${CHECK[@]}" two --phase "bench 2 stages" "${BENCH_ARGS[@]}" \
    --timeout 140
else
  for p in "bench eager PyTorch" "bench 1 worker" "bench 2 stages"; do
    row "$p" skipped 0 "no exported model: bench export did not succeed"
  done
fi

# --- the table ---------------------------------------------------------------------
echo
echo "gpu_check: $MODE mode on $DEVICE, $((SECONDS - T0)) s in all"
"${CHECK[@]}" table --results "$RESULTS" | tee "$RUN/table.txt"
exit "${PIPESTATUS[0]}"
