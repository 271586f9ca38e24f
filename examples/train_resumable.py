"""A small training loop that survives kill -9, SIGTERM and Slurm's SIGUSR1 without losing a run.

Run the identical command again after any interruption and it continues where the last
checkpoint left it; the final weights are bitwise those of an uninterrupted run:

    python examples/train_resumable.py --ckpt-dir ckpt --steps 200 --save-every 20

Everything the next step depends on is in the checkpoint: weights, SGD momentum buffers, the
StepLR position, the sampler's epoch and offset, and the python and torch RNGs (dropout and
the python-side augmentation draw from them).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch
from torch import nn

from gpuroom.remote.checkpoint import Checkpointer, ResumableSampler

DATASET_SIZE = 512
FEATURES = 16
BATCH = 32
DATA_SEED = 1234  # the data set is the same on every launch; training randomness is in the RNGs


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(DATASET_SIZE, FEATURES, generator=gen)
    w = torch.randn(FEATURES, 1, generator=gen)
    y = torch.sin(x @ w) + 0.1 * torch.randn(DATASET_SIZE, 1, generator=gen)
    return x, y


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 64), nn.ReLU(),
        nn.Linear(64, 1),
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt-dir", default=os.environ.get("GPUROOM_CKPT_DIR", "./ckpt"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--async-save", action="store_true",
                        help="periodic saves stage to CPU and write in a background thread")
    parser.add_argument("--sleep-per-step", type=float, default=0.0,
                        help="seconds to sleep in each step (lets tests interrupt mid-run)")
    parser.add_argument("--keep", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # reductions split across threads can differ in the last bit
    # Seeds for a fresh start; a resume overwrites every RNG with the checkpoint's.
    torch.manual_seed(0)
    random.seed(0)

    x, y = make_data()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    sampler = ResumableSampler(DATASET_SIZE, seed=7)

    ckpt = Checkpointer(args.ckpt_dir, keep=args.keep, every_steps=args.save_every)
    ckpt.install_signal_handlers()  # SIGTERM/SIGUSR1 set a flag; we save at the step boundary
    resume = ckpt.load_latest(model=model, optimizer=optimizer, scheduler=scheduler,
                              sampler=sampler)
    step = resume.step if resume else 0
    if resume:
        print(f"resumed from step {step} ({resume.path})", flush=True)
        for path, reason in resume.skipped:
            print(f"skipped {path}: {reason}", flush=True)

    def save(at: int, block: bool) -> None:
        ckpt.save(at, model=model, optimizer=optimizer, scheduler=scheduler, sampler=sampler,
                  epoch=sampler.epoch, block=block, extra={"total_steps": args.steps})

    loss_fn = nn.MSELoss()
    model.train()
    while step < args.steps and not ckpt.should_stop:
        idx = torch.tensor(sampler.take(BATCH))
        xb, yb = x[idx], y[idx]
        if random.random() < 0.25:  # python-RNG augmentation: resume must restore this RNG too
            xb = xb * 1.05
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        print(f"step {step} loss {loss.item():.6f} lr {scheduler.get_last_lr()[0]:.5f}",
              flush=True)
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)
        if ckpt.should_stop:
            break  # saved below, synchronously, at this boundary
        if ckpt.should_save(step) and step < args.steps:
            save(step, block=not args.async_save)

    save(step, block=True)
    ckpt.wait()
    if ckpt.should_stop:
        print(f"stopped by {ckpt.stop_signal} at step {step}; saved step {step}", flush=True)
    else:
        print(f"done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
