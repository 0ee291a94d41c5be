"""Reproducible random operators (dropout, ...) in a pipelined job and in the
one-process reference trainer (docs/model-package.md, "Random operators").

Before every random operator of the model, the torch generator is seeded from
the job's seed, the step, the microbatch (over all replicas: replica q's
microbatch m of M is q*M + m) and the operator's node index in the package's
graph. A node's draws therefore depend neither on the plan's cut nor on which
worker runs it, so

  - a run repeats exactly, and a restart from a checkpoint continues the same
    stream (the step says where it is);
  - the reference trainer, seeded alike, draws the same masks as any plan with
    the same microbatch count.

The stage compiler and the reference trainer insert the same seeding calls
(copy_random; seed_before_random for the whole model); the module's `_pp_rng` attribute carries the
(seed, step, microbatch) part and is set before each microbatch's forward: by
the torch executor (torch_executor.cc, RngBase: the same formula as base())
and by the reference trainer (set_base).
"""

import torch
import torch.nn.functional as F

# Everything stays below 2**51, so TorchScript's int64 and Python's ints agree.
_PRIME = 2147483647  # 2**31 - 1
_MULTIPLIER = 1000003
ATTRIBUTE = "_pp_rng"

_RANDOM_FUNCTIONS = {
    F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
    F.feature_alpha_dropout, torch.dropout, torch.bernoulli, torch.rand, torch.randn,
    torch.rand_like, torch.randn_like, torch.randint, torch.randint_like, torch.randperm,
    torch.normal, torch.multinomial, torch.poisson,
}
_RANDOM_METHODS = {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_",
                   "geometric_", "cauchy_", "log_normal_"}
_RANDOM_MODULES = (torch.nn.modules.dropout._DropoutNd, torch.nn.RReLU)


def mix(a, b):
    """(a, b) -> a number in [0, 2**31 - 1); a, b >= 0. Also in TorchScript."""
    return (a % _PRIME * _MULTIPLIER + b) % _PRIME


def base(seed, step, microbatch):
    """The (seed, step, microbatch) part of every seed: what _pp_rng holds."""
    return mix(mix(seed % _PRIME, step), microbatch)


def pipeplan_seed(rng_base: int, node: int) -> None:
    """Seeds the generator for the random operator at node index `node`."""
    torch.manual_seed((rng_base % 2147483647 * 1000003 + node) % 2147483647)


def is_random(gm, node):
    """True when `node` of GraphModule `gm` draws random numbers."""
    if node.op == "call_function":
        return node.target in _RANDOM_FUNCTIONS
    if node.op == "call_method":
        return node.target in _RANDOM_METHODS
    if node.op == "call_module":
        return isinstance(gm.get_submodule(node.target), _RANDOM_MODULES)
    return False


def copy_random(graph, node, lookup, index):
    """Appends to `graph` the seeding call for the random node `node` (at
    `index` in the package's graph), then the node, its tensor argument made
    contiguous; returns the copy. Contiguous: a random op on a strided input
    (the output of a transpose) draws in memory order, and TorchScript's
    autodiff lowers dropout onto a mask laid out like the input where eager
    PyTorch lays it out contiguously, so the same draws would land on other
    elements in a worker than in the reference."""
    graph.call_function(pipeplan_seed, (graph.get_attr(ATTRIBUTE), index))
    copy = graph.node_copy(node, lookup)
    if copy.args and isinstance(copy.args[0], torch.fx.Node):
        with graph.inserting_before(copy):
            copy.update_arg(0, graph.call_method("contiguous", (copy.args[0],)))
    return copy


def seed_before_random(gm):
    """A GraphModule computing what `gm` computes, with each random node seeded
    as the pipelined stages seed it; gm itself is unchanged. Set its base with
    set_base before each microbatch."""
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    graph, env = torch.fx.Graph(), {}
    for n in gm.graph.nodes:
        if is_random(gm, n):
            env[n] = copy_random(graph, n, lambda a: env[a], index[n])
        else:
            env[n] = graph.node_copy(n, lambda a: env[a])
    setattr(gm, ATTRIBUTE, 0)
    out = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    out.train(gm.training)
    return out


def set_base(module, seed, step, microbatch):
    setattr(module, ATTRIBUTE, base(seed, step, microbatch))
