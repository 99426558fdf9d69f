"""Point to point on a ring: each rank sends to the next and receives from the
previous, the ways a program can write it, against Open MPI's MPI_Sendrecv.

    neuron-mpirun -n 8 python benchmarks/p2p.py [--bytes 8KB 8MB] [--iters 20]

Per size, in one launch, each timed as a loop of ``--iters`` calls between two
barriers (a back-to-back pipeline, as a program's exchange loop runs), or with
``--each`` each call on its own after a barrier (as neuron-mpi-bench times a
call: ms is then the median over the calls of the slowest rank's time, and the
CPU is counted around the calls only, not the barriers):
``send+recv`` (comm.send then comm.recv), ``sendrecv`` (comm.sendrecv),
``permute`` (the same ring as a collective) and ``mpi`` (MPI_Sendrecv on the same
buffers, the baseline). Prints ms per call, CPU ms per call and rank (all
threads), each method's ratio to the baseline, and whether every result was
exact.

With ``--pattern pingpong`` the ranks pair up (0-1, 2-3, ...): the even rank of a
pair sends and then receives the message back, the odd one receives and sends it
back (a receiver that waits for each message, as the stages of a pipeline do):
``send+recv`` against ``mpi`` (MPI_Send and MPI_Recv the same way), ms per round
trip. It needs an even number of ranks. With ``--pattern chain`` a message goes
from rank 0 through every rank to the last (each receives from the one before and
sends to the one after, as a pipeline's forward pass; back to back, the next
message follows before the last arrived): ``send+recv`` against ``mpi``, ms per
message.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
from mpi4py import MPI

import neuron_mpi as nm
from neuron_mpi.bench.sizes import parse_size


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", nargs="+", default=["8KB", "8MB"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--each", action="store_true",
                    help="time each call on its own after a barrier (the bench's way)")
    ap.add_argument("--pattern", choices=("ring", "pingpong", "chain"), default="ring",
                    help="a ring of sends (default), pairs sending a message back, or a "
                    "chain from rank 0 to the last")
    args = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    if args.pattern == "pingpong" and world.Get_size() % 2:
        # (every rank says it: the first to exit non-zero ends the others)
        print(f"p2p.py: error: --pattern pingpong needs an even number of ranks, "
              f"not {world.Get_size()}", file=sys.stderr, flush=True)
        return 2
    comm = nm.init()
    me, n = comm.rank, comm.size
    pong, chain = args.pattern == "pingpong", args.pattern == "chain"
    nxt, prv = (me ^ 1, me ^ 1) if pong else ((me + 1) % n, (me - 1) % n)
    ring = [[i, (i + 1) % n] for i in range(n)]
    if me == 0:
        how = "each call after a barrier, median" if args.each else "calls back to back"
        what, base = (("pairs sending back", "MPI_Send + MPI_Recv's") if pong else
                      ("a chain", "MPI_Send + MPI_Recv's") if chain else
                      ("a ring", "MPI_Sendrecv's"))
        print(f"# {what} of {n} ranks on {comm.topology.instance} ({how}): ms per call "
              f"(slowest rank), CPU ms per call and rank, ratio = ms / {base} ms")
        print(f"# {'bytes':>10} {'method':>10} {'ms':>9} {'cpu ms':>8} {'ratio':>7}  exact")
    bad = 0
    for size in args.bytes:
        nbytes = parse_size(size)
        x = (np.arange(nbytes // 4, dtype=np.float32) + 1000 * me) % 65521
        # (a ping-pong's even rank gets its own message back; a chain's ranks get
        # rank 0's, which receives nothing)
        want = (np.arange(nbytes // 4, dtype=np.float32) +
                1000 * (me if pong and me % 2 == 0 else 0 if chain else prv)) % 65521
        if chain and me == 0:
            want[:] = -1
        out = np.empty_like(x)

        def send_recv():
            comm.send(x, nxt)
            comm.recv(out, prv)

        if chain:
            def link(send, recv):
                def call():
                    if me > 0:
                        recv(out, me - 1)
                    if me < n - 1:
                        send(out if me > 0 else x, me + 1)
                return call

            methods = {"mpi": link(world.Send, world.Recv),
                       "send+recv": link(comm.send, comm.recv)}
        elif pong:
            first = me % 2 == 0
            methods = {
                "mpi": (lambda: (world.Send(x, nxt), world.Recv(out, prv))) if first else
                (lambda: (world.Recv(out, prv), world.Send(out, nxt))),
                "send+recv": send_recv if first else
                (lambda: (comm.recv(out, prv), comm.send(out, nxt)))}
        else:
            methods = {"mpi": lambda: world.Sendrecv(x, dest=nxt, recvbuf=out, source=prv),
                       "send+recv": send_recv,
                       "sendrecv": lambda: comm.sendrecv(x, nxt, out, prv),
                       "permute": lambda: comm.permute(x, ring, out=out)}
        rows = {}
        for name, call in methods.items():
            call()  # warm: plans, pages
            out[:] = -1
            if args.each:
                times, spent = np.zeros(args.iters), 0.0
                for i in range(args.iters):
                    world.Barrier()
                    c0 = cpu()
                    t0 = time.perf_counter()
                    call()
                    times[i] = time.perf_counter() - t0
                    spent += cpu() - c0
                slowest = np.empty_like(times)
                world.Allreduce(times, slowest, op=MPI.MAX)
                ms = float(np.median(slowest)) * 1e3
                cms = spent / args.iters * 1e3
            else:
                world.Barrier()
                t0, c0 = time.perf_counter(), cpu()
                for _ in range(args.iters):
                    call()
                world.Barrier()
                ms = (time.perf_counter() - t0) / args.iters * 1e3
                cms = (cpu() - c0) / args.iters * 1e3
            ok = world.allreduce(int(np.array_equal(out, want)), op=MPI.MIN)
            bad += 1 - ok
            rows[name] = (world.allreduce(ms, op=MPI.MAX), world.allreduce(cms) / n, ok)
        if me == 0:
            base = rows["mpi"][0]
            for name, (ms, cms, ok) in rows.items():
                print(f"  {nbytes:>10} {name:>10} {ms:>9.3f} {cms:>8.3f} {ms / base:>7.2f}  "
                      f"{'yes' if ok else 'NO'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
