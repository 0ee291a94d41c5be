#!/usr/bin/env python3
"""Speed and memory of the PyTorch exporter (client/python/pipeplan_export.py):
graph and model package of a few models, each exported in a fresh process so that
its peak RSS is its own. Prints a table; not a test (nothing is asserted).

  /usr/bin/python3 bench/python/export_bench.py [--case NAME ...] [--no-package]
      [--real-forward]

Cases (tests/models):
  tiny_gpt             tiny_models.gpt, 4 x 16 tokens
  gpt2_small           gpt2.small: 12 layers, d=768, vocabulary 50,257, 8 x 1,024
                       int64 tokens (124 M parameters)
  gpt2_small_masked    gpt2.small_masked: the same plus a bool [8, 1024] mask, the
                       inputs given as `--input input_ids:int64[8,1024]
                       --input mask:bool[8,1024]` give them
  gpt2_small_b1_real   gpt2.small with 1 x 1,024 tokens, shapes from a real forward
                       (--real-forward only: the old way, for comparison)

Columns: build_s (constructing the model and its random weights), export_s (trace,
shapes, costs, graph JSON and, unless --no-package, the package on local disk),
rss_build_mb (resident memory once the model is built: torch + the weights) and
peak_rss_mb (the process's peak, ru_maxrss, over everything).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CASES = ("tiny_gpt", "gpt2_small", "gpt2_small_masked")
REAL_CASES = ("gpt2_small_b1_real",)


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _build(case):
    """(module, example inputs, real_forward) of a case."""
    import gpt2
    import pipeplan_export
    import tiny_models
    if case == "tiny_gpt":
        module, inputs = tiny_models.gpt()
        return module, inputs, False
    if case == "gpt2_small":
        module, inputs = gpt2.small(batch=8, seq=1024)
        return module, inputs, False
    if case == "gpt2_small_masked":
        module = gpt2.GPT2Masked()
        inputs = pipeplan_export.inputs_from_specs(
            module, ["input_ids:int64[8,1024]", "mask:bool[8,1024]"])
        return module, inputs, False
    if case == "gpt2_small_b1_real":
        module, inputs = gpt2.small(batch=1, seq=1024)
        return module, inputs, True
    raise KeyError(case)


def run_case(case, package):
    """Exports one case in this process; returns its row as a dict."""
    sys.path[:0] = [os.path.join(ROOT, "client", "python"), os.path.join(ROOT, "tests", "models")]
    import torch
    import pipeplan_export
    torch.manual_seed(0)
    start = time.perf_counter()
    module, inputs, real = _build(case)
    built = time.perf_counter()
    rss_build = _rss_mb()
    with tempfile.TemporaryDirectory() as out:
        graph = pipeplan_export.export(module, inputs, name=case, real_forward=real,
                                       package=os.path.join(out, "pkg") if package else None)
        pipeplan_export.write_graph(graph, os.path.join(out, "graph.json"))
        done = time.perf_counter()
    params = sum(p.numel() for p in module.parameters())
    return {"model": case, "params_m": params / 1e6, "nodes": len(graph["nodes"]),
            "build_s": built - start, "export_s": done - built,
            "rss_build_mb": rss_build, "peak_rss_mb": _rss_mb()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=CASES + REAL_CASES,
                        help="cases to run (default: all but the real-forward one)")
    parser.add_argument("--no-package", action="store_true",
                        help="export the graph only, no model package")
    parser.add_argument("--real-forward", action="store_true",
                        help="also run %s" % ", ".join(REAL_CASES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_case(args.child, not args.no_package)))
        return 0
    cases = args.case or (CASES + (REAL_CASES if args.real_forward else ()))
    header = "%-20s %8s %6s %8s %9s %13s %12s" % ("model", "params_M", "nodes", "build_s",
                                                  "export_s", "rss_build_mb", "peak_rss_mb")
    print(header)
    print("-" * len(header))
    for case in cases:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", case]
        if args.no_package:
            cmd.append("--no-package")
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print("%-20s failed: %s" % (case, done.stderr.strip().splitlines()[-1:]))
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print("%-20s %8.1f %6d %8.2f %9.2f %13.0f %12.0f" % (
            r["model"], r["params_m"], r["nodes"], r["build_s"], r["export_s"],
            r["rss_build_mb"], r["peak_rss_mb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
