"""What a wait costs: CPU seconds burnt by ranks waiting for a late rank.

    neuron-mpirun -n 64 python benchmarks/idle.py [--seconds 5]

Rank 0 sleeps ``--seconds`` before a barrier every other rank is already in; the
CPU time (user + system, all threads of each process) spent meanwhile is summed
over the ranks. Measured twice in the same run: with neuron_mpi's barrier (waiters
sleep on a futex) and with Open MPI's own MPI_Barrier (the baseline: its waiters
poll and yield when oversubscribed). Prints both totals and their ratio.

Then the same wait with the barrier in flight (``barrier(async_op=True)``): each
waiting rank starts it and sleeps ``--seconds`` + 0.5 outside neuron_mpi while its
agent waits for rank 0, then waits on the handle. The wall time is about that sleep
when the call returned at once, and the CPU is what the agents burnt meanwhile
(across hosts or domains the agreement runs there too: control.RoutedAgreement).
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

from mpi4py import MPI

import neuron_mpi as nm


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_cost(barrier, seconds: float, waiting=None) -> tuple[float, float]:
    """(CPU seconds summed over ranks, wall seconds of the slowest rank): rank 0
    sleeps ``seconds`` and calls ``barrier``, the others call ``waiting`` (default
    ``barrier``)."""
    world = MPI.COMM_WORLD
    world.Barrier()
    t0, c0 = time.perf_counter(), cpu()
    if world.Get_rank() == 0:
        time.sleep(seconds)
        barrier()
    else:
        (waiting or barrier)()
    used = cpu() - c0
    if world.Get_rank() == 0:
        used = 0.0  # the sleeper's own time is not waiting
    wall = time.perf_counter() - t0
    return world.allreduce(used), world.allreduce(wall, op=MPI.MAX)


def asleep_in_flight(comm, seconds: float):
    """A waiting rank's part of the barrier in flight: start it, sleep outside
    neuron_mpi, then wait on it."""
    def run():
        h = comm.barrier(async_op=True)
        time.sleep(seconds)
        h.wait()
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args(argv)
    comm = nm.init()
    comm.barrier()
    ours, wall_ours = wait_cost(comm.barrier, a.seconds)
    mpis, wall_mpi = wait_cost(MPI.COMM_WORLD.Barrier, a.seconds)
    held, wall_held = wait_cost(lambda: comm.barrier(async_op=True).wait(), a.seconds,
                                asleep_in_flight(comm, a.seconds + 0.5))
    if comm.rank == 0:
        print(f"# {comm.size - 1} ranks wait {a.seconds:g} s for rank 0 at a barrier; "
              "CPU seconds summed over the waiting ranks")
        print(f"  neuron_mpi barrier : {ours:8.3f} CPU s  (wall {wall_ours:.2f} s)")
        print(f"  MPI_Barrier        : {mpis:8.3f} CPU s  (wall {wall_mpi:.2f} s)")
        print(f"  ratio neuron_mpi / MPI: {ours / mpis if mpis > 0 else float('nan'):.4f}")
        print(f"  neuron_mpi barrier in flight, the waiting ranks asleep {a.seconds + 0.5:g} s: "
              f"{held:8.3f} CPU s  (wall {wall_held:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
