"""Point to point through the mpi4py facade (neuron_mpi.mpi), the ways an mpi4py
program receives, against Open MPI's own Send/Recv in the same launch.

    neuron-mpirun -n 8 python benchmarks/facade_p2p.py [--bytes 8KB 1MB] [--iters 200]

The ranks pair up (0-1, 2-3, ...): the even rank of a pair sends a message and
receives it back, the odd one receives it and sends it back (ping-pong). Per size,
each way is timed as ``--iters`` round trips between two barriers:

* ``mpi``: mpi4py's real ``Send``/``Recv`` (the baseline);
* ``named``: the facade's ``Send``/``Recv`` from the partner's rank;
* ``any``: ``Recv`` from ``MPI.ANY_SOURCE`` (mpi4py's default), which polls every
  source;
* ``irecv-any``: ``Irecv`` from ``MPI.ANY_SOURCE`` then ``Wait``;
* ``ssend``: ``Ssend`` (synchronous: it returns once the partner's receive has
  matched it) with a named ``Recv``.

Prints ms per round trip (the slowest pair's), CPU ms per round trip and rank, each
way's ratio to ``mpi``, and whether every message arrived exact.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
from mpi4py import MPI

from neuron_mpi import mpi as facade
from neuron_mpi.bench.sizes import parse_size

WAYS = ("mpi", "named", "any", "irecv-any", "ssend")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def round_trips(way, comm, partner, sender, buf, back, iters) -> bool:
    """``iters`` round trips the given way; whether every message came exact."""
    ok = True
    any_src = facade.ANY_SOURCE
    for k in range(iters):
        if sender:
            buf[0] = k
            if way == "ssend":
                comm.Ssend(buf, partner, 7)
            else:
                comm.Send(buf, partner, 7)
            comm.Recv(back, partner, 8)
            ok &= back[0] == k + 1
        else:
            if way in ("mpi", "named", "ssend"):
                comm.Recv(back, partner, 7)
            elif way == "any":
                comm.Recv(back, any_src, 7)
            else:
                comm.Irecv(back, any_src, 7).Wait()
            back[0] += 1
            comm.Send(back, partner, 8)
    return bool(ok)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", nargs="+", default=["8KB", "1MB"])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    if n % 2:
        print(f"facade_p2p.py: error: needs an even number of ranks, not {n}",
              file=sys.stderr, flush=True)
        return 2
    fw = facade.COMM_WORLD
    partner, sender = me ^ 1, me % 2 == 0
    if me == 0:
        print(f"# facade ping-pong, {n} ranks ({n // 2} pairs), {args.iters} round trips "
              "per size and way")
        print(f"# {'bytes':>10} {'way':>10} {'ms/trip':>9} {'cpu ms':>8} {'ratio':>7} exact")
    for size in args.bytes:
        nbytes = parse_size(size)
        count = max(1, nbytes // 8)
        buf, back = np.zeros(count), np.zeros(count)
        base = None
        for way in args.ways:
            comm = world if way == "mpi" else fw
            round_trips(way, comm, partner, sender, buf, back, 3)  # warm
            world.Barrier()
            t0, c0 = time.perf_counter(), cpu()
            ok = round_trips(way, comm, partner, sender, buf, back, args.iters)
            wall, used = time.perf_counter() - t0, cpu() - c0
            world.Barrier()
            wall = world.allreduce(wall, op=MPI.MAX) / args.iters * 1e3
            used = world.allreduce(used, op=MPI.SUM) / n / args.iters * 1e3
            ok = world.allreduce(ok, op=MPI.LAND)
            base = wall if way == "mpi" else base
            if me == 0:
                ratio = f"{wall / base:7.2f}" if base else "      -"
                print(f"  {count * 8:>10} {way:>10} {wall:9.3f} {used:8.3f} {ratio} "
                      f"{'yes' if ok else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
