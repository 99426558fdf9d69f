"""The layout checker: would the hardware run collectives on these replica groups,
and what would an all-reduce and an all-gather cost on each kind of group?

``check_layout(instance=..., tp=8, dp=4)`` (or ``replica_groups=[[...], ...]``)
returns a LayoutReport; ``neuron-mpi groups`` prints it. Pure: no MPI.

TP x DP x PP layouts follow neuronx-distributed (parallel_layers/parallel_state.py):
the world is a [PP, DP, TP] array of ranks, TP contiguous; with its two special
cases: trn1 TP=4 takes one rank per chip of a torus column ([0, 8, 16, 24], ...),
and trn2 TP=32 at LNC=2 / TP=64 at LNC=1 on full nodes pairs torus rows 0+3 and
1+2 (``get_logic_chosen``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidArgumentError
from .groups import Verdict, verdict
from .topology import topology

MODELED_OPS = ("all_reduce", "all_gather")
TRN2_SERVER_CHIPS = 16  # a trn2 server's 4x4 torus (an UltraServer node holds 4)


@dataclass
class GroupKind:
    kind: str  # "tp", "dp", "pp" or "replica_groups"
    groups: list
    verdicts: list  # Verdict per group
    times_us: dict = field(default_factory=dict)  # op -> modeled time, all groups at once
    algorithms: dict = field(default_factory=dict)  # op -> algorithm the model priced

    @property
    def accepted(self) -> bool:
        return all(v.accepted for v in self.verdicts)


@dataclass
class LayoutReport:
    instance: str
    lnc: int
    nodes: int
    ranks: int
    size: int  # bytes the modeled times are for
    kinds: list  # GroupKind

    @property
    def accepted(self) -> bool:
        return all(k.accepted for k in self.kinds)

    @property
    def refused(self) -> list[Verdict]:
        return [v for k in self.kinds for v in k.verdicts if not v.accepted]

    def as_dict(self) -> dict:
        return {
            "instance": self.instance, "lnc": self.lnc, "nodes": self.nodes,
            "ranks": self.ranks, "size": self.size, "accepted": self.accepted,
            "kinds": [{"kind": k.kind, "accepted": k.accepted,
                       "modeled_time_us": k.times_us, "algorithm": k.algorithms,
                       "groups": [{"ranks": list(v.group), "accepted": v.accepted,
                                   "shape": v.why, "message": v.message,
                                   "rule": v.rule, "source": v.source}
                                  for v in k.verdicts]} for k in self.kinds],
        }


def _need(name, value, ok, expected):
    if not ok:
        raise InvalidArgumentError(f"{name}: expected {expected}, got {value!r}")


def parallel_groups(topo, tp: int, pp: int = 1, dp: int | None = None) -> dict:
    """{"tp": [...], "dp": [...], "pp": [...]} for a TP x DP x PP layout of the whole
    world of ``topo``, as neuronx-distributed builds them (kinds of size 1 left out)."""
    n = topo.size
    for name, v in (("tp", tp), ("pp", pp)):
        _need(name, v, isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              "a positive integer")
    if dp is None:
        _need("tp", tp, n % (tp * pp) == 0,
              f"a size whose product with pp ({pp}) divides the {n} ranks")
        dp = n // (tp * pp)
    _need("dp", dp, isinstance(dp, int) and not isinstance(dp, bool) and dp >= 1,
          "a positive integer")
    _need("tp", (tp, dp, pp), tp * dp * pp == n,
          f"tp x dp x pp = the {n} ranks of {topo.nodes} x {topo.instance} at LNC={topo.lnc}")
    fam = topo.spec.family
    rpn = topo.ranks_per_node
    if fam == "trn1" and tp == 4 and pp == 1 and topo.spec.chips > 1:
        # nxd: TP=4 on trn1 is one rank per chip of a torus column, per node
        per = rpn // tp
        tp_groups = [[node * rpn + j + k * per for k in range(tp)]
                     for node in range(topo.nodes) for j in range(per)]
        dp_groups = _dp_of(tp_groups, dp)
    elif fam == "trn2" and pp == 1 and tp * topo.lnc == 64 and topo.size >= rpn:
        # nxd get_logic_chosen "Logic 2": rows 0+3 and 1+2 of each server's 4x4 torus
        # (an UltraServer node holds 4 servers, each a contiguous run of ranks)
        server = TRN2_SERVER_CHIPS * topo.ranks_per_chip
        row = server // 4
        tp_groups = []
        for b in range(0, n, server):
            tp_groups.append(list(range(b, b + row)) + list(range(b + 3 * row, b + 4 * row)))
            tp_groups.append(list(range(b + row, b + 3 * row)))
        dp_groups = _dp_of(tp_groups, dp)
    else:
        tp_groups = [list(range(s, s + tp)) for s in range(0, n, tp)]
        dp_groups = [list(range(p * tp * dp + j, (p + 1) * tp * dp, tp))
                     for p in range(pp) for j in range(tp)]
    pp_groups = [list(range(j, n, tp * dp)) for j in range(tp * dp)]
    out = {"tp": tp_groups, "dp": dp_groups, "pp": pp_groups}
    return {k: v for k, v in out.items() if len(v[0]) > 1}


def _dp_of(tp_groups, dp):
    """nxd's _combine_tp_groups_for_dp: zip each run of ``dp`` TP groups."""
    out = []
    for i in range(len(tp_groups) // dp):
        out += [list(c) for c in zip(*tp_groups[i * dp:(i + 1) * dp])]
    return out


def _check_groups(topo, groups, name="replica_groups") -> list[list[int]]:
    """The groups as lists of ints, checked as ``Communicator.split`` checks them
    (ranks of the world, each in at most one group), non-empty and all of one size
    (a collective's replica groups are)."""
    from . import validate as V

    gs = V.replica_groups(groups, topo.size, name)
    _need(name, groups, len(gs) > 0, "a non-empty list of lists of ranks")
    sizes = [len(g) for g in gs]
    if len(set(sizes)) > 1:
        raise InvalidArgumentError(f"{name}: expected groups all of one size, got sizes "
                                   + ", ".join(map(str, sizes)))
    return gs


def check_layout(instance=None, lnc=None, nodes=None, tp=None, pp=1, dp=None,
                 replica_groups=None, size: int = 64 << 20, model: bool = True,
                 dtype="fp32") -> LayoutReport:
    """Check a TP x DP x PP layout (``tp``, ``pp``, ``dp``) or explicit
    ``replica_groups`` (a list of lists of world ranks) against the hardware's group
    rules, and model an all-reduce and an all-gather of ``size`` bytes on each kind's
    groups, all at once. Raises InvalidArgumentError / TopologyError for bad
    arguments; a refused group is reported, not raised."""
    topo = topology(instance, lnc, nodes)
    if (tp is None) == (replica_groups is None):
        raise InvalidArgumentError("tp / replica_groups: give exactly one of them")
    _need("size", size, isinstance(size, int) and size >= 1, "a positive number of bytes")
    if replica_groups is not None:
        kinds = {"replica_groups": _check_groups(topo, replica_groups)}
    else:
        kinds = parallel_groups(topo, tp, pp, dp)
        if not kinds:  # tp = pp = dp = 1: one rank
            kinds = {"tp": [[r] for r in range(topo.size)]}
    out = []
    for kind, groups in kinds.items():
        gk = GroupKind(kind, groups, [verdict(topo, g) for g in groups])
        if model and len(groups[0]) > 1:
            from .model.predict import predict

            # every group of the kind at once, as a step of the program runs them:
            # they share links, NICs and HBM (the time is the slowest group's)
            for op in MODELED_OPS:
                p = predict(op, size, topo.instance, topo.lnc, topo.nodes, dtype=dtype,
                            groups=groups)
                gk.times_us[op] = p.time_us
                gk.algorithms[op] = p.algorithm
        out.append(gk)
    return LayoutReport(topo.instance, topo.lnc, topo.nodes, topo.size, size, out)


def _short(g) -> str:
    g = list(g)
    return "[" + ", ".join(map(str, g)) + "]" if len(g) <= 8 else \
        f"[{g[0]}, {g[1]}, {g[2]}, ..., {g[-1]}] ({len(g)})"


def format_text(rep: LayoutReport, human_size: str) -> str:
    """Per kind: the modeled times; per group: accepted or refused, the shape or the
    runtime-style message, and the rule's source key; the sources at the end."""
    lines = [f"# {rep.nodes} x {rep.instance}, LNC={rep.lnc}, {rep.ranks} ranks; modeled "
             f"times for {human_size}"]
    used = []
    for k in rep.kinds:
        t = ", ".join(f"{op} {k.times_us[op]:.1f} us ({k.algorithms[op]})"
                      for op in MODELED_OPS if op in k.times_us)
        n_ok = sum(v.accepted for v in k.verdicts)
        lines.append(f"{k.kind}: {len(k.groups)} groups of {len(k.groups[0])}, "
                     f"{n_ok} accepted" + (f"; modeled {t}" if t else ""))
        for v in k.verdicts:
            if v.rule not in used:
                used.append(v.rule)
            if v.accepted:
                lines.append(f"  accepted {_short(v.group)}: {v.why} [{v.rule}]")
            else:
                msg = v.message.split("replica_groups: ", 1)[-1]
                lines.append(f"  refused  {_short(v.group)}: {msg} [{v.rule}]")
    lines.append("all groups accepted" if rep.accepted
                 else f"{len(rep.refused)} group(s) refused")
    from .groups import SOURCES

    lines.append("sources:")
    lines.extend(f"  [{key}] {SOURCES[key]}" for key in used)
    return "\n".join(lines) + "\n"
