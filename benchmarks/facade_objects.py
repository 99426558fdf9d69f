"""Pickled Python objects through the mpi4py facade's lower-case methods
(neuron_mpi.mpi: ``comm.bcast``, ``comm.allreduce``, ...), against mpi4py's own
methods over Open MPI in the same launch.

    neuron-mpirun -n 8 python benchmarks/facade_objects.py [--objects float dict array]
        [--iters 100] [--ops bcast allreduce ...]

Objects: ``float`` (a Python float, as a training loop's loss), ``dict`` (a
configuration of about 1 KB pickled), ``array`` (a NumPy array of ``--array-bytes``,
default 1 MB). Each operation is timed as ``--iters`` calls between two barriers,
first with mpi4py's ``COMM_WORLD`` (the baseline), then with the facade's; the
slowest rank's time per call. ``sendrecv`` passes the object along a ring
(``comm.sendrecv(obj, next, source=previous)``), ``pingpong`` between the ranks of
each pair (``send``, then ``recv`` from any source). Prints ms per call for both,
the ratio facade / mpi4py, and whether every rank got what mpi4py's call gave.
"""
from __future__ import annotations

import argparse
import pickle
import sys
import time

import numpy as np
from mpi4py import MPI

from neuron_mpi import mpi as facade
from neuron_mpi.bench.sizes import parse_size

OPS = ("bcast", "allreduce", "allgather", "gather", "scatter", "alltoall", "sendrecv",
       "pingpong")


def objects(kind: str, rank: int, nbytes: int):
    if kind == "float":
        return 0.5 + rank
    if kind == "dict":
        return {f"layer{i}": {"lr": 1e-3 * (i + 1), "shape": (i, 2 * i), "name": "w" * 8,
                              "rank": rank} for i in range(16)}
    return np.full(max(1, nbytes // 8), float(rank))


def call(op, comm, obj, n, me):
    """One call of ``op``; what it gave (for the comparison with mpi4py's)."""
    if op == "bcast":
        return comm.bcast(obj, root=0)
    if op == "allreduce":
        return comm.allreduce(obj) if not isinstance(obj, dict) else \
            comm.allreduce(obj, op=lambda a, b: a if a["layer0"]["rank"] <= b["layer0"]["rank"]
                           else b)
    if op == "allgather":
        return comm.allgather(obj)
    if op == "gather":
        return comm.gather(obj, root=0)
    if op == "scatter":
        return comm.scatter([obj] * n if me == 0 else None, root=0)
    if op == "alltoall":
        return comm.alltoall([obj] * n)
    if op == "sendrecv":
        return comm.sendrecv(obj, (me + 1) % n, source=(me - 1) % n)
    partner = me ^ 1  # pingpong: pairs
    if partner >= n:
        return None
    if me % 2 == 0:
        comm.send(obj, partner, tag=3)
        return comm.recv(source=MPI.ANY_SOURCE, tag=4)
    got = comm.recv(source=MPI.ANY_SOURCE, tag=3)
    comm.send(got, partner, tag=4)
    return got


def timed(op, comm, obj, n, me, iters, world):
    call(op, comm, obj, n, me)  # warm
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        got = call(op, comm, obj, n, me)
    wall = time.perf_counter() - t0
    world.Barrier()
    return world.allreduce(wall, op=MPI.MAX) / iters * 1e3, got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", nargs="+", default=["float", "dict", "array"],
                    choices=("float", "dict", "array"))
    ap.add_argument("--array-bytes", default="1MB")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    fw = facade.COMM_WORLD
    nbytes = parse_size(args.array_bytes)
    if me == 0:
        print(f"# pickled objects, {n} ranks, {args.iters} calls per operation and object")
        print(f"# {'object':>7} {'bytes':>9} {'op':>10} {'mpi4py ms':>10} {'facade ms':>10} "
              f"{'ratio':>7} same")
    for kind in args.objects:
        obj = objects(kind, me, nbytes)
        size = len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        for op in args.ops:
            base, want = timed(op, world, obj, n, me, args.iters, world)
            ours, got = timed(op, fw, obj, n, me, args.iters, world)
            same = world.allreduce(
                bool(pickle.dumps(got) == pickle.dumps(want)) if kind != "array" else
                bool(all(np.array_equal(a, b) for a, b in zip(
                    got if isinstance(got, list) else [got],
                    want if isinstance(want, list) else [want]))
                     and (got is None) == (want is None)), op=MPI.LAND)
            if me == 0:
                print(f"  {kind:>7} {size:>9} {op:>10} {base:10.3f} {ours:10.3f} "
                      f"{ours / base:7.2f} {'yes' if same else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
