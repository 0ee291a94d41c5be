"""Runs compiled stages one after another in one process the way the torch executor
does (docs/model-package.md): forward through the chain, a cut at every boundary
(detach().requires_grad_()), backward stage by stage with the received output
gradients, gradients of a parameter summed over the stages that hold it."""

import functools
import json
import os

import torch

import pipeplan_loss


def load_stages(stages_dir, params=None):
    """(stages.json, [ScriptModule]) with `params` ({canonical: tensor}) copied in."""
    with open(os.path.join(stages_dir, "stages.json")) as f:
        manifest = json.load(f)
    modules = [torch.jit.load(os.path.join(stages_dir, s["file"]))
               for s in manifest["stages"]]
    if params is not None:
        with torch.no_grad():
            for entry, module in zip(manifest["stages"], modules):
                for p in entry["parameters"]:
                    _param(module, p["path"]).copy_(params[p["name"]])
    return manifest, modules


def _param(module, path):
    return functools.reduce(getattr, path.split("."), module)


def _forward(manifest, modules, inputs):
    """Per stage: (its cut inputs, its outputs)."""
    record, acts = [], list(inputs)
    for entry, module in zip(manifest["stages"], modules):
        assert len(acts) == len(entry["inputs"])
        ins = [a.detach().requires_grad_(spec["requires_grad"])
               for a, spec in zip(acts, entry["inputs"])]
        for x, spec in zip(ins, entry["inputs"]):
            assert list(x.shape) == spec["shape"], spec["name"]
        outs = module(*ins)
        assert len(outs) == len(entry["outputs"])
        record.append((ins, outs))
        acts = list(outs)
    return record


def _backward(manifest, record, loss):
    """Backward from the loss through every stage; returns the gradients of stage
    0's inputs (None where not requires_grad)."""
    grads = None
    for s in reversed(range(len(record))):
        ins, outs = record[s]
        if grads is None:
            loss.backward()
        else:
            pairs = [(o, g) for o, g in zip(outs, grads)
                     if g is not None and o.requires_grad]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        specs = manifest["stages"][s]["inputs"]
        grads = [(x.grad if x.grad is not None else torch.zeros_like(x))
                 if spec["requires_grad"] else None for x, spec in zip(ins, specs)]
    return grads


def run_step(manifest, modules, loss_name, batches):
    """Forward and backward of every microbatch in `batches` ([(inputs, targets)]);
    returns (the batch's mean loss, {canonical name: summed gradient})."""
    for module in modules:
        for p in module.parameters():
            p.grad = None
    total = 0.0
    for inputs, targets in batches:
        record = _forward(manifest, modules, inputs)
        loss = pipeplan_loss.compute(loss_name, record[-1][1][0], targets) / len(batches)
        _backward(manifest, record, loss)
        total += loss.item()
    grads = {}
    for entry, module in zip(manifest["stages"], modules):
        seen = set()
        for p in entry["parameters"]:
            tensor = _param(module, p["path"])
            if id(tensor) in seen or tensor.grad is None:
                continue  # one tensor under several paths counts once
            seen.add(id(tensor))
            grads[p["name"]] = grads.get(p["name"], 0) + tensor.grad
    return total, grads
