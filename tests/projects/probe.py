"""A linear-probe project whose accuracy regresses silently: a renamed backbone layer misses its checkpoint keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import git

DATA = '''\
import torch


def true_weights():
    """The backbone the checkpoint holds (its 'pretraining' result)."""
    g = torch.Generator().manual_seed(1234)
    return torch.randn(8, 16, generator=g), torch.randn(8, generator=g) * 0.1


def splits(n_train=1500, n_val=500):
    """A task the pretrained features separate linearly (4% label noise); random features do not."""
    w, b = true_weights()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n_train + n_val, 16, generator=g)
    score = torch.relu(x @ w.T + b) @ torch.randn(8, generator=torch.Generator().manual_seed(99))
    y = (score > score.median()).long()
    y = torch.where(torch.rand(len(y), generator=g) < 0.04, 1 - y, y)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])
'''

BACKBONE = '''\
import torch.nn as nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.{layer} = nn.Linear(16, 8)

    def forward(self, x):
        return self.{layer}(x).relu()
'''

MAKE_CKPT = '''\
import torch
from data import true_weights

w, b = true_weights()
torch.save({"encoder.weight": w, "encoder.bias": b}, "backbone.pt")
'''

TRAIN = '''\
import torch
from backbone import Backbone
from data import splits

torch.manual_seed(0)
backbone = Backbone()
backbone.load_state_dict(torch.load("backbone.pt"), strict=False)  # the head's keys are not in it
backbone.requires_grad_(False)
(x_train, y_train), (x_val, y_val) = splits()
probe = torch.nn.Linear(8, 2)
opt = torch.optim.Adam(probe.parameters(), lr=0.05)
STEPS_PER_EPOCH = 10
for epoch in range(1, {epochs} + 1):
    for _ in range(STEPS_PER_EPOCH):
        loss = torch.nn.functional.cross_entropy(probe(backbone(x_train)), y_train)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val_acc = (probe(backbone(x_val)).argmax(1) == y_val).float().mean().item()
    print(f"epoch {{epoch}} step {{epoch * STEPS_PER_EPOCH}}: loss={{loss.item():.4f}} val_acc={{val_acc:.4f}}",
          flush=True)
print("probe trained")
'''


def _commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def make_probe_repo(where: Path, python: str = sys.executable) -> tuple[Path, list[str]]:
    """Four commits: the probe (good), a longer schedule (good), the layer rename (bad: val_acc ~0.68), a README
    (bad). `python` (with torch) writes the checkpoint."""
    root = where / "probe"
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "data.py").write_text(DATA)
    (root / "backbone.py").write_text(BACKBONE.format(layer="encoder"))
    (root / "make_ckpt.py").write_text(MAKE_CKPT)
    (root / "train_probe.py").write_text(TRAIN.format(epochs=6))
    subprocess.run([python, "make_ckpt.py"], cwd=root, check=True, capture_output=True)
    shas = [_commit(root, "linear probe over the pretrained backbone")]
    (root / "train_probe.py").write_text(TRAIN.format(epochs=8))
    shas.append(_commit(root, "probe: train for 8 epochs"))
    (root / "backbone.py").write_text(BACKBONE.format(layer="proj"))
    shas.append(_commit(root, "backbone: rename encoder to proj"))
    (root / "README.md").write_text("# probe\n\n`python train_probe.py` prints val_acc per epoch.\n")
    shas.append(_commit(root, "README"))
    return root, shas
