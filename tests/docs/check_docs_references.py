#!/usr/bin/env python3
"""Keeps README.md and docs/ honest: every repository path and every command-line
flag they name exists.

    python3 tests/docs/check_docs_references.py REPO_ROOT PIPEPLAN PLANNER WORKER

Paths: a `code span`, a code-block word or a link target that starts with a
top-level entry of the repository (`client/cli/cli.cc`, `scripts/demo.sh`,
`docs/cli.md#exit-codes`, `tests/data/*.json`, `server/{base,obs}/`) must
exist; `:LINE` and `#anchor` tails are dropped, globs must match, braces
expand. Links are resolved against the document's folder.

Flags: in a span or code-block line that runs `pipeplan [command words]`,
`pipeplan-planner` or `pipeplan-worker`, each `--flag` must be one that
command's --help lists (global flags included); in one that runs a Python
script of the repository (`pipeplan_export.py`, ...), one its source
declares. A span that is only a flag (`--explain`) must be a flag of some
command or script of the project. Other tools' flags (cmake, ctest) are not
checked. Exit status 0 when everything exists, 1 otherwise (each problem on
stderr, as FILE:LINE). Registered with CTest as `docs_references_check`.
"""

import glob
import os
import re
import subprocess
import sys

ROOT, CLI, PLANNER, WORKER = (os.path.abspath(p) for p in sys.argv[1:5])
BINARIES = {"pipeplan": CLI, "pipeplan-planner": PLANNER, "pipeplan-worker": WORKER}
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
SPAN = re.compile(r"`([^`\n]+)`")
# Flags of other tools that the docs name alone (cmake --install --prefix,
# docker --build-arg, kubectl --from-file, ctest).
OTHER_TOOLS = {"prefix", "build-arg", "from-file", "output-on-failure", "test-dir", "target",
               "build", "install", "component", "parallel", "dry-run", "Werror"}
# Words a command line may start with before the command itself.
PREFIXES = {"sudo", "$", "env", "exec", "time", "nohup", "then", "do", "&&", "|"}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents():
    yield os.path.join(ROOT, "README.md")
    for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
        if name.endswith(".md"):
            yield os.path.join(ROOT, "docs", name)


def help_flags(argv):
    out = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60).stdout
    flags = set(re.findall(r"^\s+(?:-\w, )?--([a-z][a-z0-9-]*)", out, re.M))
    flags |= set(re.findall(r"\(--([a-z][a-z0-9-]*) is a deprecated alias\)", out))
    return flags, out


def global_value_flags():
    """The global flags of `pipeplan` that take a value (--planner ADDR), and -o."""
    out = subprocess.run([CLI, "--help"], capture_output=True, text=True, timeout=60).stdout
    section = out.split("global flags", 1)[1]
    return {"--" + f for f in re.findall(r"^\s+(?:-\w, )?--([a-z-]+) \S", section, re.M)} | {"-o"}


def command_table():
    """{("pipeplan", "jobs", "create"): flags, ("pipeplan-planner",): flags, ...}"""
    table = {}
    top, text = help_flags([CLI])
    table[("pipeplan",)] = top
    section = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    for line in section.splitlines():
        words = [w for w in re.split(r"\s{2,}", line.strip())[0].split() if w.islower()]
        table[("pipeplan", *words)] = help_flags([CLI, *words])[0]
    for name in ("pipeplan-planner", "pipeplan-worker"):
        table[(name,)] = help_flags([BINARIES[name]])[0]
    return table


def script_flags():
    """{script name: flags its source declares} for the repository's scripts."""
    out = {}
    for pattern in ("client/python/*.py", "client/python/pipeplan/export/*.py", "scripts/*.py",
                    "scripts/*.sh", "scripts/*/*.py", "bench/*.py", "bench/*.cc", "bench/python/*.py",
                    "tests/models/*.py"):
        for path in glob.glob(os.path.join(ROOT, pattern)):
            with open(path, errors="replace") as f:
                text = f.read()
            # --flag in scripts; .Value("flag", ...) in the C++ benches' FlagSets.
            out[os.path.basename(path)] = set(FLAG.findall(text)) | set(
                re.findall(r"\.(?:Value|Switch)\(\s*\"([a-z][a-z0-9-]*)\"", text))
    export = out.get("cli.py", set())  # pipeplan_export.py runs pipeplan.export.cli
    out["pipeplan_export.py"] = out.get("pipeplan_export.py", set()) | export
    return out


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",")
            for p in expand_braces(path[:m.start()] + alt + path[m.end():])]


def path_exists(path, base):
    path = re.sub(r"(:\d+(-\d+)?|#.*)$", "", path).rstrip(".,;:")
    path = re.sub(r"<[^>]*>", "*", path)  # tests/fuzz/corpus/<target>/
    for candidate in expand_braces(path):
        full = os.path.normpath(os.path.join(base, candidate))
        if not (glob.glob(full) if any(c in candidate for c in "*?[") else os.path.exists(full)):
            return False
    return True


def ignored_top_level():
    """Top-level folders .gitignore names (/build*/, /out/): a clean clone has none of them, so a
    doc naming a path under one (out/gpu-check-<time>/) names an output, not a repository file."""
    names = set()
    with open(os.path.join(ROOT, ".gitignore")) as f:
        for line in f:
            m = re.match(r"^/([^/*]+)\*?/\s*$", line.strip())
            if m:
                names |= {e for e in os.listdir(ROOT) if e == m.group(1) or
                          (line.strip().startswith("/%s*" % m.group(1)) and e.startswith(m.group(1)))}
                names.add(m.group(1))
    return names


def looks_like_repo_path(token, top_level):
    first = token.split("/", 1)[0]
    return ("/" in token or "." in token) and first in top_level and not token.startswith("-")


class Checker:
    def __init__(self):
        self.commands = command_table()
        self.scripts = script_flags()
        self.all_flags = set().union(*self.commands.values(), *self.scripts.values())
        self.top_level = set(os.listdir(ROOT)) - {".git"} - ignored_top_level()
        self.global_values = global_value_flags()
        self.problems = []

    def problem(self, where, text):
        self.problems.append("%s: %s" % (where, text))

    def check_paths(self, text, where):
        if text.lstrip().startswith("kubectl"):
            return  # deploy/NAME is a Kubernetes resource there
        for token in re.split(r"[\s=\"'(),]+", text):
            token = token.strip("`<>")
            if looks_like_repo_path(token, self.top_level) and not path_exists(token, ROOT):
                self.problem(where, "no path %s" % token)

    def command_flags(self, words):
        """The flags of the longest command `words` starts with."""
        name = os.path.basename(words[0])
        if name.endswith(".py"):
            return self.scripts[name] | {"help"}
        key, i = (name,), 1
        while name == "pipeplan" and i < len(words):
            w = words[i]
            if w.startswith("-"):
                i += 2 if w in self.global_values else 1
            elif any(k[:len(key) + 1] == key + (w,) for k in self.commands):  # "jobs"
                key, i = key + (w,), i + 1
            else:
                break
        flags = set(self.commands.get(key, ()))
        if name == "pipeplan":
            flags |= self.commands[("pipeplan",)]
        return flags

    def check_command(self, text, where):
        words = text.split()
        i = 0
        while i < len(words) and (words[i] in PREFIXES or re.fullmatch(r"[A-Z_]+=\S*", words[i])):
            i += 1
        base = os.path.basename(words[i]) if i < len(words) else ""
        if base in BINARIES or (base.endswith(".py") and base in self.scripts):
            flags = self.command_flags(words[i:])
            for flag in FLAG.findall(" ".join(words[i + 1:])):
                if flag not in flags and flag != "help":
                    self.problem(where, "%s has no --%s" % (" ".join(words[i:i + 3]), flag))
            return
        if re.fullmatch(r"--[a-z][a-z0-9-]*(=\S*| \S+)?", text.strip()):
            flag = FLAG.findall(text)[0]
            if flag not in self.all_flags and flag not in OTHER_TOOLS:
                self.problem(where, "no command or script has --%s" % flag)

    def check_document(self, path):
        name = os.path.relpath(path, ROOT)
        with open(path) as f:
            lines = f.read().split("\n")
        in_block, pending = False, ""
        for number, line in enumerate(lines, 1):
            where = "%s:%d" % (name, number)
            if line.lstrip().startswith("```"):
                in_block, pending = not in_block, ""
                continue
            for target in LINK.findall(line):
                if "://" not in target and not target.startswith("#") and not target.startswith(
                        "mailto:") and not path_exists(target, os.path.dirname(path)):
                    self.problem(where, "link to a missing %s" % target)
            if in_block:
                pending += re.sub(r"(^|\s)#\s.*$", "", line)  # a shell comment
                if line.endswith("\\"):
                    pending = pending[:-1] + " "
                    continue
                self.check_paths(pending, where)
                self.check_command(pending, where)
                pending = ""
                continue
            for span in SPAN.findall(line):
                self.check_paths(span, where)
                self.check_command(span, where)


def main():
    checker = Checker()
    for path in documents():
        checker.check_document(path)
    for p in checker.problems:
        print(p, file=sys.stderr)
    print("%d problems in README.md and docs/" % len(checker.problems))
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())
