"""A halo exchange through the mpi4py facade's Cartcomm (neuron_mpi.mpi), against
Open MPI's own Cartcomm in the same launch.

    neuron-mpirun -n 8 python benchmarks/facade_halo.py [--bytes 8KB 256KB] [--iters 200]

The ranks form a periodic 2-D grid (``Compute_dims(n, 2)``). Per size (bytes sent to
each of the four neighbours), each library runs ``--iters`` calls of

* ``alltoall``: ``Neighbor_alltoall``, a different block to each neighbour (the
  halo exchange of a stencil code);
* ``allgather``: ``Neighbor_allgather``, one block to every neighbour;

between two barriers, each call with the same send and receive arrays, as a time
step loop makes them. Prints ms per call (the slowest rank's), CPU ms per call and
rank, the facade's ratio to Open MPI's, and whether every block came from the
neighbour it should (checked on the last call).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

from neuron_mpi import mpi as facade
from neuron_mpi.bench.sizes import parse_size

OPS = ("alltoall", "allgather")


def expected(cart, op, count, me) -> np.ndarray:
    """What the four in-neighbours send here on a call (blocks in MPI's order: per
    dimension the one behind, then the one ahead)."""
    want = []
    for d in range(2):
        behind, ahead = cart.Shift(d, 1)
        # the neighbour behind sent this rank its "ahead" block (2d + 1), the one
        # ahead its "behind" block (2d): block k of rank r holds r * 8 + k
        for src, k in ((behind, 2 * d + 1), (ahead, 2 * d)):
            want.append(np.full(count, src * 8 + (k if op == "alltoall" else 0), np.float64))
    return np.concatenate(want)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", nargs="+", default=["8KB", "256KB"])
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    dims = MPI.Compute_dims(n, 2)
    carts = {"mpi": world.Create_cart(dims, periods=[True, True]),
             "facade": facade.COMM_WORLD.Create_cart(dims, periods=[True, True])}
    if me == 0:
        print(f"# facade halo exchange, {n} ranks on a periodic {dims[0]} x {dims[1]} grid, "
              f"{args.iters} calls per size and operation")
        print(f"# {'bytes':>10} {'op':>10} {'library':>8} {'ms/call':>9} {'cpu ms':>8} "
              f"{'ratio':>7} exact")
    for size in args.bytes:
        count = max(1, parse_size(size) // 8)
        for op in OPS:
            send = (np.repeat(np.arange(4, dtype=np.float64), count) + me * 8
                    if op == "alltoall" else np.full(count, me * 8.0))
            recv = np.zeros(4 * count)
            want = expected(carts["mpi"], op, count, me)
            base = None
            for lib in ("mpi", "facade"):
                cart = carts[lib]
                call = cart.Neighbor_alltoall if op == "alltoall" else cart.Neighbor_allgather
                for _ in range(3):  # warm
                    call(send, recv)
                recv[:] = -1
                world.Barrier()
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(args.iters):
                    call(send, recv)
                wall, used = time.perf_counter() - t0, time.process_time() - c0
                world.Barrier()
                ok = world.allreduce(bool(np.array_equal(recv, want)), op=MPI.LAND)
                wall = world.allreduce(wall, op=MPI.MAX) / args.iters * 1e3
                used = world.allreduce(used, op=MPI.SUM) / n / args.iters * 1e3
                base = wall if lib == "mpi" else base
                if me == 0:
                    print(f"  {count * 8:>10} {op:>10} {lib:>8} {wall:9.3f} {used:8.3f} "
                          f"{wall / base:7.2f} {'yes' if ok else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
