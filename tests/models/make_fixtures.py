#!/usr/bin/env python3
"""Build the test fixtures of pipelined training in a directory, at test time (no
binary files are committed): for each model of tiny_models.py, its graph JSON, its
model package and a `tensors:` data file.

  /usr/bin/python3 tests/models/make_fixtures.py --out-dir DIR [--model gpt ...]
      [--rows 64] [--example-batch 4]

writes DIR/<model>.json, DIR/<model>.ptpkg/ and DIR/<model>_data.pt
(torch.save({"inputs": T, "targets": T}), --rows rows, from a generator seeded
with 1). gpt: tokens of length seq+1, inputs the first seq, targets the last seq
(next-token prediction, cross_entropy); cnn: random images and class labels
(cross_entropy); skip: random inputs and regression targets (mse).

API: make_fixture(name, out_dir, rows=64, example_batch=4) -> dict of the paths
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import torch  # noqa: E402

import pipeplan_export  # noqa: E402
import tiny_models  # noqa: E402

LOSS = {"gpt": "cross_entropy", "cnn": "cross_entropy", "skip": "mse"}


def _data(name, module, rows):
    g = torch.Generator().manual_seed(1)
    if name == "gpt":
        vocab, seq = module.wte.num_embeddings, module.wpe.num_embeddings
        tokens = torch.randint(0, vocab, (rows, seq + 1), generator=g)
        return {"inputs": tokens[:, :-1].clone(), "targets": tokens[:, 1:].clone()}
    if name == "cnn":
        return {"inputs": torch.randn(rows, 3, 8, 8, generator=g),
                "targets": torch.randint(0, 10, (rows,), generator=g)}
    if name == "skip":
        return {"inputs": torch.randn(rows, 16, generator=g),
                "targets": torch.randn(rows, 8, generator=g)}
    raise KeyError(name)


def make_fixture(name, out_dir, rows=64, example_batch=4):
    """Exports model `name` of tiny_models into out_dir; returns its paths."""
    module, inputs = tiny_models.MODELS[name](batch=example_batch)
    paths = {"graph": os.path.join(out_dir, name + ".json"),
             "package": os.path.join(out_dir, name + ".ptpkg"),
             "data": os.path.join(out_dir, name + "_data.pt")}
    os.makedirs(out_dir, exist_ok=True)
    graph = pipeplan_export.export(module, inputs, name=name, package=paths["package"],
                                   loss=LOSS[name])
    pipeplan_export.write_graph(graph, paths["graph"])
    torch.save(_data(name, module, rows), paths["data"])
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description="Build pipelined-training fixtures.")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--model", action="append", choices=sorted(tiny_models.MODELS),
                        help="repeatable; default: all")
    parser.add_argument("--rows", type=int, default=64, help="rows of each data file")
    parser.add_argument("--example-batch", type=int, default=4,
                        help="batch of the example inputs (the graph's batch_size)")
    args = parser.parse_args(argv)
    for name in args.model or sorted(tiny_models.MODELS):
        paths = make_fixture(name, args.out_dir, args.rows, args.example_batch)
        print("%s: %s %s %s" % (name, paths["graph"], paths["package"], paths["data"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
