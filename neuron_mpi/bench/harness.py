"""The benchmark harness: one loop for every operation (nccl-tests' ``TimeTest``).

For each size, on every rank, in lock step:

1. build this rank's buffers (``collectives.make_case``);
2. ``warmup`` untimed runs;
3. ``iters`` timed runs, each after a quiesce (below), each timed on its own;
4. with ``check``: one more run into a result buffer filled with 0xA5 bytes,
   compared with the result this rank computes itself (``bench.data``);
5. with ``vs_mpi``: the native MPI twin on the same buffers, timed the same way;
6. the per-iteration times are max-reduced over the ranks (the slowest rank's
   time, as nccl-tests reports), then averaged or the chosen percentile taken.

Quiesce: a neuron_mpi collective may be routed through ranks outside it, which
forward only while they are inside a neuron_mpi call. So a rank never blocks in a
native MPI call while others might still need it: between phases every rank waits
on a non-blocking ``MPI_Ibarrier`` while its neuron_mpi engine keeps forwarding.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from .. import env
from ..model import predict_workload, price_record
from . import collectives as C
from . import data, report
from .sizes import human

CORRUPT_ENV = "NEURON_MPI_BENCH_CORRUPT"
SLOW_BYTES = 1 << 20  # a "# running size" line before each size from here up


@dataclass
class Options:
    op: str = "all_reduce"  # canonical op name
    sizes: list = field(default_factory=lambda: [1 << 10])
    iters: int = 10
    warmup: int = 2
    dtype: str = "fp32"
    check: str | None = None  # "random" | "all_ones" | None
    redops: tuple = ("sum",)
    show_redop: bool = False
    stats: str = "avg"  # "avg" | "pNN": time(us), algbw and busbw
    more_stats: tuple = ()  # more statistics, a time:STAT(us) column each
    show_algorithm: bool = False
    groups: list | None = None  # replica groups (world ranks)
    json: str | None = None
    instance: str | None = None
    lnc: int | None = None
    nodes: int | None = None
    algorithm: str | None = None
    vs_mpi: bool = False
    plot: str | None = None
    link_stats: str | None = None  # merged link_stats() of every rank, written at the end
    seed: int | None = None  # of the random check data (None: data.SEED)
    nworkers: int | None = None  # nccom-test's -r: the world size, checked

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def statistic(values, stats: str) -> float:
    """avg, or pNN (the NN-th percentile) of ``values``."""
    vals = np.asarray(values, np.float64)
    if vals.size == 0:
        return 0.0
    if stats == "avg":
        return float(vals.mean())
    return float(np.percentile(vals, float(stats[1:])))


def _progress_until(comm, reqs) -> None:
    """Wait for mpi4py requests while this rank's neuron_mpi engine forwards."""
    comm.wait_mpi(reqs)


class Bench:
    """Communicators and settings for a run; ``sweep`` runs one operation."""

    def __init__(self, opts: Options, out=None):
        from mpi4py import MPI

        import neuron_mpi as nm
        from ..algorithms.group import GroupView
        from ..kernels import canonical_dtype, dtype_name

        self.opts = opts
        self.out = out if out is not None else sys.stdout
        self.MPI = MPI
        self.mpi_world = MPI.COMM_WORLD
        if opts.nworkers is not None and opts.nworkers != self.mpi_world.size:
            from .sizes import UsageError

            raise UsageError(f"-r/--nworkers: {opts.nworkers} ranks asked for, but the "
                             f"launch has {self.mpi_world.size} (neuron-mpirun -n "
                             f"{opts.nworkers} ...)")
        self.world = nm.init(opts.instance, opts.lnc, opts.nodes)
        self.rank = self.world.rank
        self.dtype = canonical_dtype(opts.dtype)
        self.dtype_name = dtype_name(self.dtype)
        topo = self.world.topology
        self.topo = topo
        if opts.groups:
            self.comm = self.world.split(opts.groups)
            color = next((i for i, g in enumerate(opts.groups) if self.rank in g),
                         MPI.UNDEFINED)
            key = opts.groups[color].index(self.rank) if color != MPI.UNDEFINED else 0
            self.mpi = self.mpi_world.Split(color, key)
            mine = opts.groups[color] if color != MPI.UNDEFINED else opts.groups[0]
            self.group_ranks = list(mine)
        else:
            self.comm = self.world
            self.mpi = self.mpi_world
            self.group_ranks = list(range(self.world.size))
        self.r = len(self.group_ranks)
        self.view = GroupView(topo, self.group_ranks)
        self.mpi_library = MPI.Get_library_version().strip().strip("\x00").strip()

    # --- helpers ----------------------------------------------------------------------
    def say(self, line: str) -> None:
        if self.rank == 0:
            self.out.write(line + "\n")
            self.out.flush()

    def quiesce(self) -> None:
        _progress_until(self.world, [self.mpi_world.Ibarrier()])

    def _allmax(self, values) -> np.ndarray:
        a = np.ascontiguousarray(values, np.float64)
        res = np.empty_like(a)
        self.mpi_world.Allreduce(a, res, op=self.MPI.MAX)
        return res

    def _allsum(self, v: int) -> int:
        res = np.zeros(1, np.int64)
        self.mpi_world.Allreduce(np.array([v], np.int64), res, op=self.MPI.SUM)
        return int(res[0])

    def algorithm_for(self, coll: C.Collective, nbytes: int | None = None) -> str:
        """What the group communicator runs for a buffer of ``nbytes`` (the same
        choice, made on its view)."""
        from ..algorithms.select import choose

        algorithm = self.opts.algorithm
        if coll.name == "sendrecv":
            from ..model.predict import check_sendrecv_algorithm

            check_sendrecv_algorithm(algorithm)
            algorithm = None
        return choose(coll.sched_op, self.view, algorithm, nbytes)

    def columns(self):
        o = self.opts
        return report.bench_columns(o.show_redop, o.show_algorithm, o.vs_mpi,
                                    (o.stats,) + tuple(o.more_stats))

    def preamble(self, coll: C.Collective) -> None:
        o, t = self.opts, self.topo
        groups = len(o.groups) if o.groups else 1
        self.say(f"# neuron-mpi-bench {coll.name} on {t.instance} LNC={t.lnc} x {t.nodes} "
                 f"node(s): {self.world.size} ranks, groups of {self.r} ({groups} group"
                 f"{'s' if groups > 1 else ''})")
        self.say(f"# type {self.dtype_name}, redop {','.join(o.redops) if coll.reduces else 'none'}"
                 f", iters {o.iters}, warmup {o.warmup}, check {o.check or 'off'}, "
                 f"stats {' '.join((o.stats,) + tuple(o.more_stats))}, "
                 f"algorithm {o.algorithm or 'default (by size)'}")
        self.say("# time: the slowest rank per iteration on this machine; model_*: "
                 "predictions for the real hardware (neuron_mpi.model), not this machine")
        if o.vs_mpi:
            lib = self.mpi_library.split(",")[0].strip()
            self.say(f"# mpi_time: native MPI {coll.mpi_name} on the same buffers in the "
                     f"same run ({lib}); ratio = time / mpi_time")

    def check_memory(self, coll: C.Collective) -> None:
        """Refuse, on every rank before any data moves, a sweep whose largest size
        cannot fit: a rank holds its input, its result and the native MPI result
        (make_case), and with a check the expected result too; the ranks of a host
        share its memory."""
        import os

        from .sizes import UsageError

        need = 0
        if self.comm is not None and self.opts.sizes:
            big = max(self.opts.sizes)
            ring = self.view.rings[0] if coll.name == "permute" else None
            wl = coll.workload(big, self.r, self.dtype.itemsize, ring)
            me = self.comm.rank
            outs = 3 if self.opts.check else 2
            need = (wl.in_elems(me) + outs * wl.out_elems(me)) * self.dtype.itemsize
        host = self.mpi_world.Split_type(self.MPI.COMM_TYPE_SHARED)
        try:
            on_host = host.allreduce(need)
            ranks = host.size
        finally:
            host.Free()
        try:
            mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):  # (no figure: nothing to check against)
            mem = 0
        short = int(bool(mem) and on_host > mem)
        if self.mpi_world.allreduce(short, op=self.MPI.MAX):
            gib = 1 << 30
            where = (f"{on_host / gib:.1f} GiB for the {ranks} ranks of this host, which "
                     f"has {mem / gib:.1f} GiB" if short else "more than a host of the job has")
            raise UsageError(f"-e/--maxbytes: {human(max(self.opts.sizes))} needs {where} "
                             "(each rank's input, result and native MPI result, and with -c "
                             "the expected result)")

    # --- one size ---------------------------------------------------------------------
    def run_size(self, coll: C.Collective, nbytes: int, redop: str = "sum") -> dict:
        """Every rank calls it; every rank gets the row (model columns on rank 0)."""
        o = self.opts
        ring = self.view.rings[0] if coll.name == "permute" else None
        wl = coll.workload(nbytes, self.r, self.dtype.itemsize, ring)
        member = self.comm is not None
        case = None
        if member:
            case = C.make_case(wl, self.comm.rank, self.dtype, redop if coll.reduces else
                               "sum", o.check or "all_ones", comm=self.comm, mpi=self.mpi,
                               algorithm=o.algorithm,
                               seed=data.SEED if o.seed is None else o.seed)
            for _ in range(o.warmup):
                coll.run(case)
        times = np.zeros(o.iters)
        for i in range(o.iters):
            self.quiesce()
            if member:
                t0 = time.perf_counter()
                coll.run(case)
                times[i] = time.perf_counter() - t0
        wrong = 0
        if o.check:
            self.quiesce()
            if member:
                data.sentinel_fill(case.out)
                coll.run(case)
                if self.rank == 0 and env.bench_corrupt():
                    flat = case.out.reshape(-1).view(np.uint8)
                    flat[: case.dtype.itemsize] ^= 0xFF
                wrong = data.count_wrong(case.out, coll.expected(case))
        self.quiesce()
        mpi_times = None
        native = o.vs_mpi and coll.has_native(self.dtype)
        if native:
            mpi_times = np.zeros(o.iters)
            if member:
                for _ in range(max(1, o.warmup)):
                    coll.native(case)
            for i in range(o.iters):
                self.mpi_world.Barrier()
                if member:
                    t0 = time.perf_counter()
                    coll.native(case)
                    mpi_times[i] = time.perf_counter() - t0
        per_iter = self._allmax(times)
        wrong = self._allsum(wrong) if o.check else None
        row = {"op": coll.name, "redop": redop if coll.reduces else "none",
               "size": wl.size, "count": wl.elems, "type": self.dtype_name,
               "ranks": self.r, "iters": o.iters, "stats": o.stats,
               "time_us": statistic(per_iter, o.stats) * 1e6,
               **{f"time:{s}": statistic(per_iter, s) * 1e6 for s in o.more_stats},
               "iteration_times_us": [float(t * 1e6) for t in per_iter],
               "algorithm": self.algorithm_for(coll, wl.size), "wrong": wrong,
               "mpi_time_us": None, "mpi_busbw": None, "ratio": None}
        factor = coll.bus_factor(self.r)
        row["algbw"] = wl.size / (row["time_us"] * 1e3) if row["time_us"] > 0 else 0.0
        row["busbw"] = row["algbw"] * factor
        if native:
            mt = statistic(self._allmax(mpi_times), o.stats) * 1e6
            row["mpi_time_us"] = mt
            row["mpi_busbw"] = wl.size / (mt * 1e3) * factor if mt > 0 else None
            row["ratio"] = row["time_us"] / mt if mt > 0 else None
        row["model_time_us"] = row["model_busbw"] = None
        if self.rank == 0:
            p = self._model(coll, wl, redop, case)
            row["model_time_us"] = p.time_us
            row["model_busbw"] = p.busbw
        return row

    def _model(self, coll, wl, redop, case):
        """The model's price of what this row ran: the schedule the communicator
        recorded for its last call (``Communicator.last_call``). All-to-all-v is the
        exception: a member's schedule holds only its own row and column of the
        count matrix, so the recorded algorithm is priced on the whole matrix.
        sendrecv runs point-to-point sends, priced as such (predict_workload)."""
        rec = getattr(self.comm, "last_call", None) if case is not None else None
        if rec is None or coll.name == "sendrecv" or rec.op == "all_to_all_v":
            algo = rec.algorithm if rec is not None and coll.name != "sendrecv" else \
                self.opts.algorithm
            return predict_workload(self.view, wl, algo, self.dtype_name, redop)
        return price_record(rec, self.view, wl, self.dtype_name)

    # --- a sweep ------------------------------------------------------------------------
    def sweep(self, coll: C.Collective, header: bool = True) -> list[dict]:
        """Every size (and redop) of the options, one printed row as each finishes."""
        cols = self.columns()
        if header:
            self.preamble(coll)
            self.say(report.header_line(cols))
        rows = []
        redops = self.opts.redops if coll.reduces else ("none",)
        # a size rounds to whole elements per rank (never below one): sizes that
        # round to a row already run are not run again
        ring = self.view.rings[0] if coll.name == "permute" else None
        sizes = list(dict.fromkeys(
            coll.workload(s, self.r, self.dtype.itemsize, ring).size for s in self.opts.sizes))
        for redop in redops:
            for s in sizes:
                if s >= SLOW_BYTES:
                    self.say(f"# running size {s} ({human(s)}) on {self.r} ranks ...")
                row = self.run_size(coll, s, "sum" if redop == "none" else redop)
                rows.append(row)
                self.say(report.row_line(cols, row))
        return rows

    def finish(self, rows, command, json_path=None, plot_path=None, title="",
               options=None) -> int:
        """Footer, JSON and plot (rank 0); returns the exit status (1 if wrong). A
        file rank 0 cannot write fails every rank alike (UsageError), after the
        others have waited for it."""
        wrong = sum(r["wrong"] or 0 for r in rows)
        for line in report.footer_lines(rows, wrong):
            self.say(line)
        err = None
        if self.rank == 0:
            groups = self.opts.groups
            try:
                if json_path:
                    what = "--report-to-json-file"
                    rep = report.build_report(
                        rows, command=command,
                        options=self.opts.as_dict() if options is None else options,
                        topology=report.topology_info(self.topo, self.group_ranks),
                        groups=groups, mpi_library=self.mpi_library, wrong=wrong)
                    report.write_json(json_path, rep)
                    self.say(f"# wrote {json_path}")
                if plot_path:
                    what = "--plot"
                    report.plot(plot_path, rows, title)
                    self.say(f"# wrote {plot_path}")
            except BrokenPipeError:  # (stdout closed: the caller's to handle)
                raise
            except (OSError, ValueError) as e:
                err = f"{what}: {e}"
        if self.opts.link_stats:
            from .. import linkstats

            self.quiesce()
            entries = linkstats.gather(self.world, self.mpi_world)
            if self.rank == 0 and err is None:
                try:
                    linkstats.write(self.opts.link_stats, self.topo, entries, command)
                    self.say(f"# wrote {self.opts.link_stats}")
                except BrokenPipeError:
                    raise
                except (OSError, ValueError) as e:
                    err = f"--link-stats: {e}"
        self.quiesce()  # no rank leaves (and maybe aborts the job) before rank 0 is done
        err = self.mpi_world.bcast(err, root=0)
        if err is not None:
            from .sizes import UsageError

            raise UsageError(err)
        return 0 if wrong == 0 else 1
