"""Starts pipeplan-planner as a child process on 127.0.0.1 (port 0) with a
temporary data directory and reads the bound address back from its stdout
(`listening on HOST:PORT`), as tests/integration/planner_process.cc does for the
C++ tests. stop() (or leaving the `with` block) kills and reaps the child; nothing
else is ever signalled.

The binary is $PIPEPLAN_PLANNER_BIN (CTest sets it), else
build/planner_service/server/pipeplan-planner under the source tree.
"""

import os
import select
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_BIN = os.path.join(ROOT, "build", "planner_service", "server", "pipeplan-planner")


def planner_binary():
    """The planner binary's path, or None when there is none to run."""
    path = os.environ.get("PIPEPLAN_PLANNER_BIN") or DEFAULT_BIN
    return path if os.access(path, os.X_OK) else None


class PlannerProcess:
    def __init__(self, binary, args=(), start_timeout=30.0):
        self.dir = tempfile.mkdtemp(prefix="pipeplan-pytest-")
        argv = [binary, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                "--data-dir=" + os.path.join(self.dir, "data")] + list(args)
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL)
        self.address = None
        try:
            self.address = self._read_address(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _read_address(self, timeout):
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            c = os.read(self.proc.stdout.fileno(), 1)
            if not c:
                break  # the planner exited
            if c != b"\n":
                line += c
                continue
            text = line.decode(errors="replace")
            line = b""
            if text.startswith("listening on "):
                return text[len("listening on "):].strip()
        raise RuntimeError("pipeplan-planner did not start (exit %s): %s"
                           % (self.proc.poll(), self.stderr_text()))

    def stderr_text(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
