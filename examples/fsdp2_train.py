"""A few steps of FSDP2 (``fully_shard``) training on the "neuron" backend.

    neuron-mpirun -n 8 python examples/fsdp2_train.py [--steps 4] [--compare gloo]

The model, data and fixed-point rule of examples/ddp_train.py (examples/_common.py),
sharded with ``fully_shard`` over a 1-D device mesh of all ranks: parameters are
all-gathered before each forward and backward, gradients reduce-scattered after. With
--compare gloo the same training runs again on a mesh over a gloo group of the
same ranks; the full parameters must come out bit-identical, and the same on every
rank. It exits 1 on any difference.
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

import neuron_mpi.torch  # noqa: F401  registers the "neuron" backend
from _common import LR, checked_run, main as _main, make_model, step_once


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


def run(steps: int = 4, compare: str | None = None) -> bool:
    """Train (and compare) on the initialized default group; True when every check
    held on every rank. Rank 0 prints one line."""
    return checked_run(
        "fsdp2", lambda n: train(n, init_device_mesh("cpu", (dist.get_world_size(),))),
        lambda n, gloo: train(n, DeviceMesh.from_group(gloo, "cpu")), steps, compare)


def main(argv=None) -> int:
    return _main(__doc__, run, argv)


if __name__ == "__main__":
    sys.exit(main())
