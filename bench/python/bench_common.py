"""What the Python benchmarks share: the source tree, the built binaries and
the import path of the helpers they use.

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
