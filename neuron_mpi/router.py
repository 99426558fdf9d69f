"""The router: lowers a schedule's logical transfers to physical hops.

A transfer between members whose chips are not neighbours is forwarded hop by hop
along ``Topology.route`` (dimension ordered; the rank with the sender's core index
forwards on each chip in between, member of the group or not). Every hop crosses
exactly one link: intra-chip, neuronlink, neuronlink-z or efa.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .schedule import Round


class Hop(NamedTuple):  # (a tuple: a 256-rank ring all-reduce lowers to 261120 of them)
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
    topo, ranks = view.topo, view.ranks
    legs: dict = {}  # (src, dst) member indices -> the links of its route, once each
    out = []
    xid = 0
    for step in schedule.steps:
        if not isinstance(step, Round):
            continue
        hops = []
        for x in step.xfers:
            leg = legs.get((x.src, x.dst))
            if leg is None:
                leg = legs[x.src, x.dst] = _legs(topo, ranks[x.src], ranks[x.dst])
            nbytes = x.count * itemsize
            for i, (a, b, kind, bw, lat, ga, gb) in enumerate(leg):
                hops.append(Hop(xid, i, a, b, kind, nbytes, bw, lat, ga, gb))
            xid += 1
        out.append(hops)
    return out


def _legs(topo, src: int, dst: int) -> list[tuple]:
    """The links of ``Topology.route(src, dst)``, one per hop: (from, to, kind,
    bandwidth, latency, from chip, to chip)."""
    path = topo.route(src, dst)
    legs = []
    for a, b in zip(path, path[1:]):
        ga, gb = topo.global_chip(a), topo.global_chip(b)
        spec = topo.link_between_chips(ga, gb)
        assert spec is not None, (a, b)
        legs.append((a, b, spec.kind, spec.bandwidth_GBps, spec.latency_us, ga, gb))
    return legs


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
    over MPI: to the furthest rank of the route that shares the next rank's domain
    (``domains``: each world rank's domain, -1 for a rank with none), charging the
    one link it leaves this domain by; that receiver charges the links inside its
    own domain (``entry``), as no rank of it forwards the message. Every link
    crossed is charged once, on the row of the rank that link leaves from
    (``ledger_row(rank)``: the row of a rank this process may charge). Without
    ``domains`` (every hop over MPI) a message goes one hop at a time.
    """

    def __init__(self, topo, me: int, shm_members=None, ledger_row=None, domains=None):
        self.topo = topo
        self.me = me
        self.shm = frozenset(shm_members or ())
        self._row = ledger_row
        self._domains = domains
        self._cache: dict[tuple[int, int], NextHop] = {}
        self._entry: dict[tuple[int, int], tuple[int, ...]] = {}
        self._inside: dict[tuple[int, int], bool] = {}

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
        j = i + 1
        dom = self._domains
        if dom is not None and dom[path[j]] >= 0:
            while j + 1 < len(path) and dom[path[j + 1]] == dom[path[j]]:
                j += 1
        return NextHop("mpi", path[j], self._charges(path[i:i + 2]), 1)

    def inside(self, src: int, dst: int) -> bool:
        """Does the whole route from ``src`` to another rank ``dst`` stay in this
        rank's shared-memory domain?"""
        key = (src, dst)
        v = self._inside.get(key)
        if v is None:
            shm = self.shm
            v = self._inside[key] = src != dst and all(
                r in shm for r in self.topo.route(src, dst))
        return v

    def entry(self, origin: int, dst: int) -> tuple[int, ...]:
        """The ledger charges of the links a message from ``origin`` to ``dst``
        crossed inside this rank's domain before it came here over MPI (sent
        straight here by ``decide`` from outside the domain): () when it came from
        the previous rank of the route."""
        key = (origin, dst)
        c = self._entry.get(key)
        if c is None:
            path = self.topo.route(origin, dst)
            k = m = path.index(self.me)
            if self._domains is not None:
                while m > 0 and path[m - 1] in self.shm:
                    m -= 1
            c = self._entry[key] = self._charges(path[m:k + 1]) if k > m else ()
        return c
