#!/usr/bin/env bash
# Runs pipeplan's whole test suite (unit, integration, exporter) through CTest.
# Run ./scripts/setup.sh first. Extra arguments go to ctest (e.g. -R planner).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/CTestTestfile.cmake ]]; then
  echo "test: no build found; run ./scripts/setup.sh first" >&2
  exit 1
fi
cmake --build build -j"${PIPEPLAN_JOBS:-2}"
ctest --test-dir build --output-on-failure -j"${PIPEPLAN_JOBS:-2}" --timeout 600 "$@"
