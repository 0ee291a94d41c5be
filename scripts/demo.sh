#!/usr/bin/env bash
# pipeplan's main job in one command: plan a model, train it through the
# plan on two workers, replan while it trains, and show what happened.
#
#   ./scripts/demo.sh            # builds first (./scripts/setup.sh) if needed
#
# Phases: build (./scripts/setup.sh when build/ lacks a binary; the three
# binaries alone when a source changed) -> a planner on its embedded store
# (a fresh data dir, a free loopback port) -> export tests/models/tiny_models.py's GPT (torch.fx) and make its
# data -> create a training job (2 ranks, 1F1B) -> two workers (torch
# executor, CPU, Gloo) -> train with a progress line -> `jobs replan` to
# Interleaved1F1B at step DEMO_REPLAN_AT, and wait until the workers train on
# version 2 -> train to the end -> the plan versions, the plan, the loss curve
# and predicted against measured step time per version.
#
# Everything lands in out/demo-<timestamp>/ (printed at the start; DEMO_OUT): the
# planner's and workers' logs, model.json and model.ptpkg/, plan-v1.txt,
# plan-v2.txt, losses.csv, reports.json, versions.json, job.json.
# Every wait is bounded; any failed phase (a process that died, no step
# within its time, no switch to version 2, a non-finite loss) exits 1 and
# names it. On exit, Ctrl-C or SIGTERM it stops the processes it started,
# and only those.
#
# Environment: DEMO_STEPS (240), DEMO_REPLAN_AT (10), BUILD (./build; another
# build dir must exist already: setup.sh builds ./build), DEMO_OUT (out: the
# folder the run folder goes in; the test suite's demo_test uses its own),
# CI=true for plain progress lines (also when stdout is not a terminal).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
PY=${PIPEPLAN_PYTHON:-/usr/bin/python3}  # the Python with torch (README, "GPU nodes")
STEPS=${DEMO_STEPS:-240}
REPLAN_AT=${DEMO_REPLAN_AT:-10}
BATCH=16
HELPER=("$PY" scripts/demo/helper.py)
PLANNER_BIN=$BUILD/planner_service/server/pipeplan-planner
WORKER_BIN=$BUILD/worker_daemon/pipeplan-worker
CLI_BIN=$BUILD/client/pipeplan

MAIN_PID=$BASHPID
PIDS=()      # every process this script started and may still have to stop
PHASE="start"
T0=$SECONDS

say() { printf '%s\n' "$*"; }
phase() {
  PHASE=$1
  printf '\n== %s  (%ds)\n' "$1" $((SECONDS - T0))
}
fail() {
  say "demo: FAILED in phase \"$PHASE\": $*" >&2
  [[ -n "${RUN:-}" ]] && say "demo: logs in $RUN" >&2
  exit 1
}

# Stops what we started: the workers and helpers first, so that they can
# still tell the planner they left, then the planner. Each: TERM, up to 5 s,
# then KILL.
stop() {
  local live=()
  for pid in "$@"; do kill -0 "$pid" 2>/dev/null && live+=("$pid"); done
  ((${#live[@]})) || return 0
  kill -TERM "${live[@]}" 2>/dev/null || true
  for _ in $(seq 50); do
    local any=0
    for pid in "${live[@]}"; do kill -0 "$pid" 2>/dev/null && any=1; done
    ((any)) || break
    sleep 0.1
  done
  for pid in "${live[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      say "demo: pid $pid did not stop on SIGTERM within 5 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  wait "${live[@]}" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  [[ $BASHPID == "$MAIN_PID" ]] || exit "$rc"
  trap - EXIT INT TERM
  local first=()
  for pid in "${PIDS[@]}"; do [[ $pid == "${PLANNER_PID:-}" ]] || first+=("$pid"); done
  stop "${first[@]}"
  [[ -n ${PLANNER_PID:-} ]] && stop "$PLANNER_PID"
  exit "$rc"
}
interrupted() {
  say "" >&2
  say "demo: interrupted in phase \"$PHASE\"; stopping the processes it started" >&2
  [[ -n "${RUN:-}" ]] && say "demo: logs in $RUN" >&2
  exit 130
}
trap cleanup EXIT
trap interrupted INT TERM
trap 'fail "a command failed (line $LINENO, exit $?)"' ERR

# Runs a command in the background and waits for it, so that Ctrl-C and
# SIGTERM reach our trap at once instead of after the command ends.
waitable() {
  "$@" &
  local pid=$!
  PIDS+=("$pid")
  local rc=0
  wait "$pid" || rc=$?
  forget "$pid"
  return "$rc"
}
# Drops a reaped child from PIDS: its id may be reused by then.
forget() {
  local keep=()
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# --- 1. build --------------------------------------------------------------
phase "1/7 build"
missing=""
for b in "$PLANNER_BIN" "$WORKER_BIN" "$CLI_BIN"; do [[ -x $b ]] || missing="$b"; done
TARGETS=(pipeplan-planner pipeplan-worker pipeplan)
if [[ -n $missing || ! -f $BUILD/build.ninja ]]; then
  say "no ${missing:-build} yet: ./scripts/setup.sh (the Debian packages, then the build)"
  ./scripts/setup.sh || fail "./scripts/setup.sh failed"
elif ! ninja -C "$BUILD" -n "${TARGETS[@]}" | grep "no work to do" > /dev/null; then
  say "sources changed since the last build: cmake --build $BUILD --target ${TARGETS[*]}"
  cmake --build "$BUILD" -j"${PIPEPLAN_JOBS:-2}" --target "${TARGETS[@]}" ||
    fail "the build failed"
else
  say "$BUILD/ is up to date"
fi

RUN=${DEMO_OUT:-out}/demo-$(date +%Y%m%d-%H%M%S)
[[ -e $RUN ]] && RUN=$RUN-$$
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
say "run folder: $RUN"

# --- 2. planner --------------------------------------------------------------
phase "2/7 planner"
# Its embedded store (SQLite) in a fresh data dir; port 0: a free port, which
# it prints as "listening on HOST:PORT". --replan off: the one replan below is
# the demo's own (`jobs replan`), so the run is the same every time.
: > "$RUN/planner.out"
"$PLANNER_BIN" --listen 127.0.0.1:0 --metrics-listen off --data-dir "$RUN/planner" \
  --replan off --drain-seconds 0 > "$RUN/planner.out" 2> "$RUN/planner.log" &
PIDS+=($!)
PLANNER_PID=$!
ADDR=""
for _ in $(seq 100); do  # 20 s
  ADDR=$(sed -n 's/^listening on //p;T;q' "$RUN/planner.out")
  [[ -n $ADDR ]] && break
  kill -0 "$PLANNER_PID" 2>/dev/null || fail "the planner exited: $(tail -3 "$RUN/planner.log")"
  sleep 0.2
done
[[ -n $ADDR ]] || fail "the planner did not print its address within 20 s (see planner.log)"
PP="$CLI_BIN --planner $ADDR"
say "planner pid $PLANNER_PID on $ADDR (data dir $RUN/planner)"

# --- 3. model ----------------------------------------------------------------
phase "3/7 export a model"
# A GPT (tiny: 2 blocks, width 32, vocabulary 64, 16 tokens; a tied LM head),
# exported with torch.fx as a user's model would be: the graph the planner
# splits and the package the workers train.
# The data (helper.py data) is written meanwhile.
"${HELPER[@]}" data --out "$RUN/data.pt" > "$RUN/data.log" 2>&1 &
DATA_PID=$!
PIDS+=("$DATA_PID")
say "\$ pipeplan_export.py --model tiny_models:gpt --package model.ptpkg --loss cross_entropy"
PYTHONPATH=tests/models waitable "$PY" client/python/pipeplan_export.py --model tiny_models:gpt \
  --out "$RUN/model.json" --package "$RUN/model.ptpkg" --loss cross_entropy --quiet \
  > "$RUN/export.log" 2>&1 || fail "the export failed: $(tail -3 "$RUN/export.log")"
sed 's/^/  /' "$RUN/export.log"
rc=0
wait "$DATA_PID" || rc=$?
forget "$DATA_PID"
[[ $rc -eq 0 ]] || fail "could not write the data: $(tail -3 "$RUN/data.log")"
sed 's/^/  /' "$RUN/data.log"
# Two CPU "devices" on this host, with rough speeds for one core and Gloo over
# loopback; the planner calibrates them from the workers' timings.
cat > "$RUN/cluster.json" <<'JSON'
{"devices": [{"id": "cpu0", "host": "localhost", "flops": 1e9, "memory_bytes": 4e9},
             {"id": "cpu1", "host": "localhost", "flops": 1e9, "memory_bytes": 4e9}],
 "intra_host_bandwidth": 2e8, "intra_host_latency": 1e-4}
JSON

# --- 4. job ------------------------------------------------------------------
phase "4/7 create the job"
$PP -o json jobs create --name demo --graph "$RUN/model.json" --cluster "$RUN/cluster.json" \
  --ranks 2 --schedule 1F1B --microbatches 4 \
  --model-package "$RUN/model.ptpkg" --loss cross_entropy --optimizer adamw --lr 3e-3 \
  --data "tensors:$RUN/data.pt" --batch-size "$BATCH" --max-steps "$STEPS" \
  > "$RUN/job-create.json" 2> "$RUN/job-create.err" ||
  fail "jobs create failed: $(cat "$RUN/job-create.err")"
JOB=$("$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])' < "$RUN/job-create.json")
say "job $JOB: $STEPS steps of $BATCH samples (4 microbatches), AdamW lr 3e-3"
$PP jobs show "$JOB" --version 1 | tee "$RUN/plan-v1.txt" || fail "jobs show --version 1 failed"

# --- 5. workers --------------------------------------------------------------
phase "5/7 start two workers"
WORKER_PIDS=()
for r in 0 1; do
  OMP_NUM_THREADS=1 "$WORKER_BIN" --planner "$ADDR" --job "$JOB" --worker-id "w$r" \
    --device "cpu$r" --executor torch --transport gloo --stage-cache "$RUN/stages" \
    > "$RUN/w$r.log" 2>&1 &
  PIDS+=($!)
  WORKER_PIDS+=($!)
  say "worker w$r on cpu$r: pid $!, log $RUN/w$r.log"
done
WAIT_ARGS=(--pp "$PP" --job "$JOB" --total "$STEPS" --batch "$BATCH" --since "$(date +%s)"
  --pid "${WORKER_PIDS[0]}" --pid "${WORKER_PIDS[1]}")

# --- 6. train, replan, train -----------------------------------------------
phase "6/7 train (plan version 1), replan at step $REPLAN_AT"
waitable "${HELPER[@]}" wait "${WAIT_ARGS[@]}" --until "step>=$REPLAN_AT" --timeout 150 ||
  fail "training on version 1 did not reach step $REPLAN_AT"
$PP -o json jobs show "$JOB" > "$RUN/job-v1.json"  # version 1 measured, before it ends
say "\$ pipeplan jobs replan $JOB --schedule Interleaved1F1B --chunks-per-rank 2"
$PP jobs replan "$JOB" --schedule Interleaved1F1B --chunks-per-rank 2 \
  --reason "demo: interleave, 2 stages per rank" | tee "$RUN/plan-v2.txt" ||
  fail "jobs replan did not publish version 2"
say "version 2 compiles in the background while version 1 trains; the workers switch at a step boundary"
waitable "${HELPER[@]}" wait "${WAIT_ARGS[@]}" --until "version>=2" --timeout 150 ||
  fail "the workers did not switch to plan version 2"
grep -h 'event=plan_switch' "$RUN"/w0.log "$RUN"/w1.log | grep 'plan_version=2' |
  sed 's/^/  /' || fail "no event=plan_switch to version 2 in the workers' logs"
waitable "${HELPER[@]}" wait "${WAIT_ARGS[@]}" --until "done" --timeout 240 ||
  fail "training did not finish"
for i in 0 1; do  # they exit on their own after the last step
  pid=${WORKER_PIDS[$i]}
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  rc=0
  wait "$pid" || rc=$?
  forget "$pid"
  [[ $rc -eq 0 ]] || fail "worker w$i exited $rc (see $RUN/w$i.log)"
done
say "both workers finished and exited 0"

# --- 7. results --------------------------------------------------------------
phase "7/7 results"
say "\$ pipeplan jobs versions $JOB"
$PP jobs versions "$JOB" | tee "$RUN/versions.txt"
say ""
say "\$ pipeplan jobs show $JOB   (plan version 2, measured against predicted)"
$PP jobs show "$JOB" | tee "$RUN/job.txt"
say ""
waitable "${HELPER[@]}" summary --pp "$PP" --job "$JOB" --run "$RUN" || fail "a check failed"
say ""
say "demo: done in $((SECONDS - T0)) s; everything is in $RUN"
