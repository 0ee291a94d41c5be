"""chain_small.json: a 12-node MLP chain, small enough for the README quick start."""

from .builder import GraphBuilder


def chain_small_graph():
    """A 12-node MLP chain: input, 5 x (linear, gelu), loss. Batch 64, bf16."""
    n, e = 64, 2
    widths = [4096, 8192, 8192, 16384, 8192, 4096]
    g = GraphBuilder("chain_small", n, element_bytes=e)
    x = g.add("input", "placeholder", output_bytes=n * widths[0] * e)
    for i in range(5):
        k, m = widths[i], widths[i + 1]
        x = g.add("fc%d" % i, "linear", [x], forward_flops=2.0 * n * k * m, output_bytes=n * m * e,
                  activation_bytes=n * m * e, param_bytes=(k * m + m) * e)
        x = g.add("gelu%d" % i, "gelu", [x], forward_flops=8.0 * n * m, output_bytes=n * m * e,
                  activation_bytes=n * m * e)
    g.add("loss", "mse_loss", [x], forward_flops=3.0 * n * widths[-1], output_bytes=4)
    assert len(g.nodes) == 12
    return g.to_dict()
