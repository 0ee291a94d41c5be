#!/usr/bin/env bash
# CI leg: the Debian packages (docs/install.md). From the build tree that
# setup.sh and test.sh made: cpack -G DEB, install the five packages on this
# machine with apt, check every binary's --version, build tests/consumer
# against /usr and run it against the packaged planner, CLI and Python
# package; then purge the packages (also on failure). Prints each step's time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build}"
PACKAGES=(pipeplan-cli pipeplan-planner pipeplan-worker libpipeplan-dev python3-pipeplan)

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi

step() {  # step NAME COMMAND...: runs it and prints how long it took
  local name=$1 start=$SECONDS
  shift
  echo "packages: $name"
  "$@"
  echo "packages: $name took $((SECONDS - start)) s"
}

for p in "${PACKAGES[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "packages: $p is already installed; not touching this machine" >&2
    exit 1
  fi
done

purge() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get purge -y -q "${PACKAGES[@]}" >/dev/null 2>&1 || true
}
trap purge EXIT

rm -rf "$BUILD/packages"
step "cpack -G DEB" bash -c "cd '$BUILD' && cpack -G DEB >/dev/null"
ls -l "$BUILD"/packages/*.deb
debs=()
for p in "${PACKAGES[@]}"; do debs+=("./$(ls "$BUILD"/packages/"${p}"_*.deb)"); done
step "apt-get install" env DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
  --no-install-recommends "${debs[@]}"

check_installed() {
  local b
  for b in pipeplan pipeplan-planner pipeplan-worker; do
    [[ $(command -v "$b") == /usr/bin/$b ]] || { echo "$b is not /usr/bin/$b" >&2; return 1; }
    "/usr/bin/$b" --version
  done
  id pipeplan
  test -f /etc/pipeplan/planner.env -a -f /etc/pipeplan/worker.env -a -f /etc/pipeplan/planner-token
  grep -q '^ExecStart=/usr/bin/pipeplan-planner' /usr/lib/systemd/system/pipeplan-planner.service
  dpkg-query -W "${PACKAGES[@]}"
}
step "installed files" check_installed

launcher=()
if command -v ccache >/dev/null; then launcher=(--launcher ccache); fi
step "consumer against /usr" python3 tests/consumer/run_consumer_test.py --prefix /usr \
  --work "$BUILD/consumer-deb" "${launcher[@]}"
step "purge" purge
trap - EXIT
echo "packages: ok"
