"""A few steps of DistributedDataParallel training on the "neuron" backend.

    neuron-mpirun -n 8 python examples/ddp_train.py [--steps 4] [--compare gloo]

Every rank trains the same small MLP (float64) on its own integer-valued batch; DDP
averages the gradients with all-reduce. With --compare gloo the same training runs
again over a gloo group of the same ranks and the parameters must come out
bit-identical (examples/_common.py says why they can). The script also checks that
every rank ends with the same parameters. It exits 1 on any difference.
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import neuron_mpi.torch  # noqa: F401  registers the "neuron" backend
from _common import LR, checked_run, main as _main, make_model, step_once


def train(steps: int, group=None):
    """(the parameters as one vector, the losses of this rank's batches)"""
    model = DDP(make_model(), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = [step_once(model, opt, dist.get_rank(), s) for s in range(steps)]
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), losses


def run(steps: int = 4, compare: str | None = None) -> bool:
    """Train (and compare) on the initialized default group; True when every check
    held on every rank. Rank 0 prints one line."""
    return checked_run("ddp", train, train, steps, compare)


def main(argv=None) -> int:
    return _main(__doc__, run, argv)


if __name__ == "__main__":
    sys.exit(main())
