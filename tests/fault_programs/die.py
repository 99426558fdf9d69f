"""One rank dies or raises; the job must end non-zero, soon, naming the rank.

    mpiexec -n 4 python -m mpi4py tests/fault_programs/die.py MODE WHEN [RANK]

MODE: exit0 (sys.exit(0)), exit1 (sys.exit(1)), os_exit (os._exit(0)), abort
(os.abort()), sigkill (os.kill(own pid, 9)), sigterm (os.kill(own pid, 15)), raise
(an uncaught RuntimeError).
WHEN: before -- the rank dies right before an all_reduce the others are already
in; mid -- the rank dies inside the all_reduce (forced to the ring algorithm), in its
second reduction round, after it sent that round's data and before it sends the next
(its compiled data plane is stepped pass by pass and dies once the second round's
sends are posted), so the others wait for data from it.
RANK: the rank that dies (default 2). The others run the all_reduce without
catching anything, as a user program would. NEURON_MPI_TIMEOUT bounds their wait.
"""
import os
import signal
import sys
import time

import numpy as np

import neuron_mpi as nm

MODE, WHEN = sys.argv[1], sys.argv[2]
VICTIM = int(sys.argv[3]) if len(sys.argv) > 3 else 2


def die():
    print(f"die.py: rank {VICTIM} dies now ({MODE}, {WHEN})", flush=True)
    if MODE == "exit0":
        sys.exit(0)
    if MODE == "exit1":
        sys.exit(1)
    if MODE == "os_exit":
        os._exit(0)
    if MODE == "abort":
        os.abort()
    if MODE == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # SIGTERM's default action ends us before this does
    if MODE == "raise":
        raise RuntimeError(f"rank {VICTIM} fails on purpose")
    raise SystemExit(f"die.py: unknown mode {MODE}")


def main():
    comm = nm.init()
    shm = comm._engine.shm
    if comm.rank == 0 and shm is not None:
        print(f"die.py: segment {shm.seg.path}", flush=True)
    comm.barrier(timeout=120)  # everyone is up before anyone dies
    x = np.arange(4096, dtype=np.float32) + comm.rank
    if comm.rank == VICTIM:
        if WHEN == "before":
            time.sleep(0.5)  # the others are inside the all_reduce by now
            die()
        elif WHEN == "mid":
            # step the compiled data plane pass by pass (never one run to the end),
            # and die once the second round's data has been posted
            from neuron_mpi import executor
            from neuron_mpi.transport import native
            real_pass = native.exec_pass

            def run_in_passes(self, deadline, claim=None):
                return native.PYTHON

            def dying_pass(*args):
                tables, xs = native.table_views(args[3]), args[4]
                steps = tables[0]
                while True:  # one step per call, so no pass runs past the second round
                    k = int(xs[0])
                    cut = native.tables(steps[:k + 1], *tables[1:])  # (a copy: the pass
                    # writes no table)
                    status, moved = real_pass(*args[:3], cut, *args[4:])
                    k = int(xs[0])
                    begun = int((steps[:min(k, len(steps)), 0] == 0).sum())
                    if k < len(steps) and steps[k, 0] == 0 and xs[1] == 1:
                        begun += 1  # this round's sends are posted
                    if begun >= 2:
                        die()
                    if status == native.DONE and k < len(steps):
                        continue
                    return status, moved
            executor.Execution.run = run_in_passes
            native.exec_pass = dying_pass
            # a lone blocking call's single compiled run (Communicator._run_alone)
            # hands over to the general path, which steps it as above
            native.exec_run = lambda *args: native.PYTHON
        else:
            raise SystemExit(f"die.py: unknown WHEN {WHEN}")
    y = comm.all_reduce(x, algorithm="ring")  # n - 1 reduce rounds, then n - 1 copies
    n = comm.size
    want = np.arange(4096, dtype=np.float32) * n + n * (n - 1) / 2
    print(f"die.py: rank {comm.rank} left the all_reduce, result "
          f"{'correct' if np.array_equal(y, want) else 'WRONG'}", flush=True)
    comm.barrier()
    print(f"die.py: rank {comm.rank} finished (unexpected): {y[:2]}", flush=True)


if __name__ == "__main__":
    main()
