"""The losses a pipeplan job trains with (docs/model-package.md), as the last
stage computes them: mean reduction over the microbatch. The model package
names its default loss from LOSSES; the trainers and the stage chain compute it.

  cross_entropy  y reshaped to [-1, y.shape[-1]] (classes or tokens last),
                 t reshaped to [-1] (int64)
  mse            t has y's shape (converted to y's dtype)

API: LOSSES, compute(name, y, t) -> scalar tensor, check_targets(name, output_shape,
     targets_shape, targets_dtype) -> error text or None
"""

import torch
import torch.nn.functional as F

LOSSES = ("cross_entropy", "mse")


def compute(name, y, t):
    """The mean loss `name` of output `y` against targets `t`."""
    if name == "cross_entropy":
        return F.cross_entropy(y.reshape(-1, y.shape[-1]), t.reshape(-1).long())
    if name == "mse":
        return F.mse_loss(y, t.to(y.dtype))
    raise ValueError("loss %r: use one of %s" % (name, ", ".join(LOSSES)))


def check_targets(name, output_shape, targets_shape, targets_dtype):
    """Why targets of this per-row shape and dtype do not fit loss `name` on outputs
    of per-row shape `output_shape` (both without the batch dimension), or None."""
    output_shape, targets_shape = list(output_shape), list(targets_shape)
    if name == "cross_entropy":
        if targets_dtype.is_floating_point or targets_dtype == torch.bool:
            return "cross_entropy needs integer class targets, got %s" % targets_dtype
        if targets_shape != output_shape[:-1]:
            return ("cross_entropy on outputs of row shape %s needs targets of row shape "
                    "%s, got %s" % (output_shape, output_shape[:-1], targets_shape))
        return None
    if name == "mse":
        if not targets_dtype.is_floating_point:
            return "mse needs floating-point targets, got %s" % targets_dtype
        if targets_shape != output_shape:
            return ("mse needs targets of the output's row shape %s, got %s"
                    % (output_shape, targets_shape))
        return None
    return "loss %r: use one of %s" % (name, ", ".join(LOSSES))
