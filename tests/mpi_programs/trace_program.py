"""Traced collectives (tests/test_trace.py): argv[1] = a folder.

1. Tracing off: a few collectives under a profiler that counts every Python call
   into neuron_mpi.tracing on the calling thread (which drives the blocking calls):
   none may happen, and the plans keep the compiled data plane where the run has one.
2. ``with neuron_mpi.trace(folder/"ctx")``: an all-reduce of each algorithm, an
   all-gather of 256 elements per rank and a reduce-scatter; each rank writes its
   file.
3. With NEURON_MPI_TRACE=DIR set by the test, the calls of 1. (then not profiled)
   and the final barrier go to DIR, written at exit; the block's calls still go to
   its own folder (the innermost recorder records).
"""
import sys
import threading
from pathlib import Path

import numpy as np
from mpi4py import MPI

import neuron_mpi as nm
from neuron_mpi import tracing

folder = Path(sys.argv[1])
comm = nm.init()
rank, n = comm.rank, comm.size

# 1. off: no call reaches the recorder, and nothing else changes
seen = []


def prof(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == tracing.__file__:
        seen.append(frame.f_code.co_name)


env_traced = tracing.ACTIVE is not None
x = np.arange(4096, dtype=np.float32) + rank
if not env_traced:
    threading.setprofile(prof)
    sys.setprofile(prof)
for _ in range(3):
    comm.all_reduce(x)
    comm.all_gather(x[:64])
h = comm.all_reduce(x, async_op=True)
h.wait()
if not env_traced:
    sys.setprofile(None)
    threading.setprofile(None)
    assert seen == [], f"rank {rank}: tracing off, yet the recorder ran: {seen[:5]}"
    native = [p.native is not None for p in comm._plans.values()]
    if comm._engine.native:
        assert all(native), f"rank {rank}: tracing off, yet a plan left the compiled plane"

# 2. on, for a block
with nm.trace(folder / "ctx"):
    for algo in ("ring", "mesh"):
        y = comm.all_reduce(x, algorithm=algo)
        assert np.array_equal(y, sum(np.arange(4096, dtype=np.float32) + r for r in range(n)))
    comm.all_gather(x[:256])
    comm.reduce_scatter(x)
assert tracing.ACTIVE is (None if not env_traced else tracing.ACTIVE)
assert (folder / "ctx" / f"trace-rank{comm.world_rank}.json").is_file()
comm.barrier()
if rank == 0:
    print("trace program done", flush=True)
