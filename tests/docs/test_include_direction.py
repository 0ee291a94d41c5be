#!/usr/bin/env python3
"""The include-direction check itself: it passes a tree that follows the layers
and names each include that runs against them (so the check can fail)."""

import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_include_direction.py")


def run(files):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        p = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
        return p.returncode, p.stderr


class IncludeDirectionTest(unittest.TestCase):
    def test_a_layered_tree_passes(self):
        code, err = run({
            "planner_service/core/graph.cc": '#include "pipeplan/common/status_macros.h"\n'
                                             '#include <vector>\n',
            "planner_service/server/jobs/x.cc": '#include "pipeplan/convert/plan_decoder.h"\n'
                                                '#include <grpcpp/grpcpp.h>\n',
            "worker_daemon/src/control/y.cc": '#include "pipeplan/client/planner_client.h"\n'
                                              '#include "step_loop.h"\n',
        })
        self.assertEqual(code, 0, err)

    def test_each_wrong_way_include_is_named(self):
        code, err = run({
            "client/lib/a.cc": '#include "pipeplan/server/store.h"\n',
            "client/cli/b.cc": '#include "pipeplan/worker/model_package.h"\n',
            "worker_daemon/src/c.cc": '#include "pipeplan/server/log.h"\n',
            "planner_service/core/d.cc": '#include "pipeplan/convert/proto_convert.h"\n',
            "planner_service/core/e.cc": '#include "pipeplan/common/file_reader.h"\n',
            "planner_service/core/f.cc": "#include <fstream>\n",
            "planner_service/core/g.h": "#include <grpcpp/grpcpp.h>\n",
            "common/h.cc": '#include "pipeplan/core/graph.h"\n',
            "planner_service/server/i.cc": '#include "pipeplan/worker/runtime.h"\n',
        })
        self.assertEqual(code, 1)
        for rel in ["client/lib/a.cc", "client/cli/b.cc", "worker_daemon/src/c.cc",
                    "planner_service/core/d.cc", "planner_service/core/e.cc",
                    "planner_service/core/f.cc", "planner_service/core/g.h", "common/h.cc",
                    "planner_service/server/i.cc"]:
            self.assertIn(rel + ":1:", err)


if __name__ == "__main__":
    unittest.main()
