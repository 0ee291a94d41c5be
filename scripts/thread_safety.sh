#!/usr/bin/env bash
# Clang's lock analysis over the translation units that use absl::Mutex.
#
# The build uses GCC, which ignores ABSL_GUARDED_BY and friends; this check
# makes the annotations count. It re-parses only the server and worker TUs
# that mention absl::Mutex (in the .cc or, transitively, in a project header
# it includes) with clang++-14 -fsyntax-only, using the flags CMake wrote to
# build/compile_commands.json: under a minute, no second build. Any
# -Wthread-safety finding fails it.
#
#   ./scripts/thread_safety.sh            # after ./scripts/setup.sh
#   CLANGXX=clang++-15 ./scripts/thread_safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CLANGXX="${CLANGXX:-clang++-14}"
DB=build/compile_commands.json
if ! command -v "$CLANGXX" >/dev/null; then
  echo "thread_safety: $CLANGXX not found (setup.sh installs clang-14)" >&2
  exit 1
fi
if [[ ! -f "$DB" ]]; then
  echo "thread_safety: no $DB; run ./scripts/setup.sh first" >&2
  exit 1
fi

# One NUL-separated clang command line per selected TU.
commands=$(mktemp)
trap 'rm -f "$commands"' EXIT
"${PIPEPLAN_PYTHON:-/usr/bin/python3}" - "$DB" "$CLANGXX" >"$commands" <<'EOF'
import json, os, re, shlex, sys

db_path, clangxx = sys.argv[1], sys.argv[2]
root = os.getcwd()
FOLDERS = ("planner_service/server/", "worker_daemon/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def uses_mutex(path, include_dirs, seen):
    """absl::Mutex in `path` or in a project header it includes, transitively."""
    if path in seen:
        return False
    seen.add(path)
    text = open(path, errors="replace").read()
    if "absl::Mutex" in text:
        return True
    for inc in INCLUDE.findall(text):
        for d in [os.path.dirname(path)] + include_dirs:
            header = os.path.normpath(os.path.join(d, inc))
            if os.path.isfile(header):
                if header.startswith(root + "/") and uses_mutex(header, include_dirs, seen):
                    return True
                break
    return False


for entry in json.load(open(db_path)):
    src = entry["file"]
    if not os.path.relpath(src, root).startswith(FOLDERS):
        continue
    args = shlex.split(entry["command"])
    include_dirs = [a[2:] for a in args if a.startswith("-I")]
    if not uses_mutex(src, include_dirs, set()):
        continue
    # Drop the launcher and compiler, the output, dependency files, GCC's
    # warning set and the precompiled header (a GCC .gch next to
    # cmake_pch.hxx, which clang would try to load; the TU includes what it
    # uses itself); keep defines, include paths, standard and -O (it changes
    # which headers' code paths are parsed, e.g. __OPTIMIZE__).
    while args and not args[0].startswith("-"):
        args.pop(0)
    keep, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MT", "-MF") or (
                a == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx")):
            skip = True
            continue
        if a in ("-c", "-MD", src) or a.startswith("-W"):
            continue
        keep.append(a)
    cmd = [clangxx, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"] + keep + [src]
    sys.stdout.write("cd " + shlex.quote(entry["directory"]) + " && " + shlex.join(cmd) + "\0")
EOF

if [[ ! -s "$commands" ]]; then
  echo "thread_safety: no translation unit uses absl::Mutex (is $DB current?)" >&2
  exit 1
fi
count=$(tr -cd '\0' <"$commands" | wc -c)
echo "thread_safety: $CLANGXX -Wthread-safety over $count translation units"
xargs <"$commands" -0 -n1 -P"${PIPEPLAN_JOBS:-2}" bash -c
echo "thread_safety: ok"
