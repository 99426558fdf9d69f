"""The first collective of a job whose numba cache is cold.

    NUMBA_CACHE_DIR=<empty folder> NEURON_MPI_TIMEOUT=5 \
        neuron-mpirun --no-warm -n 4 python tests/fault_programs/first_call.py

Compiling the shared-memory data plane takes tens of seconds per process. It must
happen in init, where no deadline runs, not inside the first call: there it came out
of that call's deadline, and every rank timed out in the argument agreement
(``no agreement on the arguments within 60 s ... not heard from: rank ...``).
Prints ``first_call OK rank <r> <seconds>`` per rank; exit status 0 if the result is
right (an exception ends the job non-zero).
"""
import sys
import time

import numpy as np

import neuron_mpi as nm

comm = nm.init()
n, r = comm.size, comm.rank
t0 = time.monotonic()
y = comm.all_reduce(np.full(4, r + 1, np.float32))
took = time.monotonic() - t0
ok = bool((y == n * (n + 1) // 2).all())
print(f"first_call {'OK' if ok else 'WRONG'} rank {r} {took:.3f}", flush=True)
sys.exit(0 if ok else 1)
