"""The planner's rules for a graph JSON (docs/graph-format.md), in Python.

    from pipeplan_graph_check import validate
    validate(graph)   # graph: the dict of a pipeplan.v1.ModelGraph; raises ValueError

One copy, used by the exporter's tests and by scripts/gen_example_graphs.py
before it writes a file. Standard library only. The planner is the authority
(planner_service/core/graph.cc); this catches the same mistakes before a file
leaves Python: unknown fields (protobuf's JSON parser rejects them), missing or
duplicate node ids, negative or non-finite numbers, weight_grad_fraction over
1, edges to unknown nodes or self-loops, and cycles.
"""

import math

GRAPH_FIELDS = frozenset({"name", "nodes", "edges", "batch_size", "element_bytes"})
NODE_FIELDS = frozenset({"id", "op", "forward_flops", "backward_flops", "param_bytes",
                         "activation_bytes", "output_bytes", "forward_seconds",
                         "backward_seconds", "param_key", "weight_grad_fraction", "module",
                         "outputs_without_grad"})
EDGE_FIELDS = frozenset({"src", "dst", "bytes", "output"})


def _check_fields(what, obj, allowed):
    unknown = set(obj) - allowed
    if unknown:
        raise ValueError("%s has unknown fields %s" % (what, sorted(unknown)))


def _check_nodes(nodes):
    """Node id -> index, in order."""
    if not nodes:
        raise ValueError("graph has no nodes")
    ids = {}
    for n in nodes:
        _check_fields("node %r" % n.get("id"), n, NODE_FIELDS)
        if not n.get("id") or n["id"] in ids:
            raise ValueError("empty or duplicate id %r" % n.get("id"))
        ids[n["id"]] = len(ids)
        for k, v in n.items():
            if isinstance(v, (int, float)) and (not math.isfinite(v) or v < 0):
                raise ValueError("%s.%s = %r" % (n["id"], k, v))
        if n.get("weight_grad_fraction", 0) > 1:
            raise ValueError("%s.weight_grad_fraction > 1" % n["id"])
    return ids


def _check_acyclic(num_nodes, succ, indeg):
    ready = [v for v in range(num_nodes) if indeg[v] == 0]
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    if seen != num_nodes:
        raise ValueError("graph has a cycle")


def validate(graph):
    """Raises ValueError naming the first rule `graph` breaks."""
    _check_fields("graph", graph, GRAPH_FIELDS)
    ids = _check_nodes(graph["nodes"])
    succ = [[] for _ in ids]
    indeg = [0] * len(ids)
    for e in graph.get("edges", []):
        _check_fields("edge %r" % (e,), e, EDGE_FIELDS)
        if e.get("src") not in ids or e.get("dst") not in ids or e["src"] == e["dst"]:
            raise ValueError("bad edge %r" % (e,))
        if not math.isfinite(e.get("bytes", 0)) or e.get("bytes", 0) < 0:
            raise ValueError("bad edge bytes %r" % (e,))
        succ[ids[e["src"]]].append(ids[e["dst"]])
        indeg[ids[e["dst"]]] += 1
    _check_acyclic(len(ids), succ, indeg)
