"""What one small blocking collective costs: a loop of back-to-back calls against
Open MPI's own call on the same buffers, with the CPU each rank spends.

    neuron-mpirun -n 8 python benchmarks/call_cost.py [--op all_reduce] [--bytes 8KB]
                                                      [--calls 2000]

At small sizes the bytes are nothing and the cost of a call is its CPU: the
Python around the call (checks, choice, agreement set-up, the execution object)
and the compiled run (agreement, pieces, waits). With more ranks than cores every
rank's CPU adds up, so a call takes about the sum over ranks over the cores. This
prints, from one launch: µs per call (rank 0's wall clock over the loop), CPU µs per
call and rank (all threads, mean over ranks), and the same for the MPI call, with
the ratio of the two walls. ``--split`` adds the wall time per call spent inside
the compiled run (a wrapper times ``transport.native.exec_run``; about 0.2 µs a
call): the rest of the wall is the Python around it, and at 2 ranks on 2 cores,
where nobody waits for a core, wall is CPU. ``--groups G`` splits the ranks into G
consecutive groups of equal size (TP groups; on two nodes ``--groups 2`` gives one
per node, each inside its node's shared-memory domain with NEURON_MPI_SHM=node) and
calls on each rank's group, against MPI's call on the same groups. Every result is
checked once after the loop.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from mpi4py import MPI

import neuron_mpi as nm
from neuron_mpi.bench.sizes import parse_size

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def calls(op, comm, world, nbytes):
    """(neuron_mpi call, MPI call, check) on buffers of ``nbytes`` per rank."""
    n, me = comm.size, comm.rank
    count = max(1, nbytes // 4)
    if op == "barrier":  # (no bytes: --bytes is ignored)
        return comm.barrier, world.Barrier, lambda: True
    if op == "all_reduce":
        x = np.full(count, me + 1, np.float32)
        out, ref = np.empty_like(x), np.empty_like(x)
        return (lambda: comm.all_reduce(x, out=out), lambda: world.Allreduce(x, ref),
                lambda: np.array_equal(out, np.full(count, n * (n + 1) / 2, np.float32)))
    if op == "all_gather":
        x = np.full(count, me, np.float32)
        out, ref = np.empty(count * n, np.float32), np.empty(count * n, np.float32)
        return (lambda: comm.all_gather(x, out=out), lambda: world.Allgather(x, ref),
                lambda: np.array_equal(out, np.repeat(np.arange(n, dtype=np.float32), count)))
    per = max(1, count // n)
    x = np.full(per * n, me + 1, np.float32)
    if op == "reduce_scatter":
        out, ref = np.empty(per, np.float32), np.empty(per, np.float32)
        return (lambda: comm.reduce_scatter(x, out=out),
                lambda: world.Reduce_scatter_block(x, ref),
                lambda: np.array_equal(out, np.full(per, n * (n + 1) / 2, np.float32)))
    out, ref = np.empty_like(x), np.empty_like(x)
    return (lambda: comm.all_to_all(x, out=out), lambda: world.Alltoall(x, ref),
            lambda: np.array_equal(out, np.repeat(np.arange(1, n + 1, dtype=np.float32), per)))


def timed_loop(fn, k: int, world) -> tuple[float, float]:
    """(wall µs per call on rank 0's clock, CPU µs per call on this rank)."""
    world.Barrier()
    t, c = time.perf_counter(), cpu()
    for _ in range(k):
        fn()
    dt, dc = time.perf_counter() - t, cpu() - c
    world.Barrier()
    return dt / k * 1e6, dc / k * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=OPS, default="all_reduce")
    ap.add_argument("--bytes", default="8KB")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--split", action="store_true",
                    help="also time the compiled run (wraps transport.native.exec_run)")
    ap.add_argument("--groups", type=int, default=1,
                    help="call on G consecutive groups of equal size (default 1: all ranks)")
    a = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    if a.groups < 1 or world.size % a.groups:
        ap.error(f"--groups: expected a divisor of the {world.size} ranks, got {a.groups}")
    comm = nm.init()
    per = world.size // a.groups
    if a.groups > 1:
        comm = comm.split([list(range(g * per, (g + 1) * per)) for g in range(a.groups)])
    group = world if a.groups == 1 else world.Split(world.rank // per, world.rank)
    ours, theirs, check = calls(a.op, comm, group, parse_size(a.bytes))
    inside = [0.0]
    if a.split:
        from neuron_mpi.transport import native

        run = native.exec_run

        def exec_run(*args):
            t = time.perf_counter()
            try:
                return run(*args)
            finally:
                inside[0] += time.perf_counter() - t

        native.exec_run = exec_run
    for _ in range(max(10, a.calls // 10)):  # plans built, pages touched, caches warm
        ours()
        theirs()
    inside[0] = 0.0
    wall, c = timed_loop(ours, a.calls, world)
    run_us = inside[0] / a.calls * 1e6
    mpi_wall, mpi_c = timed_loop(theirs, a.calls, world)
    ok = world.allreduce(int(check()), MPI.MIN)
    per_rank = world.gather((c, mpi_c))
    if world.rank == 0:
        cs = np.array(per_rank).mean(axis=0)
        # (rank 0's time inside, as the wall is rank 0's: the mean over the ranks
        # could exceed it, the ranks starting the loop at different times)
        split = f"; {run_us:.1f} us of the wall inside the compiled run" if a.split else ""
        what = a.op if a.op == "barrier" else f"{a.op} of {a.bytes}"
        where = f"{world.size} ranks" if a.groups == 1 else \
            f"{a.groups} groups of {per} of {world.size} ranks"
        print(f"# {what} on {where} ({comm.topology.instance}), "
              f"{a.calls} calls, algorithm {comm.last_call.algorithm}")
        print(f"neuron_mpi: {wall:9.1f} us per call, CPU {cs[0]:.1f} us per call and rank{split}")
        print(f"MPI       : {mpi_wall:9.1f} us per call, CPU {cs[1]:.1f} us per call and rank")
        print(f"ratio     : {wall / mpi_wall:.2f}   results exact: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
