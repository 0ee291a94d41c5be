#!/usr/bin/env bash
# The ThreadSanitizer leg of CI: the server's and the worker's unit tests
# (the job registry, rendezvous, replan policy, solver pool, the worker's
# control plane (step loop, report sender, heartbeat, stall watch),
# Gloo and in-memory transports, ... with their threads) built with
# -fsanitize=thread at -O1 in build-tsan/, through scripts/sanitize.sh.
# Abseil's locks are made visible to TSan by tests/support/tsan_absl_sync.cc
# (docs/testing.md, "Sanitizers"). Any report fails its test.
#
#   ./scripts/tsan.sh
#   PIPEPLAN_SANITIZE_TARGETS="server_unit_test" ./scripts/tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PIPEPLAN_SANITIZE=thread
export PIPEPLAN_SANITIZE_DIR="${PIPEPLAN_SANITIZE_DIR:-build-tsan}"
export PIPEPLAN_SANITIZE_OPT="${PIPEPLAN_SANITIZE_OPT:--O1}"
export PIPEPLAN_SANITIZE_TARGETS="${PIPEPLAN_SANITIZE_TARGETS:-tsan_self_test server_unit_test worker_unit_test worker_control_test}"
exec ./scripts/sanitize.sh
