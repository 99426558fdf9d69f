"""A few steps of FSDP2 (``fully_shard``) training on the "neuron" backend.

    neuron-mpirun -n 8 python examples/fsdp2_train.py [--steps 4] [--compare gloo]

The model, data and fixed-point rule of examples/ddp_train.py, sharded with
``fully_shard`` over a 1-D device mesh of all ranks: parameters are all-gathered
before each forward and backward, gradients reduce-scattered after. With
--compare gloo the same training runs again on a mesh over a gloo group of the
same ranks; the full parameters must come out bit-identical, and the same on every
rank. It exits 1 on any difference.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

import neuron_mpi.torch  # noqa: F401  registers the "neuron" backend
from ddp_train import LR, make_model, same_on_every_rank, step_once


def train(steps: int, mesh):
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = [step_once(model, opt, dist.get_rank(), s) for s in range(steps)]
    full = [p.full_tensor().reshape(-1) for p in model.parameters()]  # an all-gather
    return torch.cat(full).detach(), losses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--compare", choices=["gloo"], default=None,
                    help="train again on a mesh over a gloo group and compare")
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
    params, losses = train(steps, init_device_mesh("cpu", (size,)))
    if not same_on_every_rank(params):
        ok = False
        print(f"[rank {rank}] fsdp2: parameters differ between ranks", file=sys.stderr)
    if compare:
        gloo = dist.new_group(backend="gloo")
        ref, _ = train(steps, DeviceMesh.from_group(gloo, "cpu"))
        if not torch.equal(params, ref):
            ok = False
            bad = int((params != ref).sum())
            print(f"[rank {rank}] fsdp2: {bad} of {params.numel()} parameters differ from "
                  f"gloo's (largest difference {float((params - ref).abs().max()):g})",
                  file=sys.stderr)
    flags = torch.tensor([int(ok)], dtype=torch.int32)
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    if rank == 0:
        what = "identical on every rank" + (", identical to gloo" if compare else "")
        print(f"fsdp2: {steps} steps on {size} ranks, {params.numel()} parameters, "
              f"rank 0 loss {losses[0]:g} -> {losses[-1]:g}: "
              + (what if flags.item() else "MISMATCH"))
    return bool(flags.item())


if __name__ == "__main__":
    sys.exit(main())
