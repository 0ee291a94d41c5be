"""CNN example graphs: CnnBuilder and ResNet-50, a deep ResNet and an Inception net.

All are fp32, NCHW, at layer granularity (conv / batch_norm / relu nodes), with each
node's (C, H, W) tracked so that flops and bytes follow from the shapes.
"""

import math

from .builder import GraphBuilder


class CnnBuilder:
    """Layer-granularity CNN nodes with shapes tracked per node."""

    def __init__(self, name, batch, image=224, dtype_bytes=4):
        self.g = GraphBuilder(name, batch, element_bytes=dtype_bytes)
        self.n = batch
        self.e = dtype_bytes
        self.shape = {}  # id -> (C, H, W)
        x = self.g.add("x", "placeholder", output_bytes=self._bytes((3, image, image)))
        self.shape[x] = (3, image, image)
        self.input = x

    def _bytes(self, chw):
        c, h, w = chw
        return self.n * c * h * w * self.e

    def _numel(self, chw):
        c, h, w = chw
        return self.n * c * h * w

    def conv(self, node_id, src, cout, k, stride=1, pad=None, saved_output=True):
        cin, hi, wi = self.shape[src]
        pad = k // 2 if pad is None else pad
        ho = (hi + 2 * pad - k) // stride + 1
        wo = (wi + 2 * pad - k) // stride + 1
        out = (cout, ho, wo)
        self.g.add(node_id, "conv2d", [src], forward_flops=2.0 * cin * k * k * self._numel(out),
                   output_bytes=self._bytes(out),
                   activation_bytes=self._bytes(out) if saved_output else None,
                   param_bytes=cin * cout * k * k * self.e)  # no bias (followed by BN)
        self.shape[node_id] = out
        return node_id

    def bn(self, node_id, src):
        c = self.shape[src][0]
        # BN saves its input (charged to the conv) plus per-channel mean/invstd; its own
        # output is overwritten by the in-place ReLU or consumed by an add.
        self.g.add(node_id, "batch_norm", [src], forward_flops=4.0 * self._numel(self.shape[src]),
                   output_bytes=self._bytes(self.shape[src]), activation_bytes=2 * c * 4,
                   param_bytes=2 * c * self.e, weight_grad_fraction=0.25)
        self.shape[node_id] = self.shape[src]
        return node_id

    def relu(self, node_id, src):
        shape = self.shape[src]
        self.g.add(node_id, "relu", [src], forward_flops=self._numel(shape),
                   output_bytes=self._bytes(shape), activation_bytes=self._bytes(shape))
        self.shape[node_id] = shape
        return node_id

    def conv_bn_relu(self, prefix, src, cout, k, stride=1, pad=None):
        x = self.conv(prefix + "conv", src, cout, k, stride, pad)
        x = self.bn(prefix + "bn", x)
        return self.relu(prefix + "relu", x)

    def pool(self, node_id, src, k, stride, pad, op="max_pool2d", ceil=False):
        c, hi, wi = self.shape[src]
        rnd = math.ceil if ceil else math.floor
        ho = int(rnd((hi + 2 * pad - k) / float(stride))) + 1
        wo = int(rnd((wi + 2 * pad - k) / float(stride))) + 1
        out = (c, ho, wo)
        indices = self._numel(out) * 8 if op == "max_pool2d" else None  # int64 argmax
        self.g.add(node_id, op, [src], forward_flops=k * k * self._numel(out),
                   output_bytes=self._bytes(out), activation_bytes=indices)
        self.shape[node_id] = out
        return node_id

    def add(self, node_id, a, b):
        shape = self.shape[a]
        assert shape == self.shape[b], (node_id, shape, self.shape[b])
        self.g.add(node_id, "add", [a, b], forward_flops=self._numel(shape),
                   output_bytes=self._bytes(shape))
        self.shape[node_id] = shape
        return node_id

    def cat(self, node_id, srcs):
        c = sum(self.shape[s][0] for s in srcs)
        _, h, w = self.shape[srcs[0]]
        out = (c, h, w)
        self.g.add(node_id, "cat", srcs, output_bytes=self._bytes(out))
        self.shape[node_id] = out
        return node_id

    def head(self, src, classes=1000, dropout=False):
        c, h, w = self.shape[src]
        feat = self.n * c * self.e
        self.g.add("avgpool", "adaptive_avg_pool2d", [src], forward_flops=self._numel((c, h, w)),
                   output_bytes=feat, activation_bytes=feat)  # saved by fc
        x = self.g.add("flatten", "flatten", ["avgpool"], output_bytes=feat)
        if dropout:
            x = self.g.add("dropout", "dropout", [x], forward_flops=self.n * c, output_bytes=feat,
                           activation_bytes=self.n * c + feat)
        logits = self.n * classes * self.e
        self.g.add("fc", "linear", [x], forward_flops=2.0 * self.n * c * classes,
                   output_bytes=logits, param_bytes=(c * classes + classes) * self.e)
        self.g.add("targets", "placeholder", output_bytes=self.n * 8)
        self.g.add("cross_entropy", "cross_entropy", ["fc", "targets"],
                   forward_flops=5.0 * self.n * classes, output_bytes=4, activation_bytes=logits)


def resnet50_graph(batch=32):
    c = CnnBuilder("resnet50", batch)
    x = c.conv("conv1", c.input, 64, 7, stride=2, pad=3)
    x = c.bn("bn1", x)
    x = c.relu("relu", x)
    x = c.pool("maxpool", x, 3, 2, 1)
    cin = 64
    for stage, (blocks, width, stride) in enumerate(
            [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], start=1):
        for blk in range(blocks):
            p = "layer%d.%d." % (stage, blk)
            s = stride if blk == 0 else 1
            identity = x
            y = c.conv(p + "conv1", x, width, 1)
            y = c.bn(p + "bn1", y)
            y = c.relu(p + "relu1", y)
            y = c.conv(p + "conv2", y, width, 3, stride=s)  # v1.5: stride on the 3x3
            y = c.bn(p + "bn2", y)
            y = c.relu(p + "relu2", y)
            y = c.conv(p + "conv3", y, width * 4, 1)
            y = c.bn(p + "bn3", y)
            if blk == 0:
                identity = c.conv(p + "downsample.0", x, width * 4, 1, stride=s)
                identity = c.bn(p + "downsample.1", identity)
            y = c.add(p + "add", y, identity)
            x = c.relu(p + "relu3", y)
        cin = width * 4
    assert cin == 2048
    c.head(x)
    return c.g.to_dict()


def deep_resnet_graph(blocks=(3, 16, 72, 3), batch=32, name="cnn_1k"):
    """A bottleneck ResNet deeper than ResNet-152 (about 1K nodes by default)."""
    c = CnnBuilder(name, batch)
    x = c.conv("conv1", c.input, 64, 7, stride=2, pad=3)
    x = c.relu("relu", c.bn("bn1", x))
    x = c.pool("maxpool", x, 3, 2, 1)
    for stage, (count, width, stride) in enumerate(
            zip(blocks, (64, 128, 256, 512), (1, 2, 2, 2)), start=1):
        for blk in range(count):
            p = "layer%d.%d." % (stage, blk)
            s = stride if blk == 0 else 1
            identity = x
            y = c.relu(p + "relu1", c.bn(p + "bn1", c.conv(p + "conv1", x, width, 1)))
            y = c.relu(p + "relu2", c.bn(p + "bn2", c.conv(p + "conv2", y, width, 3, stride=s)))
            y = c.bn(p + "bn3", c.conv(p + "conv3", y, width * 4, 1))
            if blk == 0:
                identity = c.bn(p + "downsample.1",
                                c.conv(p + "downsample.0", x, width * 4, 1, stride=s))
            x = c.relu(p + "relu3", c.add(p + "add", y, identity))
    c.head(x)
    return c.g.to_dict()


def inception_like_graph(batch=32):
    """GoogLeNet layout (torchvision's, 3x3 in the third branch), no aux heads."""
    c = CnnBuilder("inception_like", batch)
    x = c.conv_bn_relu("conv1.", c.input, 64, 7, stride=2, pad=3)
    x = c.pool("maxpool1", x, 3, 2, 0, ceil=True)
    x = c.conv_bn_relu("conv2.", x, 64, 1)
    x = c.conv_bn_relu("conv3.", x, 192, 3)
    x = c.pool("maxpool2", x, 3, 2, 0, ceil=True)
    modules = [
        ("inception3a", 64, 96, 128, 16, 32, 32),
        ("inception3b", 128, 128, 192, 32, 96, 64),
        "maxpool3",
        ("inception4a", 192, 96, 208, 16, 48, 64),
        ("inception4b", 160, 112, 224, 24, 64, 64),
        ("inception4c", 128, 128, 256, 24, 64, 64),
        ("inception4d", 112, 144, 288, 32, 64, 64),
        ("inception4e", 256, 160, 320, 32, 128, 128),
        "maxpool4",
        ("inception5a", 256, 160, 320, 32, 128, 128),
        ("inception5b", 384, 192, 384, 48, 128, 128),
    ]
    for m in modules:
        if isinstance(m, str):
            k = 3 if m == "maxpool3" else 2
            x = c.pool(m, x, k, 2, 0, ceil=True)
            continue
        name, c1, c3r, c3, c5r, c5, pp = m
        p = name + "."
        b1 = c.conv_bn_relu(p + "branch1.", x, c1, 1)
        b2 = c.conv_bn_relu(p + "branch2.0.", x, c3r, 1)
        b2 = c.conv_bn_relu(p + "branch2.1.", b2, c3, 3)
        b3 = c.conv_bn_relu(p + "branch3.0.", x, c5r, 1)
        b3 = c.conv_bn_relu(p + "branch3.1.", b3, c5, 3)
        b4 = c.pool(p + "branch4.0", x, 3, 1, 1, ceil=True)
        b4 = c.conv_bn_relu(p + "branch4.1.", b4, pp, 1)
        x = c.cat(p + "cat", [b1, b2, b3, b4])
    c.head(x, dropout=True)
    return c.g.to_dict()
