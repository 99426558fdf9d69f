"""``predict``: the modeled time of one operation on real hardware (no MPI)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import catalog as cat
from ..algorithms.group import GroupView
from ..algorithms.select import choose, schedule_for
from ..errors import TopologyError
from ..topology import Topology, resolve
from .cost import Cost, price
from .workload import Workload, bus_factor, canonical_op, workload

REDUCE_OPS = ("sum", "prod", "max", "min", "avg")


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


def schedule_of(view: GroupView, wl: Workload, algorithm=None, op_reduce="sum"):
    """(algorithm, Schedule) the communicator would run for ``wl`` on ``view``."""
    algo = choose(wl.sched_op, view, algorithm, wl.size)
    avg = op_reduce == "avg" and wl.sched_op in ("all_reduce", "reduce_scatter",
                                                 "reduce_scatter_v")
    return algo, schedule_for(view, wl.sched_op, algo, wl.sizes, avg, wl.extra)


def predict_workload(view: GroupView, wl: Workload, algorithm=None, dtype_name="fp32",
                     op_reduce="sum") -> Prediction:
    """Price a workload on a group view (the bench's entry point)."""
    op_reduce = str(op_reduce).lower()
    if op_reduce not in REDUCE_OPS:
        raise ValueError(f"op_reduce: expected one of {', '.join(REDUCE_OPS)}, got "
                         f"{op_reduce!r}")
    algo, sched = schedule_of(view, wl, algorithm, op_reduce)
    cost = price(sched, view, wl.itemsize)
    t = max(cost.time_us, 1e-9)
    algbw = wl.size / (t * 1e3)
    topo = view.topo
    return Prediction(wl.op, wl.size, wl.elems, dtype_name, view.size, algo, cost.time_us,
                      algbw, algbw * bus_factor(wl.op, view.size), topo.instance,
                      topo.lnc, topo.nodes, cost)


def predict(op, nbytes, instance=None, lnc=None, nodes=None, ranks=None, algorithm=None,
            dtype="fp32", op_reduce="sum", view: GroupView | None = None) -> Prediction:
    """Modeled time, algbw and busbw of ``op`` on ``nbytes`` (size as nccom-test
    counts it) on the real hardware.

    instance/lnc/nodes: as ``neuron_mpi.topology`` (env, then trn2.48xlarge);
    ranks: nccom-test's -r (see ``group_view``); algorithm: forced, else the default
    the communicator would pick; dtype: any nccom-test / numpy spelling.
    """
    op = canonical_op(op)
    dt, name = _dtype(dtype)
    if view is None:
        view = group_view(instance, lnc, nodes, ranks)
    ring = view.rings[0] if op == "permute" else None
    wl = workload(op, nbytes, view.size, dt.itemsize, ring)
    return predict_workload(view, wl, algorithm, name, op_reduce)


# --- the parameters, with their sources ---------------------------------------------
_SOURCES = {
    cat.INTRA_CHIP: "HBM-to-HBM copy on one chip: half the chip's HBM bandwidth "
                    "[hbm: Trainium2 2.9 TB/s, Trainium/Inferentia2 820 GB/s]; 0.5 us "
                    "per DMA (assumption, no public figure)",
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
