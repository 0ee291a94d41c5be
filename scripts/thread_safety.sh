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

# One NUL-separated clang command line per selected TU, and first one per
# precompiled header they use (clang's own, in $pch_dir, from the header
# list and flags CMake wrote for GCC's: the TUs then skip gRPC's and the
# generated headers' ~2 s each, as the build does).
commands=$(mktemp)
pch_commands=$(mktemp)
pch_dir=$(mktemp -d)
trap 'rm -rf "$commands" "$pch_commands" "$pch_dir"' EXIT
"${PIPEPLAN_PYTHON:-/usr/bin/python3}" - "$DB" "$CLANGXX" "$pch_commands" "$pch_dir" \
  >"$commands" <<'EOF'
import json, os, re, shlex, sys

db_path, clangxx, pch_commands, pch_dir = sys.argv[1:5]
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


def clang_args(args, src):
    """The compile line's flags for clang: without the launcher and compiler,
    the output, dependency files, GCC's warning set and GCC's precompiled
    header; with defines, include paths, standard and -O (it changes which
    headers' code paths are parsed, e.g. __OPTIMIZE__). Also the header
    (cmake_pch.hxx) that the line force-includes, or None."""
    while args and not args[0].startswith("-"):
        args.pop(0)
    keep, skip, pch = [], False, None
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            pch = args[i + 1]
            skip = True
            continue
        if a in ("-o", "-MT", "-MF", "-x"):
            skip = True
            continue
        if a in ("-c", "-MD", src) or a.startswith("-W"):
            continue
        keep.append(a)
    return keep, pch


db = json.load(open(db_path))
# CMake's own line for each precompiled header: cmake_pch.hxx.cxx.
pch_flags = {}
for entry in db:
    if entry["file"].endswith("cmake_pch.hxx.cxx"):
        flags, header = clang_args(shlex.split(entry["command"]), entry["file"])
        pch_flags[header] = (entry["directory"], flags)

made = {}  # cmake_pch.hxx -> the clang .pch made from it
with open(pch_commands, "w") as pch_out:
    for entry in db:
        src = entry["file"]
        if not os.path.relpath(src, root).startswith(FOLDERS):
            continue
        args = shlex.split(entry["command"])
        include_dirs = [a[2:] for a in args if a.startswith("-I")]
        if not uses_mutex(src, include_dirs, set()):
            continue
        keep, header = clang_args(args, src)
        if header in pch_flags:
            if header not in made:
                made[header] = os.path.join(pch_dir, "%d.pch" % len(made))
                directory, flags = pch_flags[header]
                cmd = [clangxx, "-x", "c++-header", "-Wno-pragma-system-header-outside-header"]
                cmd += flags + [header, "-o", made[header]]
                pch_out.write("cd " + shlex.quote(directory) + " && " + shlex.join(cmd) + "\0")
            keep += ["-include-pch", made[header]]
        cmd = [clangxx, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"] + keep + [src]
        sys.stdout.write("cd " + shlex.quote(entry["directory"]) + " && " + shlex.join(cmd) + "\0")
EOF

if [[ ! -s "$commands" ]]; then
  echo "thread_safety: no translation unit uses absl::Mutex (is $DB current?)" >&2
  exit 1
fi
count=$(tr -cd '\0' <"$commands" | wc -c)
pchs=$(tr -cd '\0' <"$pch_commands" | wc -c)
echo "thread_safety: $CLANGXX -Wthread-safety over $count translation units ($pchs precompiled headers)"
xargs <"$pch_commands" -0 -r -n1 -P"${PIPEPLAN_JOBS:-2}" bash -c
xargs <"$commands" -0 -n1 -P"${PIPEPLAN_JOBS:-2}" bash -c
echo "thread_safety: ok"
