"""Training data of a pipeplan job (docs/model-package.md): which rows step s trains
on and how they split into microbatches, for `tensors:FILE` and `synthetic:seed=N`.

tensors:FILE   torch.save({"inputs": T or [T, ...], "targets": T}); rows along dim 0.
               Step s trains rows (s*B + i) mod N, i < B (N rows in the file).
synthetic:seed=N
               Step s draws its batch from a CPU torch.Generator seeded with
               N * 2**32 + s, in this order: each model input in manifest order
               (integers: torch.randint(0, high, shape, dtype=int64) then cast;
               floats: torch.randn(shape, dtype=float32) then cast), then the
               targets (cross_entropy: torch.randint(0, C, output shape without its
               last dimension, dtype=int64), C = output.shape[-1]; mse:
               torch.randn(output shape, dtype=float32)); shapes are the manifest's
               with dimension batch_dim set to B. LibTorch draws the same numbers
               with the same calls on a CPU generator with that seed.

Microbatch m of M holds rows [m*B/M, (m+1)*B/M) of the step's batch.

API: open_data(spec, manifest, loss) -> data with .batch(step, B) -> (inputs, targets)
     microbatches(inputs, targets, M, batch_dim=0) -> [(inputs, targets)]
     DataError (bad spec or file; the message names it)
"""

import torch

from pipeplan import loss as pipeplan_loss
from pipeplan.export.package import dtype_of

SEED_STRIDE = 2 ** 32


class DataError(ValueError):
    """The data spec or file does not fit the package or the loss."""


def _row_shape(shape, batch_dim):
    return [d for i, d in enumerate(shape) if i != batch_dim]


class TensorData:
    """Rows of a torch.save'd file, cycled in order."""

    def __init__(self, path, manifest, loss):
        try:
            obj = torch.load(path)
        except Exception as e:  # torch.load raises many kinds
            raise DataError("data tensors:%s: cannot load: %s" % (path, e)) from e
        if isinstance(obj, (list, tuple)):
            obj = {"inputs": list(obj)}
        if not isinstance(obj, dict) or "inputs" not in obj:
            raise DataError("data tensors:%s: want a dict with \"inputs\" and \"targets\""
                            % path)
        inputs = obj["inputs"]
        self.inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        self.targets = obj.get("targets")
        self.batch_dim = manifest.get("batch_dim", 0)
        self._check(path, manifest, loss)

    def _check(self, path, manifest, loss):
        want = manifest["inputs"]
        if len(self.inputs) != len(want):
            raise DataError("data tensors:%s: %d inputs, the model takes %d"
                            % (path, len(self.inputs), len(want)))
        rows = set()
        for x, entry in zip(self.inputs, want):
            if not isinstance(x, torch.Tensor) or x.dim() == 0:
                raise DataError("data tensors:%s: input %r is not a tensor with rows"
                                % (path, entry["name"]))
            if x.dtype != dtype_of(entry["dtype"]) or \
                    _row_shape(x.shape, 0) != _row_shape(entry["shape"], self.batch_dim):
                raise DataError("data tensors:%s: input %r is %s %s; the model takes %s "
                                "rows of shape %s" % (
                                    path, entry["name"], x.dtype, list(x.shape),
                                    entry["dtype"],
                                    _row_shape(entry["shape"], self.batch_dim)))
            rows.add(int(x.shape[0]))
        if not isinstance(self.targets, torch.Tensor):
            raise DataError("data tensors:%s: has no \"targets\" tensor; loss %s needs "
                            "them" % (path, loss))
        rows.add(int(self.targets.shape[0]) if self.targets.dim() else 0)
        problem = pipeplan_loss.check_targets(
            loss, _row_shape(manifest["output"]["shape"], self.batch_dim),
            list(self.targets.shape[1:]), self.targets.dtype)
        if problem:
            raise DataError("data tensors:%s: targets %s %s: %s" % (
                path, self.targets.dtype, list(self.targets.shape), problem))
        if len(rows) != 1 or 0 in rows:
            raise DataError("data tensors:%s: inputs and targets must have the same "
                            "number (>0) of rows, got %s" % (path, sorted(rows)))
        self.rows = rows.pop()

    def batch(self, step, batch_size):
        index = (torch.arange(batch_size, dtype=torch.int64) + step * batch_size) % self.rows
        inputs = [x.index_select(0, index) for x in self.inputs]
        if self.batch_dim != 0:
            inputs = [x.movedim(0, self.batch_dim) for x in inputs]
        return inputs, self.targets.index_select(0, index)


class SyntheticData:
    """Random inputs and targets drawn per step from a seeded generator."""

    def __init__(self, seed, manifest, loss):
        if not 0 <= seed < 2 ** 31:
            raise DataError("data synthetic:seed=%d: the seed must be in [0, 2^31)" % seed)
        self.seed, self.manifest, self.loss = seed, manifest, loss

    def _shape(self, shape, batch_size):
        shape = list(shape)
        shape[self.manifest.get("batch_dim", 0)] = batch_size
        return shape

    def batch(self, step, batch_size):
        g = torch.Generator().manual_seed(self.seed * SEED_STRIDE + step)
        inputs = []
        for entry in self.manifest["inputs"]:
            shape, dtype = self._shape(entry["shape"], batch_size), dtype_of(entry["dtype"])
            if dtype.is_floating_point:
                x = torch.randn(shape, generator=g, dtype=torch.float32)
            else:
                x = torch.randint(0, int(entry.get("high", 2)), shape, generator=g,
                                  dtype=torch.int64)
            inputs.append(x.to(dtype))
        out = self._shape(self.manifest["output"]["shape"], batch_size)
        if self.loss == "cross_entropy":
            targets = torch.randint(0, out[-1], out[:-1], generator=g, dtype=torch.int64)
        else:
            targets = torch.randn(out, generator=g, dtype=torch.float32)
        return inputs, targets


def open_data(spec, manifest, loss):
    """The data source `spec` names: `tensors:FILE` or `synthetic:seed=N`."""
    kind, _, rest = spec.partition(":")
    if kind == "tensors" and rest:
        return TensorData(rest, manifest, loss)
    if kind == "synthetic" and rest.startswith("seed="):
        try:
            return SyntheticData(int(rest[len("seed="):]), manifest, loss)
        except ValueError as e:
            if isinstance(e, DataError):
                raise
    raise DataError("data %r: want tensors:FILE or synthetic:seed=N" % spec)


def microbatches(inputs, targets, count, batch_dim=0):
    """The batch split in order into `count` equal microbatches."""
    rows = int(targets.shape[0])
    if count < 1 or rows % count:
        raise DataError("batch of %d rows does not split into %d microbatches"
                        % (rows, count))
    size = rows // count
    return [([x.narrow(batch_dim, m * size, size) for x in inputs],
             targets.narrow(0, m * size, size)) for m in range(count)]
