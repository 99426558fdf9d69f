"""Memory per rank while running large all-reduces.

    neuron-mpirun -n 64 python benchmarks/memory.py [--bytes 16MB] [--iters 5]

Every rank runs ``--iters`` all_reduces of ``--bytes`` (checked), reading its PSS
(proportional set size: shared pages divided among the processes that map them,
from /proc/self/smaps_rollup) after each; the largest is reported, with the PSS of
the same process before neuron_mpi started (mpi4py, numpy, the numba kernels and
the input, output and expected-result buffers: the baseline of this run) and the
difference: what neuron_mpi itself holds.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from mpi4py import MPI

import neuron_mpi.kernels
from neuron_mpi.bench.sizes import size_arg


def pss_mib() -> float:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=size_arg, default=16 << 20)
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args(argv)
    neuron_mpi.kernels.warm()
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    x = (np.arange(a.bytes // 4) % 5).astype(np.float32) + me
    out = np.empty_like(x)
    out.fill(0)  # touched, so its pages count in the baseline
    want = (np.arange(x.size) % 5).astype(np.float32) * n + n * (n - 1) / 2
    world.Barrier()
    base = pss_mib()  # interpreter, mpi4py, numpy, the numba kernels and the buffers
    import neuron_mpi as nm
    comm = nm.init()
    peak, wrong = 0.0, 0
    for _ in range(a.iters):
        comm.all_reduce(x, out=out)
        wrong += int(not np.array_equal(out, want))
        peak = max(peak, pss_mib())
    peaks = world.gather(peak, root=0)
    bases = world.gather(base, root=0)
    own = world.gather(peak - base, root=0)
    wrong = world.allreduce(wrong)
    if comm.rank == 0:
        buffers = 3 * x.nbytes / 2**20
        print(f"# PSS per rank, {n} ranks, all_reduce of {x.nbytes} bytes x {a.iters} "
              f"(input, output and expected result: {buffers:.0f} MiB per rank), "
              f"wrong {wrong}")
        print(f"  before neuron_mpi (buffers included): median {np.median(bases):6.1f} MiB")
        print(f"  running            : median {np.median(peaks):6.1f} MiB, "
              f"max {max(peaks):6.1f} MiB")
        print(f"  running - before   : median {np.median(own):6.1f} MiB, "
              f"max {max(own):6.1f} MiB (what neuron_mpi itself holds: engine, plans, "
              "scratch, its share of the shared segment)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
