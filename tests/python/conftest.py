"""Shared pytest setup of the Python side of pipelined training: the client's modules
and tests/models on sys.path, fixtures (graph, package, data) built once per session
in a temporary directory, and a runner of the command-line scripts."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLIENT = os.path.join(ROOT, "client", "python")
MODELS = os.path.join(ROOT, "tests", "models")
for path in (CLIENT, MODELS):
    if path not in sys.path:
        sys.path.insert(0, path)
# The build's generated pipeplan.v1 modules, before anything imports pipeplan:
# the package extends its path only with the pipeplan/ folders on sys.path at
# its first import (make_fixtures imports the exporter, hence pipeplan).
GENERATED = os.environ.get("PIPEPLAN_PYTHON_DIR") or os.path.join(ROOT, "build", "python")
if os.path.isdir(GENERATED) and GENERATED not in sys.path:
    sys.path.append(GENERATED)

import make_fixtures  # noqa: E402


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory):
    """name -> {"graph", "package", "data"} paths of tiny_models' gpt, cnn and skip."""
    out = str(tmp_path_factory.mktemp("fixtures"))
    return {name: make_fixtures.make_fixture(name, out) for name in ("gpt", "cnn", "skip")}


def run_script(script, *args, cwd=None):
    """Runs client/python/<script> with this interpreter (the one with torch);
    returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, os.path.join(CLIENT, script)] + list(args),
                          capture_output=True, text=True, cwd=cwd, timeout=300)
