"""The first collective of a job whose numba cache is cold.

    NUMBA_CACHE_DIR=<empty folder> NEURON_MPI_TIMEOUT=5 \
        neuron-mpirun --no-warm -n 4 python tests/fault_programs/first_call.py

Compiling the shared-memory data plane takes tens of seconds per process. It must
happen in init, where no deadline runs, not inside the first call: there it came out
of that call's deadline, and every rank timed out in the argument agreement
(``no agreement on the arguments within 60 s ... not heard from: rank ...``).
Prints ``first_call OK rank <r> <seconds>`` per rank; exit status 0 if the result is
right (an exception ends the job non-zero).

The domain's first rank, which compiled the data plane in init (the others loaded
what it wrote; code loaded from the cache cannot be inspected), then prints, for
each of its entry points, the numba runtime calls in its compiled code:
``first_call IR <function> <NRT calls> <NRT increfs> <signatures compiled>``.
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
if r == 0:
    from neuron_mpi.transport import plane

    for f in (plane.exec_run, plane.exec_pass, plane.read_slot, plane.post):
        irs = f.inspect_llvm().values()
        print(f"first_call IR {f.__name__} {sum(ir.count('@NRT_') for ir in irs)} "
              f"{sum(ir.count('@NRT_incref') for ir in irs)} {len(irs)}", flush=True)
sys.exit(0 if ok else 1)
