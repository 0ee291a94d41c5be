#!/usr/bin/env python3
"""Runs a walkthrough of the docs exactly as written, so its commands keep working.

    python3 tests/docs/run_walkthrough.py DOC.md BUILD_DIR

The ```sh blocks between `<!-- walkthrough:begin -->` and
`<!-- walkthrough:end -->` are joined, in order, into one bash script, which runs
from the repository root with WORK (a fresh temporary directory), PLANNER
(127.0.0.1 and a free port) and BUILD set. The script runs in a session of its
own; whatever it leaves running (its planner and workers after a failure) is
killed through that session's process group — nothing else is ever signalled.
Exit status: the script's (124 after --timeout seconds). Registered with CTest as
`training_walkthrough_test` for docs/training.md.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SECTION = re.compile(r"<!-- walkthrough:begin -->(.*?)<!-- walkthrough:end -->", re.S)
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def script_of(doc):
    with open(doc) as f:
        text = f.read()
    section = SECTION.search(text)
    if not section:
        sys.exit("%s: no walkthrough section" % doc)
    blocks = BLOCK.findall(section.group(1))
    if not blocks:
        sys.exit("%s: the walkthrough has no ```sh blocks" % doc)
    return "\n".join(blocks)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("doc")
    parser.add_argument("build")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    script = script_of(args.doc)
    with tempfile.TemporaryDirectory(prefix="pipeplan-walkthrough-") as work:
        env = dict(os.environ, WORK=os.path.join(work, "w"), BUILD=os.path.abspath(args.build),
                   PLANNER="127.0.0.1:%d" % free_port(), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.Popen(["/bin/bash", "-c", script], cwd=ROOT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print("walkthrough: timed out after %.0f s" % args.timeout, file=sys.stderr)
            rc = 124
        if rc != 0:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the script's own session only
            except ProcessLookupError:
                pass
        proc.wait()
        if rc != 0:
            for log in ("planner.log", "w0.log", "w1.log"):
                path = os.path.join(env["WORK"], log)
                if os.path.exists(path):
                    with open(path) as f:
                        print("--- %s (tail)\n%s" % (log, f.read()[-3000:]), file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
