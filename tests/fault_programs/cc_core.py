"""The CC core at work: progress that does not need the rank's own thread.

    mpiexec -n 16 python -m mpi4py tests/fault_programs/cc_core.py   (trn2.48xlarge)

1. async: after a barrier, every rank starts an async all_reduce and sleeps 1 s
   outside neuron_mpi (the call returns before its members have agreed);
   the all_reduce must have completed during the sleep (its end time is before the
   sleep ends, and the handle is done before anyone waits on it).
2. route: ranks 0 and 8 (core 0 of chips 0 and 2 on one row of the torus) form a
   group whose routes pass chip 1 (0 -> 8) and chip 3 (8 -> 0), where ranks 4 and
   12 sleep 3 s outside neuron_mpi. The group's all_reduce, all_gather and send/recv must finish well
   within those 3 s.
Prints ``@@ {json}`` per rank; exit status 0 if every check held.
"""
import json
import sys
import time

import numpy as np

import neuron_mpi as nm


def main() -> int:
    w = nm.init(strict=False)
    n, r = w.size, w.rank
    fails = []
    # 1. an async all_reduce finishes while its rank sleeps
    x = np.arange(1 << 14, dtype=np.float32) + r
    want = np.arange(1 << 14, dtype=np.float32) * n + n * (n - 1) / 2
    w.barrier()  # the call returns before its members agreed: start the sleeps together
    h = w.all_reduce(x, async_op=True)
    time.sleep(1.0)
    woke = time.perf_counter()
    done_while_asleep = h._ex.done and h._ex.t_end is not None and h._ex.t_end < woke
    if not done_while_asleep:
        fails.append("async all_reduce did not complete while its rank slept")
    if not np.array_equal(h.wait(), want):
        fails.append("async all_reduce: wrong result")
    # 2. a group finishes while a rank on its routes sleeps
    group = w.split([[0, 8]] + [[q] for q in range(n) if q not in (0, 8)])
    topo = w.topology
    sleepers = (4, 12)
    if topo.route(0, 8) != [0, 4, 8] or topo.route(8, 0) != [8, 12, 0]:
        fails.append(f"unexpected routes {topo.route(0, 8)} {topo.route(8, 0)}")
    w.barrier()
    elapsed = None
    if r in sleepers:
        time.sleep(3.0)
    elif r in (0, 8):
        t0 = time.monotonic()
        y = group.all_reduce(np.full(1 << 16, r, np.float32), timeout=20)
        g = group.all_gather(np.full(4, r, np.int32), timeout=20)
        if group.rank == 0:
            group.send(np.arange(1 << 17, dtype=np.float64), 1, timeout=20)
            back = group.recv(np.empty(8, np.int64), 1, timeout=20)
            ok_p2p = np.array_equal(back, np.arange(8))
        else:
            got = group.recv(np.empty(1 << 17, np.float64), 0, timeout=20)
            group.send(np.arange(8, dtype=np.int64), 0, timeout=20)
            ok_p2p = np.array_equal(got, np.arange(1 << 17))
        elapsed = time.monotonic() - t0
        if not (np.all(y == 8) and np.array_equal(g, np.repeat([0, 8], 4)) and ok_p2p):
            fails.append("group results wrong")
        if elapsed >= 2.0:
            fails.append(f"the group took {elapsed:.2f} s while ranks 4 and 12 slept 3 s")
    w.barrier()
    print("@@ " + json.dumps({"rank": r, "fails": fails, "group_s": elapsed,
                              "async_done_while_asleep": bool(done_while_asleep)}),
          flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
