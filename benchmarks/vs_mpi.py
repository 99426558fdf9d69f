"""Time over Open MPI's own call, per operation and size, in one run.

    python benchmarks/vs_mpi.py [-n 64] [-b 8KB] [-e 8MB] [-f 4] [--ops all_reduce,...]
                                [--json FILE] [--timeout SECONDS]

Not run under mpiexec: for each operation it launches
``neuron-mpirun -n N python -m neuron_mpi.bench OP -b .. -e .. -f .. --vs-mpi
--show-algorithm -c random`` (default algorithms, the argument agreement on, results
checked), which times neuron_mpi's call and the native MPI call on the same buffers
in the same job (Allreduce, Allgather, Reduce_scatter_block, Alltoall; permute and
sendrecv against Sendrecv). It prints every row, then per operation the median of
time / MPI over the sizes <= 64 KiB and over the sizes >= 4 MiB, with the number of
wrong results.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from neuron_mpi import catalog as cat
from neuron_mpi import env
from neuron_mpi.model import workload as W

OPS = tuple(op for op in W.OPS if op not in W.V_OPS)
SMALL, LARGE = 64 << 10, 4 << 20


def launcher() -> list[str]:
    exe = Path(sys.executable).parent / "neuron-mpirun"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "neuron_mpi.launch.mpirun"]


def run_op(op: str, a) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = launcher() + ["-n", str(a.ranks), "python", "-m", "neuron_mpi.bench", op,
                            "-b", a.minbytes, "-e", a.maxbytes, "-f", str(a.factor),
                            "-n", str(a.iters), "--vs-mpi", "--show-algorithm",
                            "-c", "random", "--report-to-json-file", out]
        # its own process group: a launch that stalls is killed with its mpiexec and
        # ranks, not only the launcher
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, cwd=d,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # (mpiexec passes it on to its ranks)
            try:
                stdout, stderr = proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
            sys.stderr.write(stdout[-3000:] + stderr[-3000:])
            raise SystemExit(f"vs_mpi: {op} did not finish within --timeout {a.timeout:g} s "
                             "(killed)") from None
        if proc.returncode != 0 or not os.path.exists(out):
            sys.stderr.write(stdout[-3000:] + stderr[-3000:])
            raise SystemExit(f"vs_mpi: {op} failed (exit {proc.returncode})")
        with open(out) as f:
            return json.load(f)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", dest="ranks", type=int, default=64)
    p.add_argument("-b", dest="minbytes", default="8KB")
    p.add_argument("-e", dest="maxbytes", default="8MB")
    p.add_argument("-f", dest="factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help="give up on an operation's launch after this long (default "
                   "1800): a launch that stalls is killed, its output shown")
    a = p.parse_args(argv)
    if not a.timeout > 0:
        p.error(f"--timeout: expected a positive number of seconds, got {a.timeout:g}")
    summary, reports = [], {}
    print(f"# {a.ranks} ranks, {env.instance() or cat.DEFAULT_INSTANCE}; "
          "time and MPI time in us, ratio = time / MPI")
    for op in a.ops.split(","):
        rep = reports[op] = run_op(op, a)
        rows = rep["rows"]
        for r in rows:
            print(f"{op:15s} {r['size']:>10d} {r.get('algorithm') or '':>12s} "
                  f"{r['time_us']:12.1f} {r['mpi_time_us']:12.1f} {r['ratio']:7.2f} "
                  f"wrong={r['wrong']}", flush=True)
        small = [r["ratio"] for r in rows if r["size"] <= SMALL]
        large = [r["ratio"] for r in rows if r["size"] >= LARGE]
        summary.append((op, median(small), median(large), max(r["ratio"] for r in rows),
                        sum(r["wrong"] for r in rows)))
    print("\n| operation | median ratio <= 64 KiB | median ratio >= 4 MiB | worst | wrong |")
    print("|---|---|---|---|---|")
    for op, s, l, w, bad in summary:
        print(f"| {op} | {s:.2f} | {l:.2f} | {w:.2f} | {bad} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "summary": summary, "reports": reports}, f, indent=1)
    return 1 if any(bad for *_, bad in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
