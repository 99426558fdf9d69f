"""``neuron-mpi-model``: an nccom-test-style table of modeled rows (no MPI).

    neuron-mpi-model [--instance X] [--lnc L] [-r/--nworkers R] [-N/--nnodes/--nodes N]
                     [-b MIN] [-e MAX] [-f F | -i STEP] [-d TYPE] [-o OP]
                     [--algorithm A] [--custom-replica-groups JSON]
                     [--custom-src-target-pairs JSON] [--variable-size-op-metadata JSON]
                     [--runtime GEN] [--plot F.png] [--report-to-json-file F]
                     [--params] OP
"""
from __future__ import annotations

import argparse
import sys
import time

from ..cli import add_topology_arguments
from ..algorithms.registry import add_argument as add_algorithm_argument
from ..errors import NeuronMPIError
from ..bench import report
from ..bench.sizes import (UsageError, UsageParser, add_size_arguments, json_arg, json_list,
                           output_path, plot_path, replica_groups_arg, sweep)
from ..vocab import REDUCE_OPS, dtype_help
from .workload import ops_help

PROG = "neuron-mpi-model"


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(prog=PROG, description="Modeled time and bandwidth of a collective on real "
                "AWS Neuron hardware: the schedule the emulator runs, priced on the "
                "catalog's links (docs/model.md). Runs no MPI.")
    p.add_argument("op", metavar="OP", help=ops_help())
    add_topology_arguments(p, "1", "", ("-N", "--nnodes", "--nodes"))
    p.add_argument("-r", "--nworkers", type=int, metavar="R", dest="ranks",
                   help="ranks (default: every core of every node); fewer than a node: "
                        "the first R cores")
    add_size_arguments(p, 8, 1 << 30, 2)
    p.add_argument("-d", "--datatype", default="fp32", metavar="TYPE", help=dtype_help())
    p.add_argument("-o", "--op", dest="redop", default="sum", choices=REDUCE_OPS,
                   help="reduction (default sum); avg adds the division")
    add_algorithm_argument(p)
    p.add_argument("--custom-replica-groups", metavar="JSON", dest="groups",
                   help="replica groups that run at the same time, priced together: a "
                        "JSON file or text, nccom-test's {\"replica_groups\": [[[0, 1], "
                        "[2, 3]]]} or a plain [[0, 1], [2, 3]] (world ranks)")
    p.add_argument("--custom-src-target-pairs", metavar="JSON", dest="pairs",
                   help="permute / sendrecv pairs (group indices): a JSON file or text, "
                        "nccom-test's {\"src_target_pairs\": [[[0, 1], [1, 0]]]} or "
                        "[[0, 1], [1, 0]]")
    p.add_argument("--variable-size-op-metadata", "--send-counts", metavar="JSON",
                   dest="counts",
                   help="alltoallv / all_gather_v / reduce_scatter_v counts: a JSON file "
                        "or text, nccom-test's {\"metadata\": [{\"send_counts\": "
                        "[...]}, ...]} (one entry for every rank, or one per rank) or a "
                        "plain list; the counts set the size (-b/-e are ignored)")
    p.add_argument("--runtime", metavar="GEN",
                   help="runtime generation whose fixed costs apply: 2023, 2025 or 2026 "
                        "(default 2026; docs/model.md)")
    p.add_argument("--plot", metavar="FILE.png", type=plot_path,
                   help="draw busbw against size")
    p.add_argument("--report-to-json-file", metavar="FILE", dest="json", type=output_path,
                   help="write the rows and the parameters as JSON")
    p.add_argument("--trace", metavar="FILE.json", type=output_path,
                   help="write the modeled run as a timeline (trace-event JSON for "
                        "ui.perfetto.dev): one call per size, back to back; "
                        "docs/trace.md")
    p.add_argument("--params", action="store_true",
                   help="print the link figures the model uses, with their sources")
    return p


def extras(args) -> dict:
    """predict's groups / pairs / send_counts from the command line."""
    kw = {}
    if args.groups:
        kw["groups"] = replica_groups_arg(args.groups, "--custom-replica-groups")
    if args.pairs:
        kw["pairs"] = json_list(json_arg(args.pairs, "--custom-src-target-pairs"),
                                "src_target_pairs", "--custom-src-target-pairs")
    if args.counts:
        data = json_arg(args.counts, "--variable-size-op-metadata")
        if isinstance(data, dict):
            meta = json_list(data, "metadata", "--variable-size-op-metadata")
            try:
                rows = [m["send_counts"] for m in meta]
            except (TypeError, KeyError):
                raise UsageError("--variable-size-op-metadata: every metadata entry needs "
                                 "send_counts") from None
            data = rows[0] if len(rows) == 1 else rows
        kw["send_counts"] = data
    if args.runtime:
        kw["runtime"] = args.runtime
    return kw


def rows_for(args) -> list[dict]:
    from ..kernels import canonical_dtype, dtype_name
    from .predict import group_view, predict
    from .workload import canonical_op

    op = canonical_op(args.op)
    try:
        name = dtype_name(canonical_dtype(args.datatype))
    except ValueError as e:
        raise UsageError(f"-d/--datatype: {e}") from None
    sizes = sweep(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    kw = extras(args)
    if "send_counts" in kw:
        sizes = sizes[:1]  # the counts set the size
    if "groups" in kw:
        from ..topology import resolve

        if args.ranks is not None:
            raise UsageError("--custom-replica-groups: give the groups or -r, not both")
        inst, lnc, nodes = resolve(args.instance, args.lnc, args.nodes)
        view = group_view(inst, lnc, nodes)
        where = dict(instance=inst, lnc=lnc, nodes=nodes)
    else:
        view = group_view(args.instance, args.lnc, args.nodes, args.ranks)
        where = dict(view=view)
    rows = []
    for s in sizes:
        p = predict(op, s, algorithm=args.algorithm, dtype=name, op_reduce=args.redop,
                    **where, **kw)
        rows.append({"op": op, "redop": args.redop, "size": p.size, "count": p.count,
                     "type": name, "time_us": p.time_us, "algbw": p.algbw,
                     "busbw": p.busbw, "algorithm": p.algorithm, "ranks": p.ranks,
                     "groups": len(kw.get("groups", ())) or 1,
                     "breakdown": p.cost.as_dict()})
    return rows, view


def _refused(args, view) -> list:
    """The groups priced that the instance's group rules refuse (neuron_mpi.groups):
    the model prices them all the same, with a warning."""
    from ..groups import verdict

    if args.groups:
        vs = [verdict(view.topo, g) for g in extras(args)["groups"]]
    else:  # (the job's ranks: -r)
        vs = [verdict(view.topo, view.ranks, name="world")]
    return [v for v in vs if not v.accepted]


def write_trace(args, view, rows) -> None:
    """The modeled timeline of every row (model/timeline.py)."""
    from .. import timeline as tl
    from ..kernels import canonical_dtype
    from .predict import _runtime_costs, schedule_of
    from .timeline import build
    from .workload import workload

    itemsize = canonical_dtype(args.datatype).itemsize
    calls = []
    for r in rows:
        ring = view.rings[0] if r["op"] == "permute" else None
        wl = workload(r["op"], r["size"], view.size, itemsize, ring)
        algo, sched = schedule_of(view, wl, args.algorithm, args.redop)
        floor_us, step_us = _runtime_costs(view, r["op"], getattr(args, "runtime", None))
        calls.append((r["op"], sched, itemsize, {"algorithm": algo, "bytes": r["size"],
                                                 "dtype": r["type"],
                                                 "time_us": r["time_us"],
                                                 "floor_us": floor_us, "step_us": step_us}))
    doc = build(view, calls)
    problems = tl.check(doc)
    if problems:  # a bug of ours, not of the command line
        raise RuntimeError("modeled timeline not valid: " + "; ".join(problems[:5]))
    tl.write(doc, args.trace)
    o = doc["otherData"]
    sys.stdout.write(f"# trace: {args.trace}: {o['calls']} call(s), {o['steps']} rank step "
                     f"slices, {o['flows']} transfers, {o['time_us']:.2f} us modeled\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
        from .workload import canonical_op, reduces

        try:
            op = canonical_op(args.op)
        except ValueError as e:
            raise UsageError(str(e)) from None
        try:
            sweep(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.plot and not report.have_matplotlib():
            raise UsageError(report.PLOT_MISSING)
        t0 = time.perf_counter()
        rows, view = rows_for(args)
        topo = view.topo
        show_redop = reduces(op)
        out = sys.stdout
        ng = rows[0]["groups"] if rows else 1
        who = (f"{ng} concurrent groups of {rows[0]['ranks']} ranks" if ng > 1
               else f"{rows[0]['ranks'] if rows else view.size} ranks")
        out.write(f"# neuron-mpi-model {op}: modeled on {topo.instance} LNC={topo.lnc} "
                  f"x {topo.nodes} node(s), {who}; a prediction for the real "
                  "hardware (docs/model.md)\n")
        refused = _refused(args, view)
        for v in refused[:4]:
            out.write(f"# warning: the runtime would refuse this group: {v.message} "
                      f"[{v.rule}]\n")
        if len(refused) > 4:
            out.write(f"# warning: ... and {len(refused) - 4} more groups refused\n")
        cols = report.model_columns(show_redop)
        out.write(report.header_line(cols) + "\n")
        for r in rows:
            out.write(report.row_line(cols, r) + "\n")
        out.write(f"# Avg bus bandwidth : {report.avg_busbw(rows):.4f}\n")
        out.write(f"# modeled in {time.perf_counter() - t0:.2f} s\n")
        if args.params:
            from .predict import parameters

            from .params import all_params

            for p in parameters(topo.instance):
                out.write(f"# {p['link']:>12}: {p['bandwidth_GBps']:9.2f} GB/s "
                          f"{p['latency_us']:5.2f} us  {p['source']}\n")
            for q in all_params():
                out.write(f"# {q.name}: {q.value:g} {q.unit}  {q.source}\n")
        out.flush()
        if args.json:
            from .predict import parameters

            rep = {"schema": "neuron-mpi-model/1", "command": [PROG] + argv,
                   "topology": report.topology_info(topo, view.ranks),
                   "parameters": parameters(topo.instance), "rows": rows,
                   "results": report.nccom_results(rows),
                   "refused_groups": [{"ranks": list(v.group), "message": v.message,
                                       "rule": v.rule} for v in refused],
                   "avg_busbw": report.avg_busbw(rows)}
            report.write_json(args.json, rep)
        if args.trace:
            write_trace(args, view, rows)
        if args.plot:
            pts = [{"op": op, "redop": r["redop"], "size": r["size"],
                    "model_busbw": r["busbw"]} for r in rows]
            report.plot(args.plot, pts, f"{op} model: {topo.instance}, {view.size} ranks")
        return 0
    except UsageError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except (NeuronMPIError, ValueError) as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except BrokenPipeError:
        sys.stdout = None
        return 0
    except OSError as e:  # a report, plot or trace that could not be written
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
