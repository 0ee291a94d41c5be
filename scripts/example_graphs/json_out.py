"""Writes example graphs and clusters as compact JSON, and summarises a graph.

One node, edge or device a line keeps the committed files small and their diffs
readable. Graphs are checked with the planner's rules before they are written, so a
generator bug fails here rather than in a test that loads the file.
"""

import json
import os
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The one Python copy of the planner's graph rules.
sys.path.insert(0, os.path.join(_REPO_ROOT, "client", "python"))
from pipeplan_graph_check import validate  # noqa: E402


def _num(x):
    # Integral floats print as ints ("2048", not "2048.0"), below 2**53 where exact.
    if isinstance(x, float) and x.is_integer() and abs(x) < 2 ** 53:
        return int(x)
    return x


def _compact(obj):
    if isinstance(obj, dict):
        return {k: _compact(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_compact(v) for v in obj]
    return _num(obj)


def dumps(obj):
    """Compact JSON with one node / edge / device per line (small and diffable)."""
    obj = _compact(obj)
    lines = ["{"]
    items = list(obj.items())
    for i, (key, value) in enumerate(items):
        sep = "," if i + 1 < len(items) else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(" %s:[" % json.dumps(key))
            for j, item in enumerate(value):
                lines.append("  " + json.dumps(item, separators=(",", ":"), sort_keys=False)
                             + ("," if j + 1 < len(value) else ""))
            lines.append(" ]" + sep)
        else:
            lines.append(" %s:%s%s" % (json.dumps(key), json.dumps(value), sep))
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(path, obj):
    """Writes `obj` to `path` as dumps() does, validating it first if it is a graph."""
    if "nodes" in obj:
        validate(obj)
    # Write beside the target and rename, so an interrupted run leaves no half file.
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(obj))
    os.replace(tmp, path)


def graph_summary(graph):
    """One line: node and edge counts, forward flops, parameter bytes (tied counted once)."""
    fwd = sum(n.get("forward_flops", 0) for n in graph["nodes"])
    params = {}
    for n in graph["nodes"]:
        if n.get("param_bytes"):
            key = n.get("param_key") or n["id"]
            params[key] = max(params.get(key, 0), n["param_bytes"])
    return "%d nodes, %d edges, %.3g fwd flops, %.3g param bytes" % (
        len(graph["nodes"]), len(graph["edges"]), fwd, sum(params.values()))
