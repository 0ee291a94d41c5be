"""Reading what shape propagation left on fx nodes (node.meta["tensor_meta"]):
element counts, bytes and shapes of a node's tensor outputs, and which inputs
carry tensors. Every cost and every edge of the graph is computed from these.
"""

import math

import torch
import torch.fx
from torch.fx.passes.shape_prop import TensorMetadata


def meta_leaves(meta):
    """TensorMetadata leaves of a (possibly nested) tensor_meta value."""
    if isinstance(meta, TensorMetadata):
        return [meta]
    if isinstance(meta, (list, tuple)):
        out = []
        for m in meta:
            out.extend(meta_leaves(m))
        return out
    if isinstance(meta, dict):
        out = []
        for m in meta.values():
            out.extend(meta_leaves(m))
        return out
    return []


_ELEMENT_SIZE = {}


def element_size(dtype):
    if dtype not in _ELEMENT_SIZE:
        _ELEMENT_SIZE[dtype] = torch.empty((), dtype=dtype).element_size()
    return _ELEMENT_SIZE[dtype]


def numel(shape):
    return int(math.prod(shape)) if len(shape) else 1


def node_meta(node):
    return node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None


def tensor_numel(node):
    return sum(numel(m.shape) for m in meta_leaves(node_meta(node)))


def tensor_bytes(node):
    return float(sum(numel(m.shape) * element_size(m.dtype) for m in meta_leaves(node_meta(node))))


def first_shape(node):
    leaves = meta_leaves(node_meta(node))
    return tuple(leaves[0].shape) if leaves else None


def tensor_args(node):
    """Input fx nodes that carry tensors, in argument order."""
    return [a for a in node.all_input_nodes if meta_leaves(node_meta(a))]


def shape_of(value):
    return first_shape(value) if isinstance(value, torch.fx.Node) else None


def out_element_size(node, default=4):
    leaves = meta_leaves(node_meta(node))
    return element_size(leaves[0].dtype) if leaves else default
