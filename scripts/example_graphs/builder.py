"""GraphBuilder: collects a pipeplan.v1.ModelGraph's nodes and edges in order.

Every example graph is built through GraphBuilder.add, so the format's defaults are
handled in one place. The format reads activation_bytes 0 as "same as output_bytes"
and weight_grad_fraction 0 as one half, so a node that keeps nothing alive states
ACT_NONE (1 byte) and a parameter-free node, whose backward is all input gradient,
states WGF_NONE.
"""

ACT_NONE = 1.0  # "saves nothing": 0 would mean output_bytes
WGF_NONE = 1e-6  # "no weight gradient": 0 would mean one half


class GraphBuilder:
    """Collects nodes and edges in topological order."""

    def __init__(self, name, batch_size, element_bytes=4):
        self.name = name
        self.batch_size = batch_size
        self.element_bytes = element_bytes
        self.nodes = []
        self.edges = []
        self._out = {}

    def add(self, node_id, op, inputs=(), forward_flops=0.0, output_bytes=0.0,
            activation_bytes=None, param_bytes=0.0, param_key="", backward_flops=0.0,
            weight_grad_fraction=None):
        """Adds a node fed by `inputs` (node ids); returns its id.

        activation_bytes None means ACT_NONE; weight_grad_fraction None means 0.5 for
        nodes with parameters and WGF_NONE for nodes without.
        """
        if node_id in self._out:
            raise ValueError("duplicate node id %r" % node_id)
        node = {"id": node_id, "op": op}
        if forward_flops:
            node["forward_flops"] = forward_flops
        if backward_flops:
            node["backward_flops"] = backward_flops
        if param_bytes:
            node["param_bytes"] = param_bytes
            node["param_key"] = param_key or node_id
        node["activation_bytes"] = ACT_NONE if activation_bytes is None else activation_bytes
        if output_bytes:
            node["output_bytes"] = output_bytes
        if weight_grad_fraction is None:
            weight_grad_fraction = 0.5 if param_bytes else WGF_NONE
        if forward_flops and weight_grad_fraction != 0.5:
            node["weight_grad_fraction"] = weight_grad_fraction
        self.nodes.append(node)
        self._out[node_id] = output_bytes
        for src in inputs:
            if src not in self._out:
                raise ValueError("%r feeds %r before it exists" % (src, node_id))
            self.edges.append({"src": src, "dst": node_id, "bytes": self._out[src]})
        return node_id

    def to_dict(self):
        out = {"name": self.name, "batch_size": self.batch_size}
        # element_bytes 4 is the format's default; leaving it out keeps files short.
        if self.element_bytes != 4:
            out["element_bytes"] = self.element_bytes
        out.update({"nodes": self.nodes, "edges": self.edges})
        return out
