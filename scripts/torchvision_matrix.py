#!/usr/bin/env python3
"""Export and plan every torchvision classification model: the matrix in docs/models.md.

Each model is built with random weights (weights=None, nothing is downloaded),
exported with the exporter's Python API (graph JSON and model package, the same
code `pipeplan_export.py --model torchvision.models:NAME` runs) in a process of
its own, its package reloaded with pipeplan.export.package.load_package, and its
graph planned with the CLI:

  pipeplan plan --graph G --cluster tests/data/cluster_8xa100.json --ranks 2 \\
      --schedule 1F1B --microbatches 4 -o json

The result is a Markdown table (model, parameters, graph nodes, export, reload,
predicted step time, stages, export and plan seconds) on stdout, then counts.

Usage (Debian's python3 has torch and torchvision):
  /usr/bin/python3 scripts/torchvision_matrix.py                 # every model
  /usr/bin/python3 scripts/torchvision_matrix.py --models 'resnet18,vit_*,googlenet(aux_logits=False)'
  /usr/bin/python3 scripts/torchvision_matrix.py --pipeplan build/client/pipeplan --keep /tmp/tv

A model is NAME, an fnmatch pattern over torchvision.models.list_models(), or
NAME(key=value, ...) for builder arguments (Python literals).
"""

import argparse
import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENT_PY = os.path.join(ROOT, "client", "python")

# Inception v3's auxiliary head needs its own input size: at 224 its 5x5 conv meets a
# 3x3 map. Every other model takes 224.
IMAGE_SIZE = {"inception_v3": 299}

# GoogLeNet and Inception v3 return a namedtuple with the auxiliary logits in training
# mode, which a package cannot train (its loss takes one tensor): the matrix lists them
# as built by default and with aux_logits=False, the way out it names.
VARIANTS = ("googlenet(aux_logits=False)", "inception_v3(aux_logits=False)")


def parse_model(spec):
    """`name` or `name(key=value, ...)` -> (name, kwargs)."""
    name, paren, rest = spec.partition("(")
    if not paren:
        return spec.strip(), {}
    if not rest.endswith(")"):
        raise ValueError("model %r: write NAME(key=value, ...)" % spec)
    call = ast.parse("f(%s)" % rest[:-1], mode="eval").body
    kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    if call.args or None in kwargs:
        raise ValueError("model %r: builder arguments must be key=value" % spec)
    return name.strip(), kwargs


def select_models(patterns, available):
    """The model specs `patterns` (comma-separated) names, in list order; every model
    and VARIANTS when empty."""
    if not patterns:
        return list(available) + list(VARIANTS)
    out = []
    for pattern in (p.strip() for p in split_top_level(patterns)):
        if "(" in pattern:
            out.append(pattern)
            continue
        matched = fnmatch.filter(available, pattern)
        if not matched:
            raise SystemExit("torchvision_matrix: no model matches %r" % pattern)
        out.extend(m for m in matched if m not in out)
    return out


def split_top_level(text):
    """Splits on commas outside parentheses (builder arguments have commas too)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def export_one(spec, batch, image_size, graph_path, package_dir, result_path):
    """The child process: builds, exports and reloads one model; writes a JSON result.
    Runs alone so that a crash, a hang or a large model's memory ends with it."""
    import warnings

    sys.path.insert(0, CLIENT_PY)
    import torch
    import torchvision.models
    import pipeplan.export
    from pipeplan.export.package import load_package

    name, kwargs = parse_model(spec)
    size = image_size or IMAGE_SIZE.get(name, 224)
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, **kwargs)
    params = sum(p.numel() for p in model.parameters())
    start = time.time()
    result = {"params": params, "image_size": size}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            graph = pipeplan.export(model, (torch.randn(batch, 3, size, size),), name=spec,
                                    package=package_dir)
        except Exception as e:  # the matrix records any failure, the exporter's or not
            result.update(ok=False, error="%s: %s" % (type(e).__name__, e))
            graph = None
    result["export_seconds"] = time.time() - start
    result["fake_fallback"] = any("fake tensors failed" in str(w.message) for w in caught)
    if graph is not None:
        pipeplan.export.write_graph(graph, graph_path)
        result.update(ok=True, nodes=len(graph["nodes"]))
        try:
            load_package(package_dir)
            result["reload"] = "ok"
        except Exception as e:  # noqa: BLE001: recorded in the table
            result["reload"] = "%s: %s" % (type(e).__name__, e)
    with open(result_path, "w") as f:
        json.dump(result, f)


def run_export(spec, args, workdir):
    """Runs export_one in a child process; returns its result dict."""
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in spec)
    paths = {k: os.path.join(workdir, safe + suffix)
             for k, suffix in (("graph", ".json"), ("package", ".ptpkg"),
                               ("result", ".result.json"))}
    cmd = [sys.executable, os.path.abspath(__file__), "--child", spec,
           "--batch", str(args.batch), "--image-size", str(args.image_size or 0),
           "--child-out", paths["graph"], paths["package"], paths["result"]]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timed out after %d s" % args.timeout}
    if proc.returncode != 0 or not os.path.exists(paths["result"]):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "error": "exit %d: %s" % (proc.returncode, tail)}
    with open(paths["result"]) as f:
        result = json.load(f)
    result.update(graph=paths["graph"], package=paths["package"])
    return result


def run_plan(graph_path, args):
    """`pipeplan plan` on the graph; returns {step_seconds, stages, replicas} or
    {plan_error}."""
    cmd = [args.pipeplan, "plan", "--graph", graph_path, "--cluster", args.cluster,
           "--ranks", str(args.ranks), "--schedule", args.schedule,
           "--microbatches", str(args.microbatches), "-o", "json"]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"plan_error": "exit %d: %s" % (proc.returncode, tail)}
    plan = json.loads(proc.stdout)
    return {"step_seconds": plan["step_seconds"], "stages": len(plan["stages"]),
            "replicas": len(plan.get("replicas") or [None]),
            "plan_seconds": time.time() - start}


def short(text, limit=160):
    """One table cell: the first line, cut to `limit`, pipes escaped."""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    line = line if len(line) <= limit else line[:limit - 3] + "..."
    return line.replace("|", "\\|")


def row(spec, r):
    """The Markdown table row of one model's result."""
    params = "%.1f M" % (r["params"] / 1e6) if "params" in r else ""
    if not r.get("ok"):
        return "| %s | %s | | failed: %s | | | | | |" % (spec, params, short(r["error"]))
    export = "ok (real forward)" if r.get("fake_fallback") else "ok"
    reload = "ok" if r.get("reload") == "ok" else "failed: " + short(r.get("reload"))
    if "plan_error" in r:
        plan, stages, plan_s = "failed: " + short(r["plan_error"]), "", ""
    else:
        plan = "%.3f ms" % (r["step_seconds"] * 1e3)
        stages = "%d (x%d replicas)" % (r["stages"], r["replicas"])
        plan_s = "%.1f" % r["plan_seconds"]
    return "| %s | %s | %d | %s | %s | %s | %s | %.1f | %s |" % (
        spec, params, r["nodes"], export, reload, plan, stages, r["export_seconds"], plan_s)


HEADER = ("| model | params | nodes | export | package reload | plan: predicted step "
          "| stages | export s | plan s |\n|---|---|---|---|---|---|---|---|---|")


def summary(results):
    """The counts under the table."""
    exported = [s for s, r in results if r.get("ok")]
    reloaded = [s for s, r in results if r.get("reload") == "ok"]
    planned = [s for s, r in results if r.get("ok") and "step_seconds" in r]
    failed = [s for s, r in results if not r.get("ok")]
    return ("%d models: %d exported, %d packages reloaded, %d planned, %d failed%s"
            % (len(results), len(exported), len(reloaded), len(planned), len(failed),
               (" (" + ", ".join(failed) + ")") if failed else ""))


def _parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", help="comma-separated names, fnmatch patterns or "
                   "NAME(key=value) (default: every classification model and %s)"
                   % ", ".join(VARIANTS))
    p.add_argument("--pipeplan", default=os.environ.get(
        "PIPEPLAN", os.path.join(ROOT, "build", "client", "pipeplan")),
        help="the pipeplan CLI binary (default: $PIPEPLAN or build/client/pipeplan)")
    p.add_argument("--cluster", default=os.path.join(ROOT, "tests", "data",
                                                     "cluster_8xa100.json"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--schedule", default="1F1B")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--batch", type=int, default=2, help="example batch (2)")
    p.add_argument("--image-size", type=int, default=0,
                   help="image side (default 224; inception_v3 299)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per model (900)")
    p.add_argument("--keep", metavar="DIR", help="keep graphs and packages in DIR")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", nargs=3, help=argparse.SUPPRESS)
    return p


def run_matrix(args):
    """Exports and plans every selected model, printing rows as they finish."""
    import torchvision.models  # only the list; each child imports its own

    specs = select_models(args.models, torchvision.models.list_models(
        module=torchvision.models))
    if not os.access(args.pipeplan, os.X_OK):
        raise SystemExit("torchvision_matrix: %s is not an executable (build it or give "
                         "--pipeplan)" % args.pipeplan)
    workdir = args.keep or tempfile.mkdtemp(prefix="torchvision_matrix.")
    os.makedirs(workdir, exist_ok=True)
    print(HEADER, flush=True)
    results = []
    try:
        for spec in specs:
            r = run_export(spec, args, workdir)
            if r.get("ok"):
                r.update(run_plan(r["graph"], args))
            if not args.keep and r.get("package"):
                shutil.rmtree(r["package"], ignore_errors=True)  # GBs for the big ones
            results.append((spec, r))
            print(row(spec, r), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n" + summary(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(results), f, indent=1)
    return 0 if all(r.get("ok") and "step_seconds" in r for _, r in results) else 1


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.child:
        export_one(args.child, args.batch, args.image_size, *args.child_out)
        return 0
    return run_matrix(args)


if __name__ == "__main__":
    sys.exit(main())
