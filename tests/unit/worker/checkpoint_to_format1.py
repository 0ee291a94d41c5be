#!/usr/bin/env python3
"""Rewrites a format-2 checkpoint (state packs of tensor records,
docs/snapshots.md) as format 1 (torch.save'd shard dicts, the format before
issue 26), for the test that format-1 checkpoints still load. Reading the
packs here is also an independent reader of the format.

  checkpoint_to_format1.py SRC_DIR DST_DIR
"""
import json
import os
import struct
import sys

import torch

DTYPES = {6: torch.float32, 7: torch.float64, 4: torch.int64}


def string(buf, at):
    (n,) = struct.unpack_from("<I", buf, at)
    return buf[at + 4:at + 4 + n].decode(), at + 4 + n


def record(buf):
    magic, count = struct.unpack_from("<II", buf, 0)
    assert magic == 0x31545050, "not a tensor record"
    label, at = string(buf, 8)
    tensors = {}
    for _ in range(count):
        key, at = string(buf, at)
        dtype, size, ndim = struct.unpack_from("<iiI", buf, at)
        at += 12
        shape = struct.unpack_from("<%dq" % ndim, buf, at)
        at += 8 * ndim
        (offset,) = struct.unpack_from("<Q", buf, at)
        at += 8
        n = size
        for d in shape:
            n *= d
        t = torch.frombuffer(bytearray(buf[offset:offset + n]), dtype=DTYPES[dtype])
        tensors[key] = t.reshape(shape)
    return label, tensors


def pack(buf):
    assert buf[:8] == b"PPSTATE1", "not a state pack"
    (count,) = struct.unpack_from("<Q", buf, 8)
    at, out = 16, {}
    for _ in range(count):
        name, at = string(buf, at)
        offset, size = struct.unpack_from("<QQ", buf, at)
        at += 16
        out[name] = record(buf[offset:offset + size])
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    manifest = json.load(open(os.path.join(src, "MANIFEST.json")))
    for shard in manifest["shards"]:
        params = {}
        for name, (label, t) in pack(open(os.path.join(src, shard["file"]), "rb").read()).items():
            state = {k: v for k, v in t.items() if k != "param"}
            if "step" in state:
                state["step"] = int(state["step"])
            if len(state) == 1:
                # LibTorch 1.13 cannot unpickle Python's one-entry dicts
                # (SETITEM; docs/model-package.md); an extra non-tensor key
                # is ignored by the loader.
                state["pad"] = 0
            params[name] = {"param": t["param"], "optimizer": label, "state": state}
        shard["file"] = "shard_%d.pt" % shard["rank"]
        torch.save({"format": "pipeplan-checkpoint-shard/1", "parameters": params},
                   os.path.join(dst, shard["file"]))
    manifest["format"] = "pipeplan-checkpoint/1"
    json.dump(manifest, open(os.path.join(dst, "MANIFEST.json"), "w"))


if __name__ == "__main__":
    main()
