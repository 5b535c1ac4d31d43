"""A DDP job on 2 gloo ranks whose resume from a torch.distributed.checkpoint silently drops the optimizer state."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import git

TRAIN = '''\
import argparse
import gc

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--resume-at", type=int, default=None, help="save at this step, rebuild, load, go on")
parser.add_argument("--ckpt", default="ckpt")
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(1)
x = torch.randn(256, 32, generator=g)
y = (x[:, :4].sum(1, keepdim=True) > 0).float()
x, y = x[rank::world], y[rank::world]


def build():
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def save(model, optim, step):
    model_sd, optim_sd = get_state_dict(model, optim)
    dcp.save({"model": model_sd, "optim": optim_sd, "step": step}, checkpoint_id=args.ckpt)


def resume(model, optim):
    model_sd, optim_sd = get_state_dict(model, optim)
<<LOAD>>
    return state["step"]


model, optim = build()
step = 0
while step < args.steps:
    step += 1
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
    optim.zero_grad()
    loss.backward()
    optim.step()
    total = loss.detach().clone()
    dist.all_reduce(total)
    if rank == 0:
        print(f"step {step} loss {total.item() / world:.6f}", flush=True)
    if step == args.resume_at:
        save(model, optim, step)
        model, optim = build()  # as a restarted job would
        step = resume(model, optim)
        if rank == 0:
            print(f"resumed from step {step}", flush=True)
# A DDP module alive at exit, after destroy_process_group, aborts the process now and then (torch 2.13):
# drop both, and the one built before the resume.
del model, optim
gc.collect()
dist.destroy_process_group()
'''

LOAD_ALL = '''\
    state = {"model": model_sd, "optim": optim_sd, "step": 0}
    dcp.load(state, checkpoint_id=args.ckpt)
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])'''
LOAD_MODEL_ONLY = '''\
    state = {"model": model_sd, "step": 0}  # the optimizer is rebuilt from its config
    dcp.load(state, checkpoint_id=args.ckpt)
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=optim_sd)'''

RUN = '''\
#!/bin/sh
# Train 8 steps on 2 gloo ranks, checkpointing at step 4 and resuming from it.
rm -rf ckpt
OMP_NUM_THREADS=1 exec torchrun --standalone --nproc_per_node 2 train.py --steps 8 --resume-at {k}
'''

RESUME_AT = 4


def _commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def make_dcp_repo(where: Path, torchrun: str, reference: bool = True) -> tuple[Path, list[str]]:
    """Three commits: the job (good), an unrelated flag (good), the model-only resume (bad: the loss leaves ref.log
    from step RESUME_AT + 2). With `reference`, ref.log is the uninterrupted run's output (one torchrun, ~10 s),
    written with `torchrun` (an interpreter's torchrun, with torch) and committed."""
    root = where / "dcp"
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("ckpt/\n")
    (root / "train.py").write_text(TRAIN.replace("<<LOAD>>", LOAD_ALL))
    (root / "run.sh").write_text(RUN.format(k=RESUME_AT))
    if reference:
        done = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "train.py", "--steps", "8"],
                              cwd=root, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                              timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        (root / "ref.log").write_text(done.stdout)
    shas = [_commit(root, "DDP job with a DCP checkpoint and resume")]
    (root / "train.py").write_text(TRAIN.replace("<<LOAD>>", LOAD_ALL).replace(
        'parser.add_argument("--ckpt", default="ckpt")',
        'parser.add_argument("--ckpt", default="ckpt", help="checkpoint folder")'))
    shas.append(_commit(root, "train: document --ckpt"))
    (root / "train.py").write_text(TRAIN.replace("<<LOAD>>", LOAD_MODEL_ONLY).replace(
        'parser.add_argument("--ckpt", default="ckpt")',
        'parser.add_argument("--ckpt", default="ckpt", help="checkpoint folder")'))
    shas.append(_commit(root, "resume: load the model, rebuild the optimizer from its config"))
    return root, shas
