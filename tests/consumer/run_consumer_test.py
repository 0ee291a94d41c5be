"""Builds and runs tests/consumer against an installed pipeplan, the way a
user's project would (docs/install.md):

  * --install BUILD_DIR: `cmake --install BUILD_DIR --prefix PREFIX` first
    (the CTest test install_consumer_test); without it PREFIX is an existing
    installation (the Debian packages in /usr: .ci/packages.sh);
  * configures tests/consumer with find_package(pipeplan CONFIG REQUIRED)
    and pkg-config, builds it, and checks pipeplan_DIR is under PREFIX;
  * plans in-process (pipeplan::core, and the same program via pipeplan.pc);
  * starts the installed pipeplan-planner on 127.0.0.1 and plans over gRPC
    with pipeplan::client, then with the installed `pipeplan` CLI and the
    installed Python package; all must agree with the in-process plan.

    python3 run_consumer_test.py --prefix P --work W [--install BUILD_DIR]
        [--cxx COMPILER] [--launcher ccache]
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
GRAPH = os.path.join(DATA, "chain_small.json")
CLUSTER = os.path.join(DATA, "cluster_8xa100.json")


def run(argv, env=None, timeout=600):
    print("+", " ".join(argv), flush=True)
    r = subprocess.run(argv, env=env, timeout=timeout, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        sys.exit("FAILED (exit %d): %s" % (r.returncode, " ".join(argv)))
    return r.stdout


def build_consumer(args, env):
    build = os.path.join(args.work, "build")
    shutil.rmtree(build, ignore_errors=True)
    configure = ["cmake", "-S", HERE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_PREFIX_PATH=" + args.prefix]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    if args.cxx:
        configure.append("-DCMAKE_CXX_COMPILER=" + args.cxx)
    if args.launcher:
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + args.launcher)
    out = run(configure, env)
    found = re.search(r"pipeplan_DIR=(\S+)", out).group(1)
    if not os.path.realpath(found).startswith(os.path.realpath(args.prefix) + os.sep):
        sys.exit("FAILED: find_package found pipeplan in %s, not under %s" % (found, args.prefix))
    run(["cmake", "--build", build, "-j", "2"], env)
    return build


class Planner:
    """The installed pipeplan-planner on 127.0.0.1, any free port."""

    def __init__(self, binary, state_dir):
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--data-dir",
             state_dir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        deadline = time.time() + 30
        line = ""
        while time.time() < deadline and not line.startswith("listening on "):
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
        if not line.startswith("listening on "):
            self.stop()
            sys.exit("FAILED: pipeplan-planner did not start")
        self.address = line.split()[-1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def python_dir(prefix):
    """dist-packages under the prefix (lib/python3/dist-packages)."""
    path = os.path.join(prefix, "lib", "python3", "dist-packages")
    return path if os.path.isdir(path) else None


def check_installed_tools(args, planner, env):
    cli = os.path.join(args.prefix, "bin", "pipeplan")
    run([cli, "--version"], env)
    # The installed worker finds the stage compiler installed with the
    # Python package, not the build tree's.
    help_text = run([os.path.join(args.prefix, "bin", "pipeplan-worker"), "--help"], env)
    want = os.path.join(python_dir(args.prefix) or "?", "pipeplan_stage_compile.py")
    if "(" + want + ")" not in help_text:
        sys.exit("FAILED: pipeplan-worker's default --stage-compiler is not " + want)
    out = run([cli, "--planner", planner.address, "-o", "json", "plan", "--graph", GRAPH,
               "--cluster", CLUSTER, "--ranks", "2", "--microbatches", "4", "--schedule", "1F1B",
               "--method", "dp"], env)
    cli_step = json.loads(out)["step_seconds"]
    py_env = dict(env)
    if python_dir(args.prefix):
        py_env["PYTHONPATH"] = python_dir(args.prefix)
    out = run([sys.executable, "-c",
               "import sys, pipeplan\n"
               "assert pipeplan.__file__.startswith(sys.argv[1]), pipeplan.__file__\n"
               "c = pipeplan.Client(sys.argv[2])\n"
               "p = c.plan(sys.argv[3], sys.argv[4], ranks=2, microbatches=4, schedule='1F1B',"
               " method='dp')\n"
               "print(repr(p.step_seconds))\n",
               os.path.realpath(args.prefix), planner.address, GRAPH, CLUSTER], py_env)
    if float(out.strip()) != cli_step:
        sys.exit("FAILED: the CLI and the Python client disagree: %s vs %s" % (cli_step, out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--install", metavar="BUILD_DIR")
    parser.add_argument("--cxx")
    parser.add_argument("--launcher")
    args = parser.parse_args()
    args.prefix = os.path.abspath(args.prefix)
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.pathsep.join(
        [os.path.join(args.prefix, "lib", "pkgconfig")] + glob.glob(
            os.path.join(args.prefix, "lib", "*", "pkgconfig")))
    if args.install:
        shutil.rmtree(args.prefix, ignore_errors=True)
        run(["cmake", "--install", args.install, "--prefix", args.prefix], env)
    build = build_consumer(args, env)
    run([os.path.join(build, "plan_in_process")], env)
    run([os.path.join(build, "plan_in_process_pc")], env)
    state = os.path.join(args.work, "planner-state")
    shutil.rmtree(state, ignore_errors=True)
    planner = Planner(os.path.join(args.prefix, "bin", "pipeplan-planner"), state)
    try:
        run([os.path.join(build, "plan_over_grpc"), GRAPH, CLUSTER, planner.address], env)
        check_installed_tools(args, planner, env)
    finally:
        planner.stop()
    print("consumer OK against", args.prefix)


if __name__ == "__main__":
    main()
