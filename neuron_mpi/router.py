"""The router: lowers a schedule's logical transfers to physical hops.

A transfer between members whose chips are not neighbours is forwarded hop by hop
along ``Topology.route`` (dimension ordered; the rank with the sender's core index
forwards on each chip in between, member of the group or not). Every hop crosses
exactly one link: intra-chip, neuronlink, neuronlink-z or efa.
"""
from __future__ import annotations

from dataclasses import dataclass

from .schedule import Round


@dataclass(frozen=True)
class Hop:
    xid: int  # the transfer's id in its schedule (position over all rounds)
    step: int  # 0 for the first hop of a transfer
    src: int  # world ranks
    dst: int
    link: str
    nbytes: int
    bandwidth_GBps: float
    latency_us: float
    src_chip: int  # global chip ids
    dst_chip: int


def lower(schedule, view, itemsize: int) -> list[list[Hop]]:
    """Hops per round of ``schedule`` (its Locals steps are skipped)."""
    topo = view.topo
    out = []
    xid = 0
    for step in schedule.steps:
        if not isinstance(step, Round):
            continue
        hops = []
        for x in step.xfers:
            path = topo.route(view.ranks[x.src], view.ranks[x.dst])
            for i, (a, b) in enumerate(zip(path, path[1:])):
                ga, gb = topo.global_chip(a), topo.global_chip(b)
                spec = topo.link_between_chips(ga, gb)
                assert spec is not None, (a, b)
                hops.append(Hop(xid, i, a, b, spec.kind, x.count * itemsize,
                                spec.bandwidth_GBps, spec.latency_us, ga, gb))
            xid += 1
        out.append(hops)
    return out


@dataclass(frozen=True)
class NextHop:
    """How a rank moves a message on: over ``transport`` ("shm", "mpi" or "self")
    to world rank ``to``, charging ``charges`` (pairs of ledger indices: bytes,
    messages) for every link between here and ``to``."""

    transport: str
    to: int
    charges: tuple[int, ...]
    links: int  # how many links the step crosses


class NextHops:
    """The next-hop decisions of one rank, computed once per (origin, destination).

    A message from ``origin`` to ``dst`` follows ``Topology.route``. From this rank
    (on that route) it goes in one step to the furthest rank of the route that
    shares this rank's shared-memory domain (one copy, however many links), else
    one hop over MPI. Either way the ledger is charged for every link crossed,
    on the row of the rank that link leaves from. ``ledger_row(rank)`` gives the
    row of a rank this process may charge (None: not in its domain).
    """

    def __init__(self, topo, me: int, shm_members=None, ledger_row=None):
        self.topo = topo
        self.me = me
        self.shm = frozenset(shm_members or ())
        self._row = ledger_row
        self._cache: dict[tuple[int, int], NextHop] = {}

    def _charges(self, path) -> tuple[int, ...]:
        n = self.topo.size
        out = []
        for a, b in zip(path, path[1:]):
            base = (self._row(a) * n + b) * 2
            out += [base, base + 1]
        return tuple(out)

    def decide(self, origin: int, dst: int) -> NextHop:
        key = (origin, dst)
        hop = self._cache.get(key)
        if hop is None:
            hop = self._cache[key] = self._decide(origin, dst)
        return hop

    def _decide(self, origin: int, dst: int) -> NextHop:
        me = self.me
        if dst == me:
            return NextHop("self", me, (), 0)
        path = self.topo.route(origin, dst)
        i = path.index(me)
        j = i
        if me in self.shm:
            while j + 1 < len(path) and path[j + 1] in self.shm:
                j += 1
        if j > i:
            return NextHop("shm", path[j], self._charges(path[i:j + 1]), j - i)
        return NextHop("mpi", path[i + 1], self._charges(path[i:i + 2]), 1)
