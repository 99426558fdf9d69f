"""A straggler above the timeout, for the flight recorder and the diagnosis.

    NEURON_MPI_TRACE_DIR=DIR mpiexec -n 4 python -m mpi4py \\
        tests/fault_programs/straggler.py TIMEOUT SLEEP

After a few good calls, the last rank sleeps SLEEP seconds before an all_reduce that
every rank calls with ``timeout=TIMEOUT``. Every rank catches what it gets and prints
one line ``@@ {json}`` (rank, error class, message, elapsed, result correct), then
leaves normally. On a timeout each rank's flight recorder dumps to
NEURON_MPI_TRACE_DIR; ``python -m neuron_mpi.diagnose DIR`` should then name the
straggler.
"""
import json
import sys
import time

import numpy as np

import neuron_mpi as nm


def main() -> int:
    timeout, sleep = float(sys.argv[1]), float(sys.argv[2])
    w = nm.init()
    n, r = w.size, w.rank
    straggler = n - 1
    x = (np.arange(64) % 5 + r).astype(np.float32)
    want = np.asarray(sum((np.arange(64) % 5 + q) for q in range(n)), np.float32)
    for _ in range(3):  # some history in the recorder
        w.all_reduce(x, timeout=60)
    w.all_gather(x[:4], timeout=60)
    if r == straggler:
        time.sleep(sleep)
    t0 = time.monotonic()
    err, ok = None, None
    try:
        # the single-step mesh (one round): the waiting ranks wait for the straggler
        # itself, and the straggler finds the others' data already posted
        y = w.all_reduce(x, timeout=timeout, algorithm="mesh1")
        ok = bool(np.array_equal(y, want))
    except nm.NeuronMPIError as e:
        err = e
    rec = {"rank": r, "straggler": straggler, "error": err and type(err).__name__,
           "msg": str(err) if err else "", "elapsed": round(time.monotonic() - t0, 3),
           "result_ok": ok}
    print("@@ " + json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
