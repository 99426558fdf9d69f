"""``neuron-mpi-bench`` / ``python -m neuron_mpi.bench``: nccom-test over the emulator.

    neuron-mpirun -n 8 python -m neuron_mpi.bench all_reduce -b 1kb -e 4MB -f 4 \\
        -c random --vs-mpi

Options are nccom-test's (-r -b -e -f -i -n -w -d -c [MODE] --seed --show-algorithm
--custom-replica-groups --report-to-json-file -t), nccl-tests' -o, and ours
(--instance --lnc --nodes --algorithm --vs-mpi --plot). Rank 0 prints one row per
size as it finishes. Exit status: 0, 1 when a checked value is wrong, 2 for a bad
command line or a call the library refuses (one line from rank 0, every rank exits).
"""
from __future__ import annotations

import argparse
import re
import sys
import time

from .. import env
from ..cli import add_topology_arguments
from ..algorithms.registry import add_argument as add_algorithm_argument
from ..errors import NeuronMPIError
from ..model import workload as W
from . import report
from ..vocab import DTYPE_NAMES, REDUCE_OPS, dtype_help
from .sizes import (UsageError, UsageParser, add_size_arguments, output_path, plot_path,
                    replica_groups_arg, sweep)

PROG = "neuron-mpi-bench"
STEP_FACTOR = 4
DTYPE_CHOICES = DTYPE_NAMES
REDOPS = REDUCE_OPS
_STATS = re.compile(r"^(avg|p(\d+(\.\d+)?))$")
CHECK_MODES = ("random", "all_ones")
CHECK_FLAGS = ("-c", "--check")


def _at_least(low: int, what: str):
    """argparse type: an integer >= low; the message says ``what`` is expected."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        return v
    return parse


_positive = _at_least(1, "a positive integer")
_non_negative = _at_least(0, "an integer >= 0")


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog=PROG,
        description="Benchmark a collective on the emulated Neuron topology, as "
                    "nccom-test does on hardware. Run under neuron-mpirun / mpiexec.",
        epilog="Example: neuron-mpirun -n 8 python -m neuron_mpi.bench all_reduce -b 1kb "
               "-e 4MB -f 4 -c random --vs-mpi. Sizes take units (8, 2kb, 1MB, 64M; "
               "1kb = 1024). Exit status: 0 ok, 1 wrong values, 2 usage error.")
    p.add_argument("op", metavar="OP", help=W.ops_help())
    p.add_argument("-r", "--nworkers", type=_positive, metavar="N",
                   help="nccom-test's number of ranks: here the launch's (neuron-mpirun "
                        "-n N); checked against it when given")
    add_size_arguments(p.add_argument_group("sizes"), 1 << 10, 1 << 20, STEP_FACTOR)
    r = p.add_argument_group("runs")
    r.add_argument("-n", "--iters", type=_positive, default=10, metavar="N",
                   help="timed iterations per size (default 10)")
    r.add_argument("-w", "--warmup_iters", type=_non_negative, default=2, metavar="N",
                   help="untimed iterations first (default 2)")
    r.add_argument("-d", "--datatype", default="fp32", metavar="TYPE", help=dtype_help())
    r.add_argument("-o", "--op", dest="redop", default="sum", metavar="OP",
                   help=f"reduction: {', '.join(REDOPS)} or all (default sum)")
    r.add_argument("-c", "--check", metavar="MODE",
                   help="check results on extra iterations: random (the default when -c "
                        "comes alone, as in nccom-test) or all_ones")
    r.add_argument("--seed", type=_non_negative, metavar="N",
                   help="seed of the random check data (default 24301)")
    r.add_argument("-t", "--stats", action="append", metavar="STAT",
                   help="per-size time: avg over iterations, or pNN (e.g. p50, p99) of "
                        "the per-iteration slowest-rank times (default avg); several "
                        "(-t avg p50 p99) add a time:STAT(us) column each, the first "
                        "giving algbw and busbw")
    add_algorithm_argument(r)
    r.add_argument("--show-algorithm", action="store_true",
                   help="add the algorithm column")
    r.add_argument("--custom-replica-groups", metavar="JSON", dest="groups",
                   help="a JSON file, or inline JSON, with a list of lists of ranks: the "
                        "benchmark runs on each rank's group")
    r.add_argument("--vs-mpi", action="store_true",
                   help="also time the native MPI call on the same buffers: adds "
                        "mpi_time(us) and ratio = time / mpi_time")
    o = p.add_argument_group("output")
    o.add_argument("--report-to-json-file", metavar="FILE", dest="json", type=output_path,
                   help="write every row, the command, topology, machine and versions")
    o.add_argument("--plot", metavar="FILE.png", type=plot_path,
                   help="draw busbw against size (needs matplotlib: neuron-mpi[plot])")
    o.add_argument("--link-stats", metavar="FILE", dest="link_stats", type=output_path,
                   help="write every rank's link_stats() (bytes and messages per link "
                        "since init), merged: the input of neuron-mpi topo --heat")
    add_topology_arguments(p, "what the world size needs", " (neuron-mpirun sets them)",
                           ("-N", "--nnodes", "--nodes"))
    return p


def load_groups(text: str) -> list[list[int]]:
    """Replica groups from a JSON file path or inline JSON: a list of equal-size
    lists of ranks."""
    return replica_groups_arg(text, "--custom-replica-groups")


def parse_args(argv):
    """(Options, args) from the command line; UsageError for anything wrong."""
    from .harness import Options

    args = build_parser().parse_args(_stats_words(_check_mode(list(argv))))
    try:
        op = W.canonical_op(args.op)
    except ValueError as e:
        raise UsageError(f"OP: {e}") from None
    f = args.stepfactor
    if f is None and args.stepbytes is None:
        f = STEP_FACTOR
    try:
        sizes = sweep(args.minbytes, args.maxbytes, f, args.stepbytes)
    except ValueError as e:
        raise UsageError(f"sizes: {e}") from None
    from ..kernels import canonical_dtype, dtype_name

    try:
        dtype = dtype_name(canonical_dtype(args.datatype))
    except ValueError as e:
        raise UsageError(f"-d/--datatype: {e}") from None
    redop = args.redop.lower()
    if redop not in REDOPS + ("all",):
        raise UsageError(f"-o/--op: expected one of {', '.join(REDOPS)} or all, got "
                         f"{args.redop!r}")
    check = None if args.check is None else args.check.lower()
    if check is not None and check not in CHECK_MODES:
        raise UsageError(f"-c/--check: expected random or all_ones, got {args.check!r}")
    if args.seed is not None and check != "random":
        raise UsageError("--seed: seeds the random check data; give it with -c random")
    stats = []
    for word in args.stats or ["avg"]:
        m = _STATS.match(word.lower())
        if not m or (m.group(2) and not 0 <= float(m.group(2)) <= 100):
            raise UsageError(f"-t/--stats: expected avg or pNN with NN in 0..100 (p50, "
                             f"p99), got {word!r}")
        if word.lower() not in stats:
            stats.append(word.lower())
    if args.plot and not report.have_matplotlib():
        raise UsageError(report.PLOT_MISSING)
    groups = load_groups(args.groups) if args.groups else None
    redops = REDOPS if redop == "all" else (redop,)
    opts = Options(op=op, sizes=sizes, iters=args.iters, warmup=args.warmup_iters,
                   dtype=dtype, check=check, redops=redops, seed=args.seed,
                   nworkers=args.nworkers,
                   show_redop=redop == "all", stats=stats[0], more_stats=tuple(stats[1:]),
                   show_algorithm=args.show_algorithm, groups=groups, json=args.json,
                   instance=args.instance, lnc=args.lnc, nodes=args.nodes,
                   algorithm=args.algorithm, vs_mpi=args.vs_mpi, plot=args.plot,
                   link_stats=args.link_stats)
    return opts, args


def _check_mode(argv: list) -> list:
    """nccom-test's -c/--check takes its mode optionally: a -c followed by no mode
    (the end, another option, or the operation: ``--check allg``) checks random."""
    out = []
    for i, word in enumerate(argv):
        out.append(word)
        if word in CHECK_FLAGS:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("-") or _is_op(nxt):
                out.append("random")
    return out


def _stats_words(argv: list) -> list:
    """nccom-test's --stats takes several words (--stats avg p50 p99): the words
    after -t/--stats that are statistics become one -t each."""
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        out.append(word)
        i += 1
        if word in ("-t", "--stats") and i < len(argv):
            out.append(argv[i])  # (the first is the option's, whatever it is)
            i += 1
            while i < len(argv) and _STATS.match(argv[i].lower()):
                out += [word, argv[i]]
                i += 1
    return out


def _is_op(word: str) -> bool:
    try:
        W.canonical_op(word)
    except ValueError:
        return False
    return True


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _fail(message: str, comm=None) -> int:
    """The error on one line from rank 0 (or from this process outside a launcher).
    The other ranks wait for rank 0 to have written it (at most 10 s): the launcher
    kills every rank once one has exited with an error."""
    if comm is None or comm.Get_rank() == 0:
        sys.stderr.write(f"{PROG}: error: {message}\n")
        sys.stderr.flush()
    if comm is not None:
        req = comm.Ibarrier()
        deadline = time.monotonic() + 10.0
        while not req.Test() and time.monotonic() < deadline:
            time.sleep(0.005)
    return 2


def run(opts, command, out=None) -> int:
    """Run the benchmark the options describe (collective over MPI.COMM_WORLD)."""
    from . import collectives as C
    from .harness import Bench

    bench = Bench(opts, out)
    coll = C.get(opts.op)
    bench.algorithm_for(coll)  # a forced algorithm that does not apply fails here
    bench.check_memory(coll)  # and a size that cannot fit
    rows = bench.sweep(coll)
    title = (f"{coll.name} {bench.dtype_name}: {bench.topo.instance}, {bench.r} ranks")
    return bench.finish(rows, command, opts.json, opts.plot, title)


def main(argv=None) -> int:
    command = [PROG] + (sys.argv[1:] if argv is None else list(argv))
    argv = sys.argv[1:] if argv is None else list(argv)
    err = None
    try:
        opts, _ = parse_args(argv)
    except UsageError as e:
        err = str(e)
    comm = None
    if env.launcher_rank() is not None:
        # under a launcher every rank leaves with the same verdict: the paths of
        # --report-to-json-file and the like may be seen otherwise on another host
        comm = _world()
        err = next((e for e in comm.allgather(err) if e), None)
    if err is not None:
        return _fail(err, comm)
    try:
        return run(opts, command)
    except (UsageError, NeuronMPIError) as e:
        return _fail(str(e), _world())
    except BrokenPipeError:
        sys.stdout = None
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
