"""Every collective, a size sweep, results checked, native MPI beside it.

    neuron-mpirun -n 64 python benchmarks/collectives.py            # trn2.48xlarge
    neuron-mpirun -n 64 python benchmarks/collectives.py -e 4MB -n 5 --results out/
    neuron-mpirun --instance trn1.32xlarge python benchmarks/collectives.py

One MPI job runs the benchmark harness (neuron_mpi.bench) on each operation in
turn: all_reduce, all_gather, reduce_scatter, alltoall, permute, sendrecv,
all_gather_v, reduce_scatter_v, alltoallv. Rank 0 prints each table as it goes and
writes RESULTS/collectives.json (every row, the command, topology, machine,
versions) and, with matplotlib, per operation RESULTS/<op>.png (busbw against size:
this machine, native MPI, and the model's prediction for the real hardware) and
RESULTS/<op>_time.png (time against size: emulated, native MPI, modeled hardware),
and RESULTS/times.png (every operation's time figure as one panel).

The defaults (1KB..1MB by x4, 1 warm-up and 2 timed iterations) keep a 64-rank run on a 2-core
machine to a few minutes; widen with -b/-e/-f/-n. Exit status 1 if any checked
value is wrong.
"""
from __future__ import annotations

import argparse
import os
import sys

from neuron_mpi import env
from neuron_mpi.bench import collectives as C
from neuron_mpi.bench import report
from neuron_mpi.bench.cli import UsageError, parse_args
from neuron_mpi.bench.harness import Bench
from neuron_mpi.errors import NeuronMPIError

PROG = "benchmarks/collectives.py"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(C.COLLECTIVES),
                   help="comma-separated operations (default: all nine)")
    p.add_argument("-b", "--minbytes", default="1KB", help="smallest size (default 1KB)")
    p.add_argument("-e", "--maxbytes", default="1MB", help="largest size (default 1MB)")
    p.add_argument("-f", "--stepfactor", default="4", help="size factor (default 4)")
    p.add_argument("-n", "--iters", default="2", help="timed iterations (default 2)")
    p.add_argument("-w", "--warmup_iters", default="1", help="warm-up iterations (default 1)")
    p.add_argument("-d", "--datatype", default="fp32", help="data type (default fp32)")
    p.add_argument("-o", "--op", dest="redop", default="sum", help="reduction (default sum)")
    p.add_argument("-c", "--check", default="random",
                   help="random, all_ones or none (default random)")
    p.add_argument("-t", "--stats", default="avg", help="avg or pNN (default avg)")
    p.add_argument("--no-mpi", action="store_true", help="skip the native MPI timings")
    p.add_argument("--results", default="results",
                   help="folder for collectives.json and the plots (default ./results)")
    p.add_argument("--instance")
    p.add_argument("--lnc")
    p.add_argument("-N", "--nnodes", "--nodes", dest="nodes")
    return p


def bench_argv(a, op: str) -> list[str]:
    """The neuron-mpi-bench command line this script runs for ``op``."""
    argv = [op, "-b", a.minbytes, "-e", a.maxbytes, "-f", a.stepfactor, "-n", a.iters,
            "-w", a.warmup_iters, "-d", a.datatype, "-o", a.redop, "-t", a.stats,
            "--show-algorithm"]
    if a.check != "none":
        argv += ["-c", a.check]
    if not a.no_mpi:
        argv += ["--vs-mpi"]
    for flag in ("instance", "lnc", "nodes"):
        if getattr(a, flag) is not None:
            argv += [f"--{flag}", str(getattr(a, flag))]
    return argv


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    rank = env.launcher_rank()
    try:
        ops = [C.get(o).name for o in a.ops.split(",") if o.strip()]
        parsed = [parse_args(bench_argv(a, op)) for op in ops]
    except (UsageError, ValueError) as e:
        if rank in (None, 0):
            sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    try:
        bench = Bench(parsed[0][0])
        rows = []
        for opts, _ in parsed:
            bench.opts = opts
            bench.algorithm_for(C.get(opts.op))
            rows += bench.sweep(C.get(opts.op))
            bench.say("")
    except NeuronMPIError as e:
        if rank in (None, 0):
            sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    json_path = os.path.join(a.results, "collectives.json")
    if bench.rank == 0:
        bench.say("# summary: op, largest size, time(us), busbw(GB/s), ratio vs native MPI, "
                  "model busbw(GB/s)")
        for op in ops:
            last = [r for r in rows if r["op"] == op][-1]
            ratio = f"{last['ratio']:.2f}" if last["ratio"] is not None else "N/A"
            bench.say(f"#  {op:>16} {last['size']:>9} {last['time_us']:>11.1f} "
                      f"{last['busbw']:>8.3f} {ratio:>7} {last['model_busbw']:>9.2f}")
        if report.have_matplotlib():
            t = bench.topo
            where = f"{t.instance}, {bench.r} ranks"
            for op in ops:
                mine = [r for r in rows if r["op"] == op]
                report.plot(os.path.join(a.results, f"{op}.png"), mine,
                            f"{op} {bench.dtype_name}: {where}")
                report.plot_times(os.path.join(a.results, f"{op}_time.png"), mine,
                                  f"{op} {bench.dtype_name}: {where}")
            report.plot_times_grid(os.path.join(a.results, "times.png"), rows,
                                   f"time against size, {bench.dtype_name}, {where}: "
                                   "emulated and native MPI on this machine, model for "
                                   "the real hardware")
            bench.say(f"# wrote {2 * len(ops) + 1} plots to {a.results}/")
        else:
            bench.say("# matplotlib not installed: no plots (pip install 'neuron-mpi[plot]')")
    return bench.finish(rows, [PROG] + argv, json_path, options=vars(a))


if __name__ == "__main__":
    sys.exit(main())
