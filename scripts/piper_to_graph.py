#!/usr/bin/env python3
"""Convert one of Piper's profiled instances (msr-fiddle/piper inputs/*.json)
into a pipeplan graph (protobuf JSON) for data x pipeline parallelism only.

Piper's unit is one "sample" of its profile: `mbsInBatch` of them make the
batch. Each node's TMPC "1" / "vanilla" (no tensor parallelism) gives
timePerSample (forward + backward per unit, split 1 : 2), parameterSize
(bytes), memoryUsageA (activation bytes per unit in flight); edges carry
communicationCost bytes per unit. The graph has batch_size 1 (one unit), and
element_bytes 4 so that `--optimizer sgd --precision fp32` keeps weights +
gradients = 2 x parameterSize, Piper's memoryUsageB. Nodes whose profile has
no tensor-parallel entries but "1" (GNMT) convert the same way. Prints the
instance's batch (mbsInBatch units) on stdout.

    piper_to_graph.py IN.json OUT.json
"""
import json
import sys


def convert(piper):
    nodes, edges = [], []
    out_bytes = {}
    for e in piper["edges"]:
        out_bytes[e["sourceId"]] = max(out_bytes.get(e["sourceId"], 0), e["communicationCost"])
    for n in piper["nodes"]:
        v = n["TMPCs"]["1"][0]
        assert v["id"] == "vanilla"
        t = v["timePerSample"]
        node = {"id": f'n{n["id"]}', "op": n["name"], "forward_seconds": t / 3,
                "backward_seconds": 2 * t / 3, "activation_bytes": v["memoryUsageA"],
                "output_bytes": out_bytes.get(n["id"], 0)}
        if v["parameterSize"] > 0:
            node["param_bytes"] = v["parameterSize"]
            node["param_key"] = f'n{n["id"]}'
        nodes.append(node)
    for e in piper["edges"]:
        edges.append({"src": f'n{e["sourceId"]}', "dst": f'n{e["destId"]}',
                      "bytes": e["communicationCost"]})
    return {"name": "piper", "batch_size": 1, "element_bytes": 4, "nodes": nodes, "edges": edges}


def main():
    piper = json.load(open(sys.argv[1]))
    json.dump(convert(piper), open(sys.argv[2], "w"), indent=1)
    print(int(piper["mbsInBatch"]))


if __name__ == "__main__":
    main()
