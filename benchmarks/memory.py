"""Memory per rank while running large all-reduces.

    neuron-mpirun -n 64 python benchmarks/memory.py [--bytes 16MB] [--iters 5]

Every rank runs ``--iters`` all_reduces of ``--bytes`` (checked block by block
against the closed form of the sum, so no third buffer is held), reading its PSS
(proportional set size: shared pages divided among the processes that map them,
from /proc/self/smaps_rollup) after each; the largest is reported, with the PSS of
the same process before neuron_mpi started (the interpreter, mpi4py, numpy and the
input and output buffers: the baseline of this run) and the difference: what
neuron_mpi itself holds, its data plane (built ahead of time, or numba with its
compiler: NEURON_MPI_AOT=0) included. neuron-mpirun warms the kernels before the
launch, so no rank compiles.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI

from neuron_mpi.bench.sizes import size_arg


def pss_mib() -> float:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def exact(out: np.ndarray, n: int, block: int = 1 << 16) -> bool:
    """out[i] == (i % 5) * n + n (n - 1) / 2 for every i, a block at a time."""
    for lo in range(0, out.size, block):
        i = np.arange(lo, min(lo + block, out.size))
        if not np.array_equal(out[lo:lo + i.size], (i % 5).astype(np.float32) * n
                              + n * (n - 1) / 2):
            return False
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=size_arg, default=16 << 20)
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args(argv)
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    x = (np.arange(a.bytes // 4) % 5).astype(np.float32) + me
    out = np.empty_like(x)
    out.fill(0)  # touched, so its pages count in the baseline
    world.Barrier()
    base = pss_mib()  # interpreter, mpi4py, numpy and the two buffers
    import neuron_mpi as nm
    comm = nm.init()
    peak, wrong = 0.0, 0
    for _ in range(a.iters):
        comm.all_reduce(x, out=out)
        wrong += int(not exact(out, n))
        peak = max(peak, pss_mib())
    peaks = world.gather(peak, root=0)
    bases = world.gather(base, root=0)
    own = world.gather(peak - base, root=0)
    wrong = world.allreduce(wrong)
    if comm.rank == 0:
        buffers = 2 * x.nbytes / 2**20
        print(f"# PSS per rank, {n} ranks, all_reduce of {x.nbytes} bytes x {a.iters} "
              f"(input and output: {buffers:.0f} MiB per rank), "
              f"wrong {wrong}")
        print(f"  before neuron_mpi (buffers included): median {np.median(bases):6.1f} MiB")
        print(f"  running            : median {np.median(peaks):6.1f} MiB, "
              f"max {max(peaks):6.1f} MiB")
        print(f"  running - before   : median {np.median(own):6.1f} MiB, "
              f"max {max(own):6.1f} MiB (what neuron_mpi itself holds: engine, plans, "
              "scratch, its share of the shared segment, its data plane)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
