"""What the Python benchmarks share: the source tree, the built binaries, the
check that they are built, and the import path of the helpers they use.

Importing it puts tests/models, tests/python and client/python on sys.path
(once), so a benchmark imports it before planner_process, tiny_models,
make_fixtures or pipeplan_*. The binaries are those of ./build, where
scripts/setup.sh builds them.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "client", "pipeplan")
WORKER = os.path.join(ROOT, "build", "worker_daemon", "pipeplan-worker")

# Inserted in this order, client/python ends up first on the path.
for _parts in (("tests", "models"), ("tests", "python"), ("client", "python")):
    _path = os.path.join(ROOT, *_parts)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from planner_process import planner_binary  # noqa: E402  (tests/python, on the path now)

BUILD_TARGETS = ("pipeplan-planner", "pipeplan-worker", "pipeplan")


def require_built(*binaries, targets=()):
    """Exits with the command that builds them unless pipeplan-planner and
    `binaries` (paths; built with the extra `targets`) can run: a benchmark
    without them has nothing to measure."""
    if not planner_binary() or not all(os.access(b, os.X_OK) for b in binaries):
        sys.exit("build first: cmake --build build --target " +
                 " ".join(BUILD_TARGETS + tuple(targets)))
