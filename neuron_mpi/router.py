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
