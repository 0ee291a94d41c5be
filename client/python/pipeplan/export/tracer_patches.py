"""Patches that let torch.fx 1.13 trace the models people write, applied only
inside `with patched_proxy_iter():` (tracing, and torch.fx rebuilding a saved
GraphModule): tuple unpacking of a traced value on Python 3.11, torch factory
functions called with traced sizes, and real tensors indexed by traced values.

Kept apart from the tracer because loading a model package needs these patches
(package.ReloadTracer) and nothing else of the exporter.
"""

import contextlib
import dis
import inspect
import operator

import torch
import torch.fx


def proxy_iter(self):
    """Proxy.__iter__ that finds the calling instruction by byte offset.

    torch 1.13 indexes dis.get_instructions() with f_lasti // 2, which assumes one
    two-byte code unit per instruction; Python 3.11's inline caches break that, so
    `a, b = proxy` raises IndexError or TraceError. f_lasti is the byte offset of the
    executing instruction on every supported Python, so match on Instruction.offset.
    """
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    try:
        if caller is not None:
            lasti = caller.f_lasti
            for inst in dis.get_instructions(caller.f_code):
                if inst.offset == lasti:
                    if inst.opname == "UNPACK_SEQUENCE":
                        return (self[i] for i in range(inst.argval))
                    break
    finally:
        del frame, caller
    return self.tracer.iter(self)


def _find_proxy(value):
    """The first fx Proxy inside value (nested tuples, lists, dicts, slices), or None."""
    if isinstance(value, torch.fx.Proxy):
        return value
    if isinstance(value, slice):
        value = (value.start, value.stop, value.step)
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (tuple, list)):
        for v in value:
            found = _find_proxy(v)
            if found is not None:
                return found
    return None


# torch factory functions that models call with traced sizes (`torch.arange(T)`,
# `torch.ones(T, T)`); torch 1.13 rejects a Proxy there, so during tracing a call
# with a Proxy argument is recorded as a call_function node of the original function.
FACTORIES = ("arange", "zeros", "ones", "full", "empty", "rand", "randn", "randint",
              "eye", "linspace", "tril_indices", "triu_indices")


def _recording(fn):
    def wrapper(*args, **kwargs):
        proxy = _find_proxy((args, kwargs))
        if proxy is None:
            return fn(*args, **kwargs)
        return proxy.tracer.create_proxy("call_function", fn, args, kwargs)
    wrapper.__name__ = fn.__name__
    wrapper.__wrapped__ = fn
    return wrapper


def _recording_getitem(orig):
    def getitem(self, index):
        proxy = _find_proxy(index)
        if proxy is None or isinstance(self, torch.fx.Proxy):
            return orig(self, index)
        # a real tensor (a buffer: `self.pos[:T]`) indexed by a traced value
        return proxy.tracer.create_proxy("call_function", operator.getitem, (self, index), {})
    return getitem


@contextlib.contextmanager


def patched_proxy_iter():
    """Within the block, tuple-unpacking an fx Proxy (`a, _ = attn(x, x, x)`,
    `B, T, C = x.shape`) yields one getitem per target on any Python version, torch
    factory functions accept traced sizes (`torch.arange(T, device=x.device)`) and a
    tensor can be indexed by traced values (`self.pos[:T]`)."""
    proxy_cls = torch.fx.proxy.Proxy
    saved_iter = proxy_cls.__dict__.get("__iter__")
    saved_factories = {name: getattr(torch, name) for name in FACTORIES
                       if hasattr(torch, name)}
    had_getitem = "__getitem__" in torch.Tensor.__dict__
    saved_getitem = torch.Tensor.__getitem__
    proxy_cls.__iter__ = proxy_iter
    for name, fn in saved_factories.items():
        setattr(torch, name, _recording(fn))
    torch.Tensor.__getitem__ = _recording_getitem(saved_getitem)
    try:
        yield
    finally:
        if had_getitem:
            torch.Tensor.__getitem__ = saved_getitem
        else:
            del torch.Tensor.__getitem__
        for name, fn in saved_factories.items():
            setattr(torch, name, fn)
        if saved_iter is None:
            del proxy_cls.__iter__
        else:
            proxy_cls.__iter__ = saved_iter
