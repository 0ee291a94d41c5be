"""Generators of the example model graphs and clusters in tests/data/.

The command is scripts/gen_example_graphs.py; this package holds what it draws on,
one concept a module:
  builder.py      GraphBuilder and the ACT_NONE / WGF_NONE conventions
  transformer.py  the GPT decoder graph and the synthetic transformer
  cnn.py          CnnBuilder and the CNN graphs (ResNet-50, a deep ResNet, Inception)
  chain.py        the 12-node MLP chain
  clusters.py     the example cluster topologies
  json_out.py     the compact JSON writer (validates graphs first) and the summary line
Standard library only, and deterministic: the same call gives byte-identical files.
"""
