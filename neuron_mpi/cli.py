"""The ``neuron-mpi`` command: subcommands over the library (``topo`` for now).

To add a subcommand, write ``_configure(parser)`` and ``_run(args) -> int`` and
register them in ``COMMANDS``::

    COMMANDS["bench"] = Command("run a collective benchmark", _bench_args, _bench_run)

Errors the library raises (NeuronMPIError) become one line on stderr,
``neuron-mpi: error: ...``, and exit status 2; so do bad command-line arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Callable

from . import catalog as cat
from .errors import NeuronMPIError

PROG = "neuron-mpi"


# the usage-error parser the bench and model CLIs share: a usage error is one line
# (no usage dump), exit status 2, no SystemExit
from .bench.sizes import (UsageError, UsageParser as _Parser, human,  # noqa: E402
                          output_path, replica_groups_arg, size_arg)


@dataclass(frozen=True)
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# --- shared arguments --------------------------------------------------------------
def add_topology_arguments(p: argparse.ArgumentParser, nodes_default: str = "1",
                           note: str = "", nodes_flags=("--nodes",)) -> None:
    """--instance, --lnc, --nodes (the topology group of neuron-mpi, neuron-mpirun,
    the benchmark and the model); left None when not given so that
    neuron_mpi.topology.resolve applies the env (neuron_mpi/env.py) and defaults."""
    g = p.add_argument_group(
        "topology", "Unset options come from env NEURON_MPI_INSTANCE, "
        f"NEURON_LOGICAL_NC_CONFIG, NEURON_MPI_NODES, else {cat.DEFAULT_INSTANCE} at its "
        f"default LNC{note}.")
    g.add_argument("--instance", metavar="NAME",
                   help="instance type, one of: " + ", ".join(cat.CATALOG))
    g.add_argument("--lnc", type=int, metavar="L",
                   help="logical NeuronCore size: 1 or 2 physical cores per rank "
                        "(trn2 only; trn1 and inf2 use 1)")
    g.add_argument(*nodes_flags, type=int, metavar="N", dest="nodes",
                   help=f"instances joined by EFA, where the instance has EFA (default "
                        f"{nodes_default})")


def topology_from_args(args: argparse.Namespace):
    from .topology import resolve, topology

    instance, lnc, nodes = resolve(args.instance, args.lnc, args.nodes)
    return topology(instance, lnc, nodes, getattr(args, "ranks", None))


# --- topo --------------------------------------------------------------------------
def _topo_configure(p: argparse.ArgumentParser) -> None:
    add_topology_arguments(p)
    p.add_argument("-n", "--ranks", type=int, metavar="R",
                   help="world size, if smaller than the instance (it occupies the first "
                        "chips); default: every rank of every node")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: a picture for the terminal (default); json: "
                        "Topology.to_json() (ranks, links, rings)")
    p.add_argument("--png", metavar="FILE.png",
                   help="draw the chips and links to a PNG (needs matplotlib: "
                        "neuron-mpi[plot])")
    p.add_argument("--heat", metavar="STATS.json",
                   help="with --png: colour and label each link by the bytes it carried, "
                        "from a merged link-stats file (neuron-mpi-bench --link-stats); "
                        "the topology is the file's")


def _topo_run(args: argparse.Namespace) -> int:
    if args.heat and not args.png:
        raise UsageError("--heat: needs --png FILE.png")
    if args.png:
        return _topo_png(args)
    topo = topology_from_args(args)
    if args.format == "json":
        sys.stdout.write(json.dumps(topo.to_json(), indent=1) + "\n")
    else:
        from .render import render_text

        sys.stdout.write(render_text(topo))
    return 0


def _topo_png(args: argparse.Namespace) -> int:
    from .bench.report import PLOT_MISSING, have_matplotlib

    if not have_matplotlib():
        raise UsageError(f"--png: {PLOT_MISSING}")
    traffic = None
    if args.heat:
        from . import linkstats
        from .topology import Topology

        doc = linkstats.load(args.heat)
        t = doc["topology"]
        for opt, key in (("instance", "instance"), ("lnc", "lnc"), ("nodes", "nodes"),
                         ("ranks", "ranks")):
            given = getattr(args, opt, None)
            if given is not None and given != t[key]:
                raise UsageError(f"--{opt}: {given} differs from the --heat file's "
                                 f"{key} {t[key]}")
        topo = Topology(t["instance"], t["lnc"], t["nodes"], t["ranks"])
        traffic = linkstats.chip_traffic(topo, doc["links"])
    else:
        topo = topology_from_args(args)
    from .picture import draw

    draw(topo, args.png, traffic)
    what = "heat map" if traffic is not None else "topology"
    total = f", {sum(traffic.values())} bytes over {sum(1 for v in traffic.values() if v)} " \
            "directed links" if traffic is not None else ""
    sys.stdout.write(f"{args.png}: {what} of {topo.instance} LNC={topo.lnc}, "
                     f"{topo.nodes} node(s), {topo.size} ranks{total}\n")
    return 0


# --- trace -------------------------------------------------------------------------
def _trace_configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR",
                   help="the folder of trace-rank*.json files a traced run wrote "
                        "(NEURON_MPI_TRACE=DIR or neuron_mpi.trace(DIR))")
    p.add_argument("-o", "--output", required=True, metavar="FILE.json", type=output_path,
                   help="the merged timeline (Chrome trace-event JSON: open it in "
                        "ui.perfetto.dev or chrome://tracing)")


def _trace_run(args: argparse.Namespace) -> int:
    from . import timeline

    doc = timeline.merge(args.dir)
    problems = timeline.check(doc)
    if problems:
        raise UsageError("the merged timeline is not valid: " + "; ".join(problems[:5]))
    timeline.write(doc, args.output)
    o = doc["otherData"]
    sys.stdout.write(f"{args.output}: {o['ranks']} ranks on {o['instance']} LNC={o['lnc']} x "
                     f"{o['nodes']} node(s): {o['calls']} call slices, {o['steps']} step "
                     f"slices, {o['flows']} transfers\n")
    return 0


# --- groups ------------------------------------------------------------------------
def _groups_configure(p: argparse.ArgumentParser) -> None:
    add_topology_arguments(p)
    g = p.add_argument_group("layout (one of --tp or --replica-groups)")
    g.add_argument("--tp", type=int, metavar="T", help="tensor-parallel size: TP x DP x PP "
                   "groups laid out as neuronx-distributed does")
    g.add_argument("--pp", type=int, metavar="P", help="pipeline-parallel size (default 1)")
    g.add_argument("--dp", type=int, metavar="D",
                   help="data-parallel size (default: the ranks / (tp x pp))")
    g.add_argument("--replica-groups", metavar="JSON", dest="replica_groups",
                   help="a JSON file, or inline JSON, with a list of lists of world ranks")
    p.add_argument("--size", type=size_arg, default=64 << 20, metavar="SIZE",
                   help="buffer for the modeled all-reduce and all-gather times (default "
                        "64MB; 1kb = 1024)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json (LayoutReport.as_dict())")


def _groups_run(args: argparse.Namespace) -> int:
    from .layout import check_layout, format_text

    if (args.tp is None) == (args.replica_groups is None):
        raise UsageError("give exactly one of --tp or --replica-groups (see "
                         f"'{PROG} groups --help')")
    if args.tp is None and (args.pp is not None or args.dp is not None):
        raise UsageError("--pp and --dp go with --tp, not with --replica-groups")
    groups = None if args.replica_groups is None else \
        replica_groups_arg(args.replica_groups, "--replica-groups")
    from .topology import resolve

    instance, lnc, nodes = resolve(args.instance, args.lnc, args.nodes)
    rep = check_layout(instance, lnc, nodes, tp=args.tp, pp=1 if args.pp is None else args.pp,
                       dp=args.dp, replica_groups=groups, size=args.size)
    if args.format == "json":
        sys.stdout.write(json.dumps(rep.as_dict(), indent=1) + "\n")
    else:
        sys.stdout.write(format_text(rep, human(args.size)))
    return 0 if rep.accepted else 1


COMMANDS: dict[str, Command] = {
    "topo": Command("show the ranks, chips, links and rings of an instance topology",
                    _topo_configure, _topo_run),
    "trace": Command("merge the per-rank timelines of a traced run into one Perfetto "
                     "(trace-event JSON) file", _trace_configure, _trace_run),


    "groups": Command("check replica groups (a TP x DP x PP layout or explicit groups) "
                      "against the hardware's rules and model their collectives",
                      _groups_configure, _groups_run),
}


# --- entry point -------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog=PROG,
        description="AWS Neuron collective communication, emulated over MPI.",
        epilog=f"Run '{PROG} COMMAND --help' for a command's options. "
               "Launch MPI programs with neuron-mpirun.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        sp = sub.add_parser(name, help=cmd.help, description=cmd.help[:1].upper() + cmd.help[1:])
        cmd.configure(sp)
        sp.set_defaults(_run=cmd.run)
    return parser


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2


def main(argv=None) -> int:
    """Parse argv (default sys.argv[1:]), run the subcommand, return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "_run", None) is None:
            parser.print_help(sys.stderr)
            return 2
        return args._run(args)
    except UsageError as e:
        return _fail(str(e))
    except NeuronMPIError as e:
        return _fail(str(e))
    except BrokenPipeError:  # e.g. `neuron-mpi topo | head`
        try:
            sys.stdout = None  # no flush error at exit
        finally:
            return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
