"""Determinism under MPI: for every algorithm that applies to the world, every rank
gets the same bits, repeated calls give the same bits, and those bits are the
one-process replay's (neuron_mpi.replay) of the very schedule the communicator runs.

    mpiexec -n 8 python -m mpi4py tests/fault_programs/determinism.py

Inputs are random (not small integers): sums of bf16/fp16/fp8/fp32 values round, so
any difference in reduction order between ranks or runs would show. Each result is
all-gathered as raw bytes (uint8) with neuron_mpi itself and compared across ranks.
Prints one ``@@ {json}`` line per (op, algorithm, dtype) on rank 0 and a final
``@@ {"summary": ...}``; exit status 0 only if everything matched.
"""
import hashlib
import json
import sys

import ml_dtypes
import numpy as np

import neuron_mpi as nm
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import _APPLIES, schedule_for
from neuron_mpi.errors import AlgorithmError
from neuron_mpi.replay import replay

DTYPES = [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16),
          np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)]
REPEATS = 3


def inputs(n, count, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(count).astype(dtype) for _ in range(n)]


def main() -> int:
    w = nm.init()
    n, r = w.size, w.rank
    view = GroupView(w.topology, range(n))
    problems = []
    digest = hashlib.sha256()
    lines = []
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for algo in _APPLIES[op]:
            try:
                algo = w.algorithm_for(op, algo)
            except AlgorithmError:
                continue
            for di, dt in enumerate(DTYPES):
                count = 5 * n + 3 if op == "all_reduce" else 7 * n
                if op == "all_gather":
                    count = 7
                xs = inputs(n, count, dt, seed=1000 + di)
                if op == "all_reduce":
                    sizes = count
                elif op == "reduce_scatter":
                    sizes = (count // n,) * n
                else:
                    sizes = (count,) * n
                sched = schedule_for(view, op, algo, sizes, False, None)
                oracle = replay(sched, [x.reshape(-1) for x in xs], "sum", dt)[r]
                got = []
                for _ in range(REPEATS):
                    y = getattr(w, op)(xs[r], algorithm=algo, timeout=120)
                    got.append(np.ascontiguousarray(y).reshape(-1).view(np.uint8).copy())
                same_runs = all(g.tobytes() == got[0].tobytes() for g in got)
                same_oracle = got[0].tobytes() == oracle.view(np.uint8).tobytes()
                # every rank's bytes, gathered without pickle
                everyone = w.all_gather(got[0].reshape(1, -1), timeout=120)
                if op == "all_reduce":
                    same_ranks = all(everyone[q].tobytes() == everyone[0].tobytes()
                                     for q in range(n))
                else:  # each rank holds its own block / the full gather: compare to
                    # what the oracle gives every member
                    allo = replay(sched, [x.reshape(-1) for x in xs], "sum", dt)
                    same_ranks = all(everyone[q].tobytes() == allo[q].view(np.uint8).tobytes()
                                     for q in range(n))
                ok = same_runs and same_oracle and same_ranks
                digest.update(everyone.tobytes())
                rec = {"op": op, "algorithm": algo, "dtype": str(dt), "count": count,
                       "same_runs": same_runs, "same_as_replay": same_oracle,
                       "same_across_ranks": same_ranks}
                flags = w.all_gather(np.array([[ok]], np.uint8), timeout=120)
                if not flags.all():
                    problems.append(rec)
                lines.append(rec)
    if r == 0:
        for rec in lines:
            print("@@ " + json.dumps(rec), flush=True)
        print("@@ " + json.dumps({"summary": {"cases": len(lines), "failed": len(problems),
                                              "ranks": n, "digest": digest.hexdigest()}}),
              flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
