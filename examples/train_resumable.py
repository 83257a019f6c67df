"""A tiny PyTorch training job that survives preemption: it resumes from its step counter.

Run by the service (examples/train_resumable.yaml) or by hand:
``python examples/train_resumable.py --steps 300 --step-s 0.01``. Each launch appends one line to
``$GPUSCHED_CHECKPOINT_DIR/launches.txt`` (restart count, first step, last step, why it ended).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from gpusched.real import job


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-s", type=float, default=0.01, help="extra seconds per step (stand-in work)")
    ap.add_argument("--save-every", type=int, default=20)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ck = job.load_checkpoint()
    step = 0
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = int(ck["step"])
    first = step
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    y = x.sum(dim=1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    while step < a.steps and not job.should_stop():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % a.save_every == 0:
            job.save_checkpoint({"step": step, "model": model.state_dict(), "opt": opt.state_dict()})
        time.sleep(a.step_s)
    job.save_checkpoint({"step": step, "model": model.state_dict(), "opt": opt.state_dict()})
    why = "done" if step >= a.steps else "stopped"
    with open(job.checkpoint_dir() / "launches.txt", "a") as f:
        f.write(f"restart={job.restart_count()} first={first} last={step} {why}\n")
    print(f"restart {job.restart_count()}: steps {first}..{step} ({why}), loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
