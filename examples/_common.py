"""What examples/ddp_train.py and fsdp2_train.py share: the model, the data, one
training step, and the run that checks the parameters on every rank and against gloo.

Every rank trains the same small MLP (float64) on its own integer-valued batch. The
data are integers, the weights fixed-point (multiples of 1/4096 after every step) and
the learning rate a power of two, so every sum is exact whatever order a backend adds
in: a run over "neuron" and one over gloo must give bit-identical parameters.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
from torch import nn

LR = 2.0 ** -9


def make_model() -> nn.Module:
    g = torch.Generator().manual_seed(0)  # the same start on every rank
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-2, 3, p.shape, generator=g, dtype=torch.float64))
    return model


def fixed_point(model: nn.Module) -> None:
    """Round the weights to multiples of 1/4096 after each step, so they stay short
    dyadic numbers and every gradient sum of the next step is exact in float64."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.round(p * 4096) / 4096)


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)  # different data per rank
    x = torch.randint(-3, 4, (16, 8), generator=g).double()
    y = torch.randint(-3, 4, (16, 4), generator=g).double()
    return x, y


def step_once(model, opt, rank: int, step: int) -> float:
    x, y = batch(rank, step)
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).sum() / 16
    loss.backward()
    opt.step()
    fixed_point(model)
    return loss.item()


def same_on_every_rank(vec: torch.Tensor) -> bool:
    rows = [torch.empty_like(vec) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, vec)
    return all(torch.equal(r, rows[0]) for r in rows)


def main(doc: str, run, argv=None) -> int:
    """The examples' command line: --steps, --compare gloo; exit status 1 on any
    difference."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--compare", choices=["gloo"], default=None,
                    help="train again over a gloo group and compare the parameters")
    args = ap.parse_args(argv)
    dist.init_process_group("neuron")
    ok = run(args.steps, args.compare)
    dist.destroy_process_group()
    return 0 if ok else 1


def checked_run(name: str, train, train_over_gloo, steps: int, compare: str | None) -> bool:
    """Train (and compare) on the initialized default group; True when every check
    held on every rank. Rank 0 prints one line.

    ``train(steps)`` and ``train_over_gloo(steps, gloo_group)`` return (the parameters
    as one vector, the losses of this rank's batches)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    ok = True
    params, losses = train(steps)
    if not same_on_every_rank(params):
        ok = False
        print(f"[rank {rank}] {name}: parameters differ between ranks", file=sys.stderr)
    if compare:
        ref, _ = train_over_gloo(steps, dist.new_group(backend="gloo"))
        if not torch.equal(params, ref):
            ok = False
            bad = int((params != ref).sum())
            print(f"[rank {rank}] {name}: {bad} of {params.numel()} parameters differ from "
                  f"gloo's (largest difference {float((params - ref).abs().max()):g})",
                  file=sys.stderr)
    flags = torch.tensor([int(ok)], dtype=torch.int32)
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    if rank == 0:
        what = "identical on every rank" + (", identical to gloo" if compare else "")
        print(f"{name}: {steps} steps on {size} ranks, {params.numel()} parameters, rank 0 "
              f"loss {losses[0]:g} -> {losses[-1]:g}: " + (what if flags.item() else "MISMATCH"))
    return bool(flags.item())
