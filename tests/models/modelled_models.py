#!/usr/bin/env python3
"""The models whose memory the planner must predict (issue 24): each exported
(graph JSON + model package) at one microbatch's size, with a `tensors:` data
file, for tests/unit/worker/torch_modelled_test.cc.

  /usr/bin/python3 tests/models/modelled_models.py MODEL OUT_DIR MICROBATCH ROWS [PROFILE]

writes OUT_DIR/MODEL.json, OUT_DIR/MODEL.ptpkg/ and OUT_DIR/MODEL_data.pt.
Models (sized so activations weigh as much as parameters and Adam state, so an
error in either shows):
  wide      residual MLP, d 64, hidden 512, 4 blocks, mse
  gpt       tests/models/tiny_models.py's GPT at width 128, 4 layers, 4 heads,
            sequence 64, vocabulary 256 (attention, layer norms, tied LM head),
            next-token cross_entropy
  resnet18  torchvision's ResNet-18 (random weights, BatchNorm in training
            mode) on 3x64x64 images, 10 classes, cross_entropy
Random weights and data from fixed seeds; nothing is downloaded. PROFILE > 0 times
every node that many times (pipeplan_export.py --profile).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import pipeplan_export  # noqa: E402
import tiny_models  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc, self.act, self.out = nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)

    def forward(self, x):
        return x + self.out(self.act(self.fc(x)))


class Wide(nn.Module):
    def __init__(self, d=64, h=512, n=4):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, h) for _ in range(n)])

    def forward(self, x):
        return self.blocks(x)


def wide(mb, rows, g):
    model = Wide()
    data = {"inputs": torch.randn(rows, 64, generator=g),
            "targets": torch.randn(rows, 64, generator=g)}
    return model, torch.randn(mb, 64), "mse", data


GPT = dict(vocab=256, d=128, heads=4, layers=4, seq=64)


def gpt(mb, rows, g):
    model, example = tiny_models.gpt(batch=mb, **GPT)
    tokens = torch.randint(0, GPT["vocab"], (rows, GPT["seq"] + 1), generator=g)
    data = {"inputs": tokens[:, :-1].clone(), "targets": tokens[:, 1:].clone()}
    return model, example[0], "cross_entropy", data


def resnet18(mb, rows, g):
    import torchvision  # Debian's python3-torchvision (scripts/setup.sh)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    data = {"inputs": torch.randn(rows, 3, 64, 64, generator=g),
            "targets": torch.randint(0, 10, (rows,), generator=g)}
    return model, torch.randn(mb, 3, 64, 64), "cross_entropy", data


MODELS = {"wide": wide, "gpt": gpt, "resnet18": resnet18}


def main(argv):
    name, out, mb, rows = argv[0], argv[1], int(argv[2]), int(argv[3])
    profile = int(argv[4]) if len(argv) > 4 else 0
    torch.manual_seed(0)
    model, example, loss, data = MODELS[name](mb, rows, torch.Generator().manual_seed(1))
    graph = pipeplan_export.export(model, (example,), name=name,
                                   package=os.path.join(out, name + ".ptpkg"), loss=loss,
                                   profile=profile)
    pipeplan_export.write_graph(graph, os.path.join(out, name + ".json"))
    torch.save(data, os.path.join(out, name + "_data.pt"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
