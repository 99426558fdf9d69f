"""Overlap of an async collective with compute: the CC core at work.

    neuron-mpirun -n 64 python benchmarks/overlap.py [--bytes 4MB] [--iters 5]
                                                    [--loop-iters K] [--json FILE]
                                                    [--api neuron_mpi|mpi4py|torch]

First the blocking all_reduce of ``--bytes`` is timed (C, the median). Then each
iteration starts the same all_reduce with ``async_op=True``, "computes" for T = C
(a sleep: NeuronCores compute off the host, so the host thread is idle) and waits:

    overlap = (T + C - wall) / min(T, C)

1.0 is perfect overlap (wall = max(T, C)); 0 is none (wall = T + C). The baseline
in the same run is the same loop with the collective blocking before the compute
(overlap 0 by construction, its measured value shows the noise).

C comes from calls back to back, but every timed iteration follows the check of
the last result and a sleep: on the 2-core machines of docs/benchmarks.md any call
made after the cores were idle a few ms is slower (Open MPI's own 4 MiB Allreduce
at 8 ranks: 4.9 ms back to back, 6.7 ms after a 20 ms idle gap), so the blocking
baseline reads about -0.4 and the overlap as much too low. The last three columns
therefore take "C in place": the blocking call timed inside the baseline's
iterations, which follow the same check and sleep as the async ones; against it
the baseline reads about 0. Every call
writes into an ``out`` buffer allocated once (as nccl-tests' buffers are): a fresh
1 MiB result per call is a fresh mapping or a reused heap block depending on what
else is alive, and its page faults (CPU time that 8 or 64 ranks on 2 cores pay in
turn) moved the timings by more than the overlap measured; ``--fresh-results``
lets each call allocate its result as before. Each iteration's
time is the slowest rank's; the ranks' times are combined after the loop, so no
rank waits in an MPI call (which polls the CPU) while others are still timed.
Results are checked, after a barrier that ends the iteration's timing on every
rank: a check is CPU work (a compare of the whole result), and a rank checking
while another still sleeps out its T or waits takes the cores that the other's
wake-up needs (with the check before the barrier, 8 ranks at 4 MiB overslept
their T by up to 2.1 ms in the blocking baseline, and the async iterations lost
as much). Rank 0 prints one line per size and a JSON record with
--json FILE.

``--loop-iters K`` adds the step loop of a training program: K iterations back to
back with no barrier between them (``steady``), so each call starts while the
ranks are still spread out from the previous one, as they are in a real step
loop; the barrier per iteration above starts every rank at once, and at 64 ranks
on 2 cores the agents that must all wake first then queue for the cores. The loop
has its own C (blocking calls back to back) and blocking baseline.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import neuron_mpi as nm
from neuron_mpi.bench.sizes import size_arg


APIS = ("neuron_mpi", "mpi4py", "torch")


def _slowest(seconds: list) -> list:
    """Per iteration, the largest of the ranks' times (one MPI call, after the loop)."""
    mine = np.asarray(seconds, np.float64)
    out = np.empty_like(mine)
    MPI.COMM_WORLD.Allreduce(mine, out, op=MPI.MAX)
    return out.tolist()


class Front:
    """The all_reduce under test through one API: ``start()`` begins the async call
    and returns a waitable whose ``wait()`` gives the result; ``block()`` runs the
    blocking call and returns the result; ``barrier()``. neuron_mpi and mpi4py
    (neuron_mpi.mpi) sum ``x`` into result buffers; torch reduces a tensor in
    place, so it takes MAX over inputs ``base + rank`` (idempotent: every call
    leaves ``base + n - 1``, the next call's input on every rank)."""

    def __init__(self, api, comm, x, fresh):
        n = comm.size
        base = x - comm.rank
        self.barrier = comm.barrier
        if api == "neuron_mpi":
            self.want = base * n + n * (n - 1) / 2
            oa, ob = (None, None) if fresh else (np.empty_like(x), np.empty_like(x))
            self.start = lambda: comm.all_reduce(x, out=oa, async_op=True)
            self.block = lambda: comm.all_reduce(x, out=ob)
        elif api == "mpi4py":
            from neuron_mpi import mpi as M
            w = M.COMM_WORLD
            self.want = base * n + n * (n - 1) / 2
            oa, ob = np.empty_like(x), np.empty_like(x)
            self.start = lambda: _Waits(w.Iallreduce(x, oa, M.SUM), oa)
            self.block = lambda: (w.Allreduce(x, ob, M.SUM), ob)[1]
            self.barrier = w.Barrier
        else:  # torch
            import torch
            import torch.distributed as dist

            import neuron_mpi.torch  # noqa: F401  (the "neuron" backend)
            if not dist.is_initialized():
                dist.init_process_group("neuron")
            self.want = base + (n - 1)
            oa, ob = x.copy(), x.copy()
            ta, tb = torch.from_numpy(oa), torch.from_numpy(ob)
            mx = dist.ReduceOp.MAX
            self.start = lambda: _Waits(dist.all_reduce(ta, mx, async_op=True), oa)
            self.block = lambda: (dist.all_reduce(tb, mx), ob)[1]
            self.barrier = dist.barrier


class _Waits:
    """A Request or torch Work whose wait() returns the result buffer."""

    def __init__(self, req, out):
        self.req, self.out = req, out

    def wait(self):
        self.req.wait()
        return self.out


def measure(comm, nbytes: int, iters: int, fresh: bool = False, loop_iters: int = 0,
            api: str = "neuron_mpi") -> dict:
    n = comm.size
    x = np.arange(max(1, nbytes // 4), dtype=np.float32) % 7 + comm.rank
    # the async call's result buffer, and the blocking calls' (fresh: a new one each)
    f = Front(api, comm, x, fresh)
    want = f.want
    for _ in range(2):
        f.block()
    blocking = []
    for _ in range(iters):
        f.barrier()
        t0 = time.perf_counter()
        f.block()
        blocking.append(time.perf_counter() - t0)
    c = statistics.median(_slowest(blocking))
    t = c
    walls, serial, calls, wrong = [], [], [], 0
    for _ in range(iters):
        f.barrier()
        t0 = time.perf_counter()
        h = f.start()
        time.sleep(t)
        y = h.wait()
        walls.append(time.perf_counter() - t0)
        f.barrier()  # (no rank checks while another is still timed)
        wrong += int(not np.array_equal(y, want))
        f.barrier()
        t0 = time.perf_counter()
        y = f.block()
        calls.append(time.perf_counter() - t0)
        time.sleep(t)
        serial.append(time.perf_counter() - t0)
        f.barrier()
        wrong += int(not np.array_equal(y, want))
    wall, ser = statistics.median(_slowest(walls)), statistics.median(_slowest(serial))
    c_in = statistics.median(_slowest(calls))
    row = {"bytes": x.nbytes, "ranks": n, "C_ms": c * 1e3, "T_ms": t * 1e3,
           "wall_ms": wall * 1e3, "overlap": (t + c - wall) / min(t, c),
           "serial_wall_ms": ser * 1e3, "serial_overlap": (t + c - ser) / min(t, c),
           "C_in_place_ms": c_in * 1e3, "overlap_in_place": (t + c_in - wall) / min(t, c_in),
           "serial_overlap_in_place": (t + c_in - ser) / min(t, c_in),
           "fresh_results": fresh, "api": api}
    if loop_iters:
        row.update(steady(f, loop_iters))
        wrong += row.pop("wrong")
    row["wrong"] = MPI.COMM_WORLD.allreduce(wrong)
    return row


def steady(f: Front, k: int) -> dict:
    """The step loop of a training program: ``k`` iterations back to back, with no
    barrier between them, so a call starts while the ranks are still spread out
    from the last one. Three loops, each timed whole on every rank (the slowest
    rank's total over ``k``): blocking calls alone (C), then blocking call and
    compute T = C (its overlap is 0 by construction), then async call, compute T,
    wait. Only the loops' last results are checked (a check per iteration would be
    work between the calls)."""
    last = {}

    def loop(mode: str, t: float) -> float:
        f.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            if mode == "async":
                h = f.start()
                time.sleep(t)
                last[mode] = h.wait()
            else:
                last[mode] = f.block()
                if t:
                    time.sleep(t)
        return _slowest([(time.perf_counter() - t0) / k])[0]

    c = loop("block", 0.0)
    ser = loop("block", c)
    wrong = int(not np.array_equal(last["block"], f.want))
    wall = loop("async", c)
    wrong += int(not np.array_equal(last["async"], f.want))
    return {"loop_iters": k, "loop_C_ms": c * 1e3, "loop_wall_ms": wall * 1e3,
            "loop_overlap": (2 * c - wall) / c, "loop_serial_wall_ms": ser * 1e3,
            "loop_serial_overlap": (2 * c - ser) / c, "wrong": wrong}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=size_arg, nargs="+", default=[1 << 20, 4 << 20])
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--fresh-results", action="store_true",
                   help="let every call allocate its result (no out= buffers)")
    p.add_argument("--loop-iters", type=int, default=0, metavar="K",
                   help="also time a step loop of K back-to-back iterations (no barrier "
                        "between them), with its own C and blocking baseline")
    p.add_argument("--api", choices=APIS, default="neuron_mpi",
                   help="the calls timed: neuron_mpi's all_reduce(async_op=True), the "
                        "mpi4py facade's Iallreduce, or torch.distributed's all_reduce "
                        "(async_op=True) on the \"neuron\" backend (MAX, in place)")
    a = p.parse_args(argv)
    if a.loop_iters < 0:
        p.error(f"--loop-iters: expected an integer >= 0, got {a.loop_iters}")
    if a.fresh_results and a.api != "neuron_mpi":
        p.error("--fresh-results: only with --api neuron_mpi (the others write into "
                "buffers they are given)")
    comm = nm.init()
    rows = [measure(comm, b, a.iters, a.fresh_results, a.loop_iters, a.api) for b in a.bytes]
    if comm.rank == 0:
        print(f"# overlap of an async all_reduce with T = C of compute (a sleep), "
              f"{comm.size} ranks on {comm.topology.instance}, through {a.api}")
        loop_head = (f" {'loop C(ms)':>11} {'loop wall(ms)':>14} {'loop overlap':>13} "
                     f"{'loop blocking overlap':>22}") if a.loop_iters else ""
        print(f"# {'bytes':>10} {'C(ms)':>9} {'wall(ms)':>9} {'overlap':>8} "
              f"{'blocking wall(ms)':>18} {'blocking overlap':>17}{loop_head} "
              f"{'C in place(ms)':>15} {'overlap':>8} {'blocking overlap':>17} {'wrong':>6}")
        for r in rows:
            loop = (f" {r['loop_C_ms']:11.2f} {r['loop_wall_ms']:14.2f} "
                    f"{r['loop_overlap']:13.2f} {r['loop_serial_overlap']:22.2f}"
                    ) if a.loop_iters else ""
            print(f"  {r['bytes']:>10} {r['C_ms']:9.2f} {r['wall_ms']:9.2f} {r['overlap']:8.2f} "
                  f"{r['serial_wall_ms']:18.2f} {r['serial_overlap']:17.2f}{loop} "
                  f"{r['C_in_place_ms']:15.2f} {r['overlap_in_place']:8.2f} "
                  f"{r['serial_overlap_in_place']:17.2f} {r['wrong']:>6}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
