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

``--async-ms T`` adds where an async call's CPU goes: a loop of ``async_op=True``
calls, each followed by T ms of sleep (compute on the NeuronCores: the host thread
idle) and ``wait()``, against the same loop with the blocking call. It prints the
CPU per call and rank of each loop and splits the async one between the calling
thread (the call that starts it, and ``wait()``) and the rank's agent thread (the
CC core, by its thread CPU clock), the rest being the process's other threads and the
sleep's own system calls.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from mpi4py import MPI

import neuron_mpi as nm
from neuron_mpi.bench.sizes import parse_size

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_gather_v",
       "all_to_all_v", "barrier")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def calls(op, comm, world, nbytes):
    """(neuron_mpi call, MPI call, check, async start or None) on buffers of
    ``nbytes`` per rank; the async start makes the same call with ``async_op=True``
    on the same arrays and returns its handle."""
    n, me = comm.size, comm.rank
    count = max(1, nbytes // 4)
    if op == "barrier":  # (no bytes: --bytes is ignored)
        return comm.barrier, world.Barrier, lambda: True, None
    if op == "all_reduce":
        x = np.full(count, me + 1, np.float32)
        out, ref = np.empty_like(x), np.empty_like(x)
        mpi, want = (lambda: world.Allreduce(x, ref)), np.full(count, n * (n + 1) / 2, np.float32)
    elif op in ("all_gather", "all_gather_v"):
        x = np.full(count, me, np.float32)
        out, ref = np.empty(count * n, np.float32), np.empty(count * n, np.float32)
        mpi, want = (lambda: world.Allgather(x, ref)), np.repeat(np.arange(n, dtype=np.float32),
                                                                 count)
        if op == "all_gather_v":  # (equal counts, given as a list as programs do)
            counts = [count] * n
            mpi = lambda: world.Allgatherv(x, [ref, counts])  # noqa: E731
            call = lambda **kw: comm.all_gather_v(x, counts, out=out, **kw)  # noqa: E731
    else:
        per = max(1, count // n)
        x = np.full(per * n, me + 1, np.float32)
        if op == "reduce_scatter":
            out, ref = np.empty(per, np.float32), np.empty(per, np.float32)
            mpi, want = (lambda: world.Reduce_scatter_block(x, ref)), \
                np.full(per, n * (n + 1) / 2, np.float32)
        else:
            out, ref = np.empty_like(x), np.empty_like(x)
            mpi, want = (lambda: world.Alltoall(x, ref)), \
                np.repeat(np.arange(1, n + 1, dtype=np.float32), per)
            if op == "all_to_all_v":  # (equal counts, given as lists as programs do)
                counts = [per] * n
                mpi = lambda: world.Alltoallv([x, counts], [ref, counts])  # noqa: E731
                call = lambda **kw: comm.all_to_all_v(x, counts, counts, out=out,  # noqa: E731
                                                      **kw)
    if not op.endswith("_v"):
        f = getattr(comm, op)
        call = lambda **kw: f(x, out=out, **kw)  # noqa: E731
    return (call, mpi, lambda: np.array_equal(out, want), lambda: call(async_op=True))


def timed_loop(fn, k: int, world) -> tuple[float, float]:
    """(wall µs per call on rank 0's clock, CPU µs per call on this rank)."""
    world.Barrier()
    t, c = time.perf_counter(), cpu()
    for _ in range(k):
        fn()
    dt, dc = time.perf_counter() - t, cpu() - c
    world.Barrier()
    return dt / k * 1e6, dc / k * 1e6


def async_loops(start, block, k: int, pause: float, agent, world) -> dict:
    """The async loop (``start()`` returns a handle; ``pause`` s of sleep; wait) and
    the blocking one with the same sleep, each over ``k`` calls: µs per call of
    wall (rank 0's clock) and of CPU on this rank (all threads), the async one split
    between the calling thread's start and wait and thread ``agent`` (the agent's
    CPU clock)."""
    clock = time.pthread_getcpuclockid(agent.ident)
    out = {}
    world.Barrier()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(k):
        block()
        time.sleep(pause)
    out["block_wall"], out["block_cpu"] = time.perf_counter() - t, time.process_time() - c
    world.Barrier()
    on_start = on_wait = 0.0
    t, c, a = time.perf_counter(), time.process_time(), time.clock_gettime(clock)
    for _ in range(k):
        m = time.thread_time()
        h = start()
        on_start += time.thread_time() - m
        time.sleep(pause)
        m = time.thread_time()
        h.wait()
        on_wait += time.thread_time() - m
    out["async_wall"], out["async_cpu"] = time.perf_counter() - t, time.process_time() - c
    out["agent"] = time.clock_gettime(clock) - a
    out["start"], out["wait"] = on_start, on_wait
    world.Barrier()
    return {key: v / k * 1e6 for key, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=OPS, default="all_reduce")
    ap.add_argument("--bytes", default="8KB")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--split", action="store_true",
                    help="also time the compiled run (wraps transport.native.exec_run)")
    ap.add_argument("--groups", type=int, default=1,
                    help="call on G consecutive groups of equal size (default 1: all ranks)")
    ap.add_argument("--async-ms", type=float, default=None, metavar="T",
                    help="also time async calls with T ms of sleep before wait(), and "
                         "split their CPU between the calling thread and the agent")
    a = ap.parse_args(argv)
    world = MPI.COMM_WORLD
    if a.groups < 1 or world.size % a.groups:
        ap.error(f"--groups: expected a divisor of the {world.size} ranks, got {a.groups}")
    if a.async_ms is not None and (a.op == "barrier" or not a.async_ms >= 0):
        ap.error("--async-ms: expected a number of ms >= 0 with a collective that has "
                 f"an async form (not barrier), got {a.async_ms:g} with --op {a.op}")
    comm = nm.init()
    per = world.size // a.groups
    if a.groups > 1:
        comm = comm.split([list(range(g * per, (g + 1) * per)) for g in range(a.groups)])
    group = world if a.groups == 1 else world.Split(world.rank // per, world.rank)
    ours, theirs, check, start = calls(a.op, comm, group, parse_size(a.bytes))
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
    split_async = None
    if a.async_ms is not None:
        for _ in range(10):
            start().wait()
        res = async_loops(start, ours, a.calls, a.async_ms / 1e3, comm._engine.agent,
                          world)
        ok = world.allreduce(int(check()), MPI.MIN) and ok
        split_async = (res, world.gather(res))
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
        if split_async is not None:
            mine, every = split_async
            m = {key: float(np.mean([r[key] for r in every])) for key in mine}
            print(f"# with {a.async_ms:g} ms of sleep after each call (before wait() when "
                  "async); CPU per call and rank, mean over ranks")
            print(f"blocking  : {mine['block_wall']:9.1f} us per call, CPU {m['block_cpu']:.1f}")
            print(f"async     : {mine['async_wall']:9.1f} us per call, CPU {m['async_cpu']:.1f}: "
                  f"start {m['start']:.1f}, wait {m['wait']:.1f}, agent {m['agent']:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
