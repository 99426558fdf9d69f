"""A few steps of DistributedDataParallel training on the "neuron" backend.

    neuron-mpirun -n 8 python examples/ddp_train.py [--steps 4] [--compare gloo]

Every rank trains the same small MLP (float64) on its own integer-valued batch; DDP
averages the gradients with all-reduce. With --compare gloo the same training runs
again over a gloo group of the same ranks and the parameters must come out
bit-identical: the data are integers, the weights fixed-point (multiples of 1/4096
after every step) and the learning rate a power of two, so every sum is exact
whatever order a backend adds in. The script also checks that
every rank ends with the same parameters. It exits 1 on any difference.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import neuron_mpi.torch  # noqa: F401  registers the "neuron" backend


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


LR = 2.0 ** -9


def step_once(model, opt, rank: int, step: int) -> float:
    x, y = batch(rank, step)
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).sum() / 16
    loss.backward()
    opt.step()
    fixed_point(model)
    return float(loss)


def train(steps: int, group=None):
    """(the parameters as one vector, the losses of this rank's batches)"""
    model = DDP(make_model(), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = [step_once(model, opt, dist.get_rank(), s) for s in range(steps)]
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), losses


def same_on_every_rank(vec: torch.Tensor) -> bool:
    rows = [torch.empty_like(vec) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, vec)
    return all(torch.equal(r, rows[0]) for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--compare", choices=["gloo"], default=None,
                    help="train again over a gloo group and compare the parameters")
    args = ap.parse_args(argv)
    dist.init_process_group("neuron")
    ok = run(args.steps, args.compare)
    dist.destroy_process_group()
    return 0 if ok else 1


def run(steps: int = 4, compare: str | None = None) -> bool:
    """Train (and compare) on the initialized default group; True when every check
    held on every rank. Rank 0 prints one line."""
    rank, size = dist.get_rank(), dist.get_world_size()
    ok = True
    params, losses = train(steps)
    if not same_on_every_rank(params):
        ok = False
        print(f"[rank {rank}] ddp: parameters differ between ranks", file=sys.stderr)
    if compare:
        gloo = dist.new_group(backend="gloo")
        ref, _ = train(steps, gloo)
        if not torch.equal(params, ref):
            ok = False
            bad = int((params != ref).sum())
            print(f"[rank {rank}] ddp: {bad} of {params.numel()} parameters differ from "
                  f"gloo's (largest difference {float((params - ref).abs().max()):g})",
                  file=sys.stderr)
    flags = torch.tensor([int(ok)], dtype=torch.int32)
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    if rank == 0:
        what = "identical on every rank" + (", identical to gloo" if compare else "")
        print(f"ddp: {steps} steps on {size} ranks, {params.numel()} parameters, rank 0 "
              f"loss {losses[0]:g} -> {losses[-1]:g}: " + (what if flags.item() else "MISMATCH"))
    return bool(flags.item())


if __name__ == "__main__":
    sys.exit(main())
