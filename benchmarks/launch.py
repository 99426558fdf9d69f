"""Launch to first collective: neuron_mpi against a bare mpi4py + numba launch.

    python benchmarks/launch.py [-n 64] [--repeat 2]

Not run under mpiexec: it launches, ``--repeat`` times each, alternating,

* bare: ``import mpi4py.MPI, numba``, then ``MPI_Barrier``;
* neuron_mpi: ``import neuron_mpi``, ``init()``, then a neuron_mpi barrier;

through the same ``neuron-mpirun`` (numba's cache warmed once before, as the
launcher does), and reports the wall time from the launch to the end of the first
collective (the slowest rank) and the ratio neuron_mpi / bare (medians).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BARE = ("import time, mpi4py.MPI as M, numba; M.COMM_WORLD.Barrier(); "
        "print('@@', time.time(), flush=True)")
OURS = ("import time, neuron_mpi as nm; c = nm.init(); c.barrier(); "
        "print('@@', time.time(), flush=True)")


def launch(n: int, code: str) -> float:
    runner = [str(Path(sys.executable).parent / "neuron-mpirun"), "--no-warm", "-n", str(n),
              "python", "-c", code]
    t0 = time.time()
    out = subprocess.run(runner, capture_output=True, text=True, check=True).stdout
    ends = [float(line.split()[1]) for line in out.splitlines() if line.startswith("@@")]
    assert len(ends) == n, out
    return max(ends) - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=64)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args(argv)
    from neuron_mpi.launch.mpirun import default_numba_cache

    os.environ.setdefault("NUMBA_CACHE_DIR", default_numba_cache())
    subprocess.run([sys.executable, "-c", "import neuron_mpi.kernels as k; k.warm()"],
                   check=True)
    bare, ours = [], []
    for _ in range(a.repeat):
        bare.append(launch(a.n, BARE))
        ours.append(launch(a.n, OURS))
    b, o = statistics.median(bare), statistics.median(ours)
    print(f"# {a.n} ranks: launch to the end of the first collective (median of {a.repeat})")
    print(f"  bare mpi4py + numba : {b:6.2f} s  {['%.2f' % t for t in bare]}")
    print(f"  neuron_mpi          : {o:6.2f} s  {['%.2f' % t for t in ours]}")
    print(f"  ratio: {o / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
