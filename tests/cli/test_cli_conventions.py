"""Command-line conventions every pipeplan binary keeps (docs/cli.md): --help
on every command and subcommand exits 0, a bad flag exits 2 and names the
flag, --version prints the project version, and exit codes are shared.

The command list is read from `pipeplan --help`, so a new command is checked
without editing this file.

    python3 test_cli_conventions.py PIPEPLAN PLANNER WORKER VERSION DATA_DIR
"""

import re
import socket
import subprocess
import sys
import unittest

CLI, PLANNER, WORKER, VERSION, DATA = sys.argv[1:6]
del sys.argv[1:6]


def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def commands():
    """The command words `pipeplan --help` lists ("plan", "jobs replan")."""
    out = run(CLI, "--help").stdout
    section = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    words = []
    for line in section.splitlines():
        # "  jobs show JOB          summary": words are lower-case, arguments upper.
        left = re.split(r"\s{2,}", line.strip())[0]
        words.append(" ".join(t for t in left.split() if re.fullmatch(r"[a-z]+", t)))
    return words


class HelpTest(unittest.TestCase):
    def test_command_list_is_complete(self):
        self.assertEqual(commands(), [
            "plan", "simulate", "jobs create", "jobs list", "jobs show", "jobs cancel",
            "jobs delete", "jobs reports", "jobs versions", "jobs replan",
             "jobs trace", "jobs watch"])

    def test_every_command_has_help(self):
        for words in commands() + ["jobs"]:
            for form in ([*words.split(), "--help"], [*words.split(), "-h"],
                         ["help", *words.split()]):
                with self.subTest(argv=form):
                    r = run(CLI, *form)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertIn("usage: pipeplan", r.stdout)
                    self.assertEqual(r.stderr, "")

    def test_top_level_help(self):
        for form in (["--help"], ["-h"], ["help"]):
            r = run(CLI, *form)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("exit codes:", r.stdout)
        r = run(CLI)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: pipeplan", r.stderr)

    def test_daemons_have_help(self):
        for binary, name in ((PLANNER, "pipeplan-planner"), (WORKER, "pipeplan-worker")):
            for flag in ("--help", "-h"):
                r = run(binary, flag)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("usage: " + name, r.stdout)


class BadFlagTest(unittest.TestCase):
    def assert_usage(self, r, named):
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(named, r.stderr)

    def test_unknown_flag_on_every_command(self):
        for words in commands():
            with self.subTest(command=words):
                self.assert_usage(run(CLI, *words.split(), "--no-such-flag"), "--no-such-flag")
        for binary in (PLANNER, WORKER):
            self.assert_usage(run(binary, "--no-such-flag"), "--no-such-flag")

    def test_close_misspelling_is_suggested(self):
        r = run(CLI, "plan", "--rank", "2")
        self.assert_usage(r, "--rank")
        self.assertIn("did you mean --ranks?", r.stderr)

    def test_bad_values_name_the_flag(self):
        files = ["--graph", DATA + "/chain_small.json", "--cluster", DATA + "/cluster_8xa100.json"]
        self.assert_usage(run(CLI, "plan", *files, "--ranks", "x"), "--ranks")
        self.assert_usage(run(CLI, "plan", *files, "--schedule", "nope"), "--schedule")
        self.assert_usage(run(CLI, "plan", *files, "-o", "yaml"), "--output")
        self.assert_usage(run(CLI, "plan", "--graph"), "--graph needs a value")
        self.assert_usage(run(CLI, "plan", "--cluster", "c.json"), "--graph is required")
        self.assert_usage(run(CLI, "--timeout", "-1", "jobs", "list"), "--timeout")
        self.assert_usage(run(PLANNER, "--lease-seconds", "x"), "--lease-seconds")
        self.assert_usage(run(PLANNER, "--replan", "maybe"), "--replan")
        self.assert_usage(run(WORKER, "--steps", "1.5"), "--steps")
        self.assert_usage(run(WORKER, "--transport", "carrier-pigeon"), "--transport")

    def test_arguments_are_checked(self):
        self.assert_usage(run(CLI, "jobs", "show"), "jobs show wants JOB")
        self.assert_usage(run(CLI, "jobs", "show", "a", "b"), "unexpected argument \"b\"")
        self.assert_usage(run(CLI, "jobs", "frob"), "unknown command \"jobs frob\"")
        self.assert_usage(run(CLI, "frob"), "unknown command \"frob\"")
        self.assert_usage(run(CLI, "jobs"), "jobs <subcommand>")
        self.assert_usage(run(CLI, "jobs", "list"), "--planner")

    def test_unknown_commands_get_the_closest_one(self):
        self.assert_usage(run(CLI, "jobs", "lsit"), 'did you mean "jobs list"?')
        self.assert_usage(run(CLI, "plna"), 'did you mean "plan"?')
        self.assert_usage(run(CLI, "help", "simulat"), 'did you mean "simulate"?')
        self.assertNotIn("did you mean", run(CLI, "frob").stderr)

    def test_addresses_are_checked_before_use(self):
        # It said the address was in use (exit 3) after a raw gRPC log line.
        r = run(PLANNER, "--listen", "nonsense")
        self.assert_usage(r, "--listen")
        self.assertNotIn("in use", r.stderr)
        self.assert_usage(run(PLANNER, "--metrics-listen", "127.0.0.1:http"), "--metrics-listen")
        # A port left out said "Connection refused".
        r = run(CLI, "--planner", "127.0.0.1", "jobs", "list")
        self.assert_usage(r, "--planner")
        self.assertIn("has no port", r.stderr)
        self.assert_usage(run(WORKER, "--planner", "127.0.0.1", "--job", "j", "--worker-id",
                              "w", "--device", "d"), "--planner")

    def test_a_folder_given_as_a_file_says_so(self):
        # `plan --graph DIR` said "Unexpected end of string".
        r = run(CLI, "plan", "--graph", DATA, "--cluster", DATA + "/cluster_8xa100.json")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("FAILED_PRECONDITION", r.stderr)
        self.assertIn(DATA + " is a directory", r.stderr)

    def test_every_replica_down_shows_each_ones_error(self):
        ports = []
        for _ in range(2):  # ports nobody listens on: bound, then closed
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        a, b = ("127.0.0.1:%d" % p for p in ports)
        r = run(CLI, "--planner", "%s,%s" % (a, b), "--timeout", "5", "jobs", "list")
        self.assertEqual(r.returncode, 3, r.stderr)  # unavailable
        self.assertIn(a + ": UNAVAILABLE", r.stderr)  # only B's showed
        self.assertIn(b + ": UNAVAILABLE", r.stderr)

    def test_deprecated_aliases_still_work(self):
        files = ["--graph", DATA + "/chain_small.json", "--cluster", DATA + "/cluster_8xa100.json"]
        r = run(CLI, "plan", *files, "--stages", "2", "--schedule", "GPipe", "--microbatches",
                "4", "--method", "dp")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--stages is deprecated; use --ranks", r.stderr)
        self.assertIn("schedule GPipe, 4 microbatches", r.stdout)  # as the user spells it
        r = run(CLI, "plan", *files, "--stages", "2", "--ranks", "2")
        self.assert_usage(r, "--stages")


class VersionTest(unittest.TestCase):
    def test_every_binary_prints_the_project_version(self):
        for binary, name in ((CLI, "pipeplan"), (PLANNER, "pipeplan-planner"),
                             (WORKER, "pipeplan-worker")):
            r = run(binary, "--version")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"^%s %s( \(git [^)]+\))?\n$"
                             % (re.escape(name), re.escape(VERSION)))

    def test_a_commands_own_version_flag_is_not_the_programs(self):
        # `jobs show JOB --version V` names plan version V (docs/cli.md); it
        # printed the program's version and exited 0. Without --planner it
        # now gets as far as asking for one.
        r = run(CLI, "jobs", "show", "job-x", "--version", "1")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertNotIn(VERSION, r.stdout)
        self.assertIn("needs --planner", r.stderr)
        r = run(CLI, "jobs", "show", "job-x", "--version", "x")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--version", r.stderr)
        # Before the command, and after one without its own, it is the program's.
        for argv in (["--version", "jobs", "show", "job-x"], ["jobs", "list", "--version"]):
            r = run(CLI, *argv)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith("pipeplan %s" % VERSION), r.stdout)


class OutputTest(unittest.TestCase):
    def test_output_formats(self):
        sim = ["simulate", "--schedule", "1F1B", "--ranks", "2", "--microbatches", "2"]
        for form in (["-o", "json"], ["-ojson"], ["--output=json"], ["--json"]):
            r = run(CLI, *sim, *form)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith("{"), form)
        r = run(CLI, "-o", "table", *sim)
        self.assertIn("bubble_ratio:", r.stdout)
        self.assertEqual(run(CLI, *sim, "-o", "table", "--json").returncode, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
