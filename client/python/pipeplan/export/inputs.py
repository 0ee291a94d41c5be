"""Example inputs from their description: `name:dtype[d0,d1,...]` specs
(--input) or shapes and one dtype (--input-shape, --input-dtype). Only shape
and dtype reach the graph, so the values are simple and valid as indices.
"""

import inspect
import re

import torch

DTYPES = {"float32": torch.float32, "float": torch.float32, "float64": torch.float64,
          "double": torch.float64, "float16": torch.float16, "half": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "long": torch.int64,
          "int32": torch.int32, "int": torch.int32, "int16": torch.int16,
          "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}

_INPUT_SPEC = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*):)?([A-Za-z0-9_]+)\[([0-9,\s]*)\]$")


def parse_input_spec(spec):
    """`name:dtype[d0,d1,...]` (name optional) -> (name or None, torch dtype, shape).
    Raises ValueError saying what is wrong."""
    m = _INPUT_SPEC.match(spec.strip())
    if not m:
        raise ValueError("--input %r: write it as name:dtype[d0,d1,...], e.g. "
                         "input_ids:int64[8,1024]" % spec)
    name, dtype, dims = m.groups()
    if dtype not in DTYPES:
        raise ValueError("--input %r: unknown dtype %r (use one of %s)"
                         % (spec, dtype, ", ".join(sorted(DTYPES))))
    shape = tuple(int(d) for d in dims.split(",") if d.strip())
    return name, DTYPES[dtype], shape


def example_tensor(shape, dtype):
    """An example input: normal floats, zero integers (valid indices), all-true
    booleans (masks that keep everything). Only shape and dtype reach the graph."""
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    return torch.zeros(shape, dtype=dtype)


def inputs_from_specs(module, specs):
    """Example inputs of `module` from --input specs, in the order of its forward's
    parameters: named specs go to the parameter of that name, unnamed ones fill the
    positions in order. Raises ValueError for an unknown or missing name."""
    parsed = [parse_input_spec(s) for s in specs]
    if all(name is None for name, _, _ in parsed):
        return tuple(example_tensor(shape, dt) for _, dt, shape in parsed)
    if any(name is None for name, _, _ in parsed):
        raise ValueError("--input: name all inputs or none (name:dtype[shape])")
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params]
    given = {}
    for name, dt, shape in parsed:
        if name not in names:
            raise ValueError("--input %s: %s.forward has no parameter %r (it takes %s)"
                             % (name, type(module).__name__, name, ", ".join(names)))
        if name in given:
            raise ValueError("--input %s given twice" % name)
        given[name] = example_tensor(shape, dt)
    last = max(names.index(n) for n in given)
    missing = [n for n in names[:last] if n not in given]
    if missing:
        raise ValueError("--input: %s.forward's parameter %r comes before %r and has no "
                         "--input" % (type(module).__name__, missing[0],
                                      names[last]))
    return tuple(given[n] for n in names[:last + 1])
