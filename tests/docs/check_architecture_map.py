#!/usr/bin/env python3
"""Keeps docs/architecture.md honest: every path it names exists.

    python3 tests/docs/check_architecture_map.py [REPO_ROOT]

Checks
* the layout block (the first ``` block): each entry, resolved against the
  folders it is indented under, and the paths its descriptions name
  (`docs/service.md` from the root, `chain_dp.cc` in the entry's folder);
* the "Where things are" table: every `backticked` path (globs must match).
Standard library only. Exit status 0 when all exist, 1 otherwise (each missing
path on stderr). Registered with CTest as `architecture_map_check`.
"""

import glob
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "architecture.md")
# Layout entries start left of this column; deeper lines continue a description.
DESCRIPTION_COLUMN = 26
# A file named in a description, relative to the folder the entry is about.
FILE = re.compile(r"\.(cc|h|proto|py|sh|md|txt|json|cmake|ya?ml)$")


def exists(path):
    full = os.path.join(ROOT, path)
    return bool(glob.glob(full)) if "*" in path else os.path.exists(full)


def layout_paths(block):
    """(path, line number) of each layout entry and each path its description names.

    An entry is resolved against the folders it is indented under. In a
    description, `top/level/path` is relative to the root; `name.ext` and
    `name/` are relative to the entry's folder (`chain_dp.cc` under partition/).
    """
    top_level = set(os.listdir(ROOT))
    stack = []  # (indent, folder) of the entries a line may be nested under
    folder = None  # the folder the current description is about
    for number, line in block:
        indent = len(line) - len(line.lstrip(" "))
        text = line.strip()
        if not text:
            continue
        description = text
        if indent < DESCRIPTION_COLUMN:
            spec, _, description = text.partition("  ")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            entries = [e.strip() for e in spec.split(",")]
            for entry in entries:
                yield parent + entry, number
            folder = None
            if len(entries) == 1 and entries[0].endswith("/"):
                folder = parent + entries[0]
                stack.append((indent, folder))
        for token in description.split():
            token = token.strip("()[],;:`'\"")
            if "/" in token and token.split("/", 1)[0] in top_level:
                yield token, number
            elif folder and (token.endswith("/") or FILE.search(token)):
                yield folder + token, number


def main():
    lines = open(DOC, encoding="utf-8").read().split("\n")
    fences = [i for i, l in enumerate(lines) if l.startswith("```")]
    if len(fences) < 2:
        print(f"{DOC}: no layout block", file=sys.stderr)
        return 1
    block = [(i + 1, lines[i]) for i in range(fences[0] + 1, fences[1])]
    checked = list(layout_paths(block))

    try:
        start = lines.index("## Where things are")
    except ValueError:
        print(f"{DOC}: no \"## Where things are\" section", file=sys.stderr)
        return 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
               len(lines))
    for i in range(start + 1, end):
        for path in re.findall(r"`([^`]+)`", lines[i]):
            checked.append((path, i + 1))
    if not any(i > start for _, i in checked):
        print(f"{DOC}: \"Where things are\" names no path", file=sys.stderr)
        return 1

    missing = [(p, n) for p, n in checked if not exists(p)]
    for path, number in missing:
        print(f"docs/architecture.md:{number}: {path} does not exist", file=sys.stderr)
    print(f"{len(checked)} paths checked, {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
