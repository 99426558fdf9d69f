"""``predict``: the modeled time of one operation on real hardware (no MPI)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import catalog as cat
from ..algorithms.group import GroupView
from ..algorithms.select import choose, schedule_for
from ..errors import InvalidArgumentError, TopologyError
from ..schedule import CallRecord
from ..topology import Topology, resolve
from ..vocab import REDUCE_OPS
from .cost import Cost, price
from .workload import (Workload, bus_factor, canonical_op, workload,
                       workload_counts, workload_pairs)


@dataclass
class Prediction:
    op: str
    size: int  # bytes (size(B) of the row, after rounding to whole elements)
    count: int  # elements of size
    dtype: str
    ranks: int
    algorithm: str
    time_us: float
    algbw: float  # GB/s (1e9 bytes)
    busbw: float
    instance: str = ""
    lnc: int = 0
    nodes: int = 1
    cost: Cost | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("op", "size", "count", "dtype", "ranks",
                                            "algorithm", "time_us", "algbw", "busbw",
                                            "instance", "lnc", "nodes")}
        d["breakdown"] = self.cost.as_dict() if self.cost else None
        return d


def _dtype(dtype):
    from ..kernels import canonical_dtype, dtype_name

    dt = canonical_dtype(dtype)
    return dt, dtype_name(dt)


def group_view(instance=None, lnc=None, nodes=None, ranks=None) -> GroupView:
    """nccom-test's -r/-N: ``ranks`` cores (default all) of ``nodes`` instances.

    On one node a smaller ``ranks`` is a world of the first ``ranks`` cores (what
    ``neuron-mpirun -n ranks`` runs); across nodes it is the first ranks/nodes cores
    of every node (the symmetric group the hardware requires)."""
    from .. import validate as V

    if ranks is not None:
        ranks = V.integer(ranks, "ranks", lo=1)
    instance, lnc, nodes = resolve(instance, lnc, nodes)
    probe = Topology(instance, lnc, 1)
    rpn = probe.ranks_per_node
    if nodes is None:
        nodes = 1 if ranks is None else max(1, -(-ranks // rpn))
    if nodes == 1:
        return GroupView(Topology(instance, lnc, 1, ranks), range(ranks or rpn))
    topo = Topology(instance, lnc, nodes)
    if ranks is None or ranks == topo.size:
        return GroupView(topo, range(topo.size))
    if ranks < 1 or ranks % nodes or ranks > topo.size:
        raise TopologyError(
            f"ranks: {ranks} ranks cannot be spread evenly over {nodes} nodes of "
            f"{instance} ({rpn} ranks each)")
    per = ranks // nodes
    return GroupView(topo, [n * rpn + k for n in range(nodes) for k in range(per)])


def _runtime_costs(view, op: str, runtime=None) -> tuple[float, float]:
    """(floor, per-step cost) in us of ``op`` on ``view`` (neuron_mpi.model.params)."""
    from .params import DEFAULT_RUNTIME, floor, step_cost

    runtime = DEFAULT_RUNTIME if runtime is None else str(runtime)
    multi = len({view.topo.placement(r).node for r in view.ranks}) > 1
    fam = view.topo.spec.family
    return floor(fam, op, multi, runtime).value, step_cost(fam, runtime).value


def _avg(wl: Workload, op_reduce: str) -> bool:
    op_reduce = str(op_reduce).lower()
    if op_reduce not in REDUCE_OPS:
        raise ValueError(f"op_reduce: expected one of {', '.join(REDUCE_OPS)}, got "
                         f"{op_reduce!r}")
    return op_reduce == "avg" and wl.sched_op in ("all_reduce", "reduce_scatter",
                                                  "reduce_scatter_v")


def _prediction(view_size, wl, algo, dtype_name, topo, cost) -> Prediction:
    # (a call that costs nothing, as a group of one does, has no bandwidth to show)
    algbw = wl.size / (cost.time_us * 1e3) if cost.time_us > 0 else 0.0
    try:
        factor = bus_factor(wl.op, view_size)
    except ValueError:  # broadcast, barrier
        factor = 1.0
    return Prediction(wl.op, wl.size, wl.elems, dtype_name, view_size, algo, cost.time_us,
                      algbw, algbw * factor, topo.instance,
                      topo.lnc, topo.nodes, cost)


def check_sendrecv_algorithm(algorithm) -> None:
    """sendrecv runs point-to-point sends: no collective algorithm can be forced on
    it (direct, what its sends are, is taken)."""
    if algorithm not in (None, "direct", "p2p"):
        raise InvalidArgumentError(
            f"algorithm: sendrecv is point-to-point sends, which no collective algorithm "
            f"applies to, got {algorithm!r} (permute takes algorithms)")


def schedule_of(view: GroupView, wl: Workload, algorithm=None, op_reduce="sum"):
    """(algorithm, Schedule) that runs for ``wl`` on ``view``: the communicator's
    choice (or ``algorithm``); sendrecv is what actually runs, every member's
    point-to-point send to the next at once (algorithm "p2p")."""
    avg = _avg(wl, op_reduce)
    if wl.op == "sendrecv":
        check_sendrecv_algorithm(algorithm)
        return "p2p", schedule_for(view, "permute", "direct", wl.sizes, False, wl.extra)
    algo = choose(wl.sched_op, view, algorithm, wl.size)
    return algo, schedule_for(view, wl.sched_op, algo, wl.sizes, avg, wl.extra)


def predict_workload(view: GroupView, wl: Workload, algorithm=None, dtype_name="fp32",
                     op_reduce="sum", runtime=None) -> Prediction:
    """Price a workload on a group view: the algorithm the communicator would choose
    (or ``algorithm``), its schedule, plus the runtime floor."""
    algo, sched = schedule_of(view, wl, algorithm, op_reduce)
    return price_record(CallRecord(wl.op, algo, sched, wl.itemsize), view, wl,
                        dtype_name, runtime)


def price_record(rec: CallRecord, view: GroupView, wl: Workload | None = None,
                 dtype_name: str = "", runtime=None) -> Prediction:
    """Price the schedule a call actually ran (``rec``, e.g. ``comm.last_call``) on
    its group ``view``. ``wl``: the row's workload (sizes for algbw/busbw); without
    it the size is the first member's larger buffer."""
    floor_us, step_us = _runtime_costs(view, rec.op, runtime)
    cost = price(rec.schedule, view, rec.itemsize, None, floor_us, step_us)
    if wl is None:
        size = max(sum(rec.schedule.in_elems[:1]), sum(rec.schedule.out_elems[:1]))
        try:
            name = canonical_op(rec.op)
        except ValueError:  # broadcast, barrier: no bench row of their own
            name = rec.op
        wl = Workload(name, rec.schedule.op, view.size, rec.itemsize, size * rec.itemsize,
                      size)
    return _prediction(view.size, wl, rec.algorithm, dtype_name, view.topo, cost)


def _world_schedule(scheds, views, n_world):
    """The schedules of concurrent groups as one schedule over world ranks: step k
    of every group runs at the same time (rounds merged, local work merged)."""
    from dataclasses import replace

    from ..schedule import Locals, Round, Schedule

    steps = []
    depth = max(len(s.steps) for s in scheds)
    for k in range(depth):
        xs, ls, k_slices = [], [], 1
        for s, v in zip(scheds, views):
            if k >= len(s.steps):
                continue
            st = s.steps[k]
            if isinstance(st, Round):
                k_slices = max(k_slices, getattr(st, "slices", 1))
                xs.extend(x._replace(src=v.ranks[x.src], dst=v.ranks[x.dst]) for x in st.xfers)
            else:
                ls.extend(replace(lo, rank=v.ranks[lo.rank]) for lo in st.ops)
        if ls:
            steps.append(Locals(ls))
        if xs:
            steps.append(Round(xs, slices=k_slices))
    first = scheds[0]
    return Schedule(first.op, first.algorithm, n_world, [0] * n_world, [0] * n_world,
                    [0] * n_world, steps)


def predict_groups(op, nbytes, groups, instance=None, lnc=None, nodes=None,
                   algorithm=None, dtype="fp32", op_reduce="sum", pairs=None,
                   send_counts=None, runtime=None) -> Prediction:
    """Several replica groups running ``op`` at the same time (nccom-test's
    --custom-replica-groups): every group's schedule, step by step together, so
    they share links, NICs and HBM. ``groups``: lists of world ranks, disjoint, all
    the same size. The time is the slowest group's; sizes are per group."""
    from .. import validate as V

    op = canonical_op(op)
    dt, name = _dtype(dtype)
    instance, lnc, nodes = resolve(instance, lnc, nodes)
    topo = Topology(instance, lnc, nodes or 1)
    groups = V.replica_groups(groups, topo.size, "groups")
    if not groups:
        raise InvalidArgumentError("groups: expected at least one replica group, got none")
    if len({len(g) for g in groups}) != 1:
        raise TopologyError("groups: every replica group must have the same size, got "
                            + ", ".join(str(len(g)) for g in groups))
    views = [GroupView(topo, g) for g in groups]
    r = views[0].size
    # (a permute without pairs sends along each group's own ring: the groups' rings
    # differ in their orders of group indices)
    wls = [_workload(op, nbytes, r, dt.itemsize, v, pairs, send_counts) for v in views]
    wl = wls[0]
    avg = _avg(wl, op_reduce)
    algos, scheds = [], []
    if op == "sendrecv":
        check_sendrecv_algorithm(algorithm)
        algorithm = None
    for v, w in zip(views, wls):
        a = choose(w.sched_op, v, algorithm, w.size)
        algos.append(a)
        scheds.append(schedule_for(v, w.sched_op, a, w.sizes, avg, w.extra))
    world = GroupView(topo, range(topo.size))
    merged = _world_schedule(scheds, views, topo.size)
    floor_us, step_us = max(_runtime_costs(v, op, runtime) for v in views)
    cost = price(merged, world, dt.itemsize, None, floor_us, step_us)
    algo = algos[0] if len(set(algos)) == 1 else "+".join(sorted(set(algos)))
    return _prediction(r, wl, algo, name, topo, cost)


def _workload(op, nbytes, r, itemsize, view, pairs, send_counts) -> Workload:
    from .. import validate as V

    if pairs is not None:
        if op not in ("permute", "sendrecv"):
            raise ValueError(f"pairs: only for permute and sendrecv, not {op}")
        pairs = V.pairs(pairs, r, "pairs")
        V.integer(nbytes, "nbytes", lo=1)
        return workload_pairs(op, nbytes, r, itemsize, pairs)
    if send_counts is not None:
        if op not in ("alltoallv", "all_gather_v", "reduce_scatter_v"):
            raise ValueError(f"send_counts: only for alltoallv, all_gather_v and "
                             f"reduce_scatter_v, not {op}")
        return workload_counts(op, r, itemsize, send_counts)
    V.integer(nbytes, "nbytes", lo=1)
    ring = view.rings[0] if op == "permute" else None
    return workload(op, nbytes, r, itemsize, ring)


def predict(op, nbytes, instance=None, lnc=None, nodes=None, ranks=None, algorithm=None,
            dtype="fp32", op_reduce="sum", view: GroupView | None = None, groups=None,
            pairs=None, send_counts=None, runtime=None) -> Prediction:
    """Modeled time, algbw and busbw of ``op`` on ``nbytes`` (size as nccom-test
    counts it) on the real hardware.

    instance/lnc/nodes: as ``neuron_mpi.topology`` (env, then trn2.48xlarge);
    ranks: nccom-test's -r (see ``group_view``); algorithm: forced, else the default
    the communicator would pick; dtype: any nccom-test / numpy spelling.
    groups: concurrent replica groups of world ranks (``predict_groups``).
    pairs: permute / sendrecv (src, dst) pairs of group indices.
    send_counts: alltoallv: elements each rank sends to each peer (one list for
    every rank, as nccom-test's metadata, or one list per rank); all_gather_v /
    reduce_scatter_v: each member's block (one count for all, or one per member).
    With send_counts the counts set the size and ``nbytes`` is ignored.
    runtime: the runtime generation whose fixed costs apply ("2023", "2025",
    "2026"; default the newest), see neuron_mpi.model.params.
    """
    if groups is not None:
        if view is not None or ranks is not None:
            raise ValueError("groups: give either groups or ranks/view, not both")
        return predict_groups(op, nbytes, groups, instance, lnc, nodes, algorithm, dtype,
                              op_reduce, pairs, send_counts, runtime)
    op = canonical_op(op)
    dt, name = _dtype(dtype)
    if view is None:
        view = group_view(instance, lnc, nodes, ranks)
    wl = _workload(op, nbytes, view.size, dt.itemsize, view, pairs, send_counts)
    return predict_workload(view, wl, algorithm, name, op_reduce, runtime)


# --- the parameters, with their sources ---------------------------------------------
_SOURCES = {
    cat.INTRA_CHIP: "one DMA between two cores of a chip, per pair (pairs do not share): "
                    "trn2 37.52 GiB/s, the published permute (nccom-test.rst a0b8b3e7); "
                    "trn1/inf2 64 GiB/s, fitted to the published 2-rank all-reduce "
                    "(4f641e78); 0.5 us per DMA (assumption, no public figure)",
    cat.NEURONLINK: "per-chip NeuronLink total over its links [about / trn1 / inf2]; "
                    "1.5 us per hop, midpoint of the docs' 1-2 us [intra]",
    cat.NEURONLINK_Z: "UltraServer Z: 256 GB/s per chip over 2 Z links [about]; 1.5 us",
    cat.EFA: "EFA per chip (one NIC per chip on trn2, 200 Gbps; trn1 instance total / "
             "16) [about / trn1]; 15 us HBM-to-HBM across servers (ib_write_lat) [about]",
}


def parameters(instance=None) -> list[dict]:
    """The figures the model uses for ``instance``, each with its source."""
    instance, _, _ = resolve(instance, None, None)
    spec = cat.instance_spec(instance)
    rows = [{"link": cat.INTRA_CHIP, "bandwidth_GBps": spec.intra_chip.bandwidth_GBps,
             "latency_us": spec.intra_chip.latency_us, "source": _SOURCES[cat.INTRA_CHIP]}]
    seen = set()
    for d in spec.dims:
        if d.link.kind not in seen:
            seen.add(d.link.kind)
            rows.append({"link": d.link.kind, "bandwidth_GBps": d.link.bandwidth_GBps,
                         "latency_us": d.link.latency_us, "source": _SOURCES[d.link.kind]})
    if spec.efa is not None:
        rows.append({"link": cat.EFA, "bandwidth_GBps": spec.efa.bandwidth_GBps,
                     "latency_us": spec.efa.latency_us, "source": _SOURCES[cat.EFA]})
    rows.append({"link": "hbm", "bandwidth_GBps": spec.hbm_GBps, "latency_us": 0.0,
                 "source": "HBM per chip, for reductions and local copies [hbm]"})
    return rows
