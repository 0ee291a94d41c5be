#!/usr/bin/env python3
"""Fails when a C++ include runs against the layers of docs/architecture.md.

    python3 tests/docs/check_include_direction.py [REPO_ROOT]

Each source file outside tests/ and bench/ belongs to a part by its folder;
each `#include "..."` to the part its path names (`pipeplan/<part>/...`, a
generated `pipeplan/v1/*.pb.h` to `proto`), or, when it names no part, to the
including file's own part. The allowed direction:

    common   <- everything; it includes no other part
    core     <- convert <- server
                convert <- client <- worker
    proto    <- convert, server, client, worker (never core or common)

and, inside common, the planning core may use only status_macros.h and
enum_names.h (header-only, no I/O). The core
also includes no gRPC and no file or stream I/O headers. Standard library
only. Exit status 0 when every include runs the right way, 1 otherwise (each
offending include on stderr). Registered with CTest as `include_direction_check`.
"""

import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))

# Folder prefix -> part. Longest prefix wins.
PARTS = {
    "common/": "common",
    "planner_service/core/": "core",
    "planner_service/convert/": "convert",
    "planner_service/server/": "server",
    "worker_daemon/": "worker",
    "client/": "client",
}
# What each part may include besides itself.
ALLOWED = {
    "common": set(),
    "core": {"common"},
    "convert": {"common", "core", "proto"},
    "server": {"common", "core", "convert", "proto"},
    "client": {"common", "core", "convert", "proto"},
    "worker": {"common", "core", "convert", "client", "proto"},
}
# The only base headers the planning core may use.
CORE_COMMON = {"pipeplan/common/status_macros.h", "pipeplan/common/enum_names.h"}
# System headers the core must not include: no gRPC, no files or streams.
CORE_FORBIDDEN_SYSTEM = re.compile(r"^(grpc|grpcpp)/|^(fstream|iostream|cstdio|filesystem)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
# `pipeplan/<part>/...` in an include path names that part.
NAMED = {"common": "common", "core": "core", "convert": "convert", "server": "server",
         "worker": "worker", "client": "client", "v1": "proto"}


def part_of_file(rel):
    best = None
    for prefix, part in PARTS.items():
        if rel.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, part)
    return best[1] if best else None


def part_of_include(path, own):
    m = re.match(r"pipeplan/([a-z0-9_]+)/", path)
    if m and m.group(1) in NAMED:
        return NAMED[m.group(1)]
    return own


def check_file(rel, part):
    problems = []
    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            kind, path = m.groups()
            where = f"{rel}:{number}: {part} includes {path}"
            if kind == "<":
                if part == "core" and CORE_FORBIDDEN_SYSTEM.search(path):
                    problems.append(where + " (the core does no I/O and has no gRPC)")
                continue
            target = part_of_include(path, part)
            if target == part:
                continue
            if target not in ALLOWED[part]:
                problems.append(f"{where} ({part} must not depend on {target})")
            elif part == "core" and target == "common" and path not in CORE_COMMON:
                problems.append(f"{where} (the core uses only {sorted(CORE_COMMON)} of common)")
    return problems


def main():
    problems = []
    checked = 0
    for top in sorted(set(p.split("/")[0] for p in PARTS)):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(("build", "."))]
            for name in filenames:
                if not name.endswith((".cc", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), ROOT)
                part = part_of_file(rel)
                if part:
                    checked += 1
                    problems += check_file(rel, part)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"include direction: {checked} files checked, {len(problems)} offending includes")
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
