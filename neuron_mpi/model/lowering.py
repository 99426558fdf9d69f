"""The router's lowering, as arrays: one table of hops per round.

``router.lower`` makes one ``Hop`` object per hop, which is what the executor's
ledger and the tests want, but costs seconds at 1024 ranks (a million hops for an
all-to-all). The time model only needs, per hop, which transfer it belongs to, its
position on the transfer's path, the directed link it crosses and its bytes; those
depend only on the chips of the two ends (``Topology.route`` walks
``Topology.chip_route``; the forwarding rank on each chip in between never changes
the link). So the path of every distinct (source chip, destination chip) pair is
computed once, and the hops of a round are gathered with NumPy.

``tests/test_model.py`` checks, hop for hop, that this equals ``router.lower``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..catalog import EFA
from ..schedule import Locals, Round


_XREC = np.dtype([("src", np.int64), ("dst", np.int64), ("count", np.int64),
                  ("reduce", bool), ("fold", bool)])


@dataclass
class Links:
    """Directed links met so far on a topology: index -> endpoints and figures."""

    src_chip: list
    dst_chip: list
    kind: list
    bandwidth_GBps: list
    latency_us: list

    def arrays(self):
        return (np.asarray(self.src_chip, np.int64), np.asarray(self.dst_chip, np.int64),
                np.asarray(self.bandwidth_GBps, np.float64),
                np.asarray(self.latency_us, np.float64),
                np.asarray([k == EFA for k in self.kind], bool))


@dataclass
class RoundHops:
    """The hops of one round. Transfers are numbered 0..T-1 in listed order."""

    n_xfers: int
    xfer: np.ndarray  # per hop: its transfer
    step: np.ndarray  # per hop: 0 for a transfer's first hop
    link: np.ndarray  # per hop: index into the lowerer's Links
    nbytes: np.ndarray  # per hop (float64)
    dst_chip: np.ndarray  # per transfer: global chip of the destination member
    xfer_bytes: np.ndarray  # per transfer
    reduce: np.ndarray  # per transfer: delivered with a reduction
    slices: int = 1  # the round's Round.slices (reduction overlaps the transfer)
    fold: np.ndarray | None = None  # per transfer: Xfer.fold (read in place, no DMA)


class Lowerer:
    """Lowers the rounds of schedules on one group view (paths cached)."""

    def __init__(self, view):
        self.view = view
        topo = view.topo
        self.topo = topo
        ranks = np.asarray(view.ranks, np.int64)
        self.world = ranks
        self.n_chips = topo.nodes * topo.chips_per_node
        chip_of = np.fromiter((topo.global_chip(r) for r in range(topo.size)), np.int64,
                              topo.size)
        self.chip = chip_of[ranks]  # per member
        self.links = Links([], [], [], [], [])
        self._link_index: dict[tuple[int, int], int] = {}
        self._paths: dict[int, np.ndarray] = {}
        # every (source chip, destination chip) path met so far, as a table:
        # _plen[key] (-1: not computed yet), _poff[key] into _flat
        nn = self.n_chips * self.n_chips
        self._plen = np.full(nn, -1, np.int64)
        self._poff = np.zeros(nn, np.int64)
        self._flat = np.zeros(0, np.int64)

    def _link(self, ga: int, gb: int) -> int:
        idx = self._link_index.get((ga, gb))
        if idx is None:
            spec = self.topo.link_between_chips(ga, gb)
            assert spec is not None, (ga, gb)
            idx = len(self.links.kind)
            self._link_index[(ga, gb)] = idx
            self.links.src_chip.append(ga)
            self.links.dst_chip.append(gb)
            self.links.kind.append(spec.kind)
            self.links.bandwidth_GBps.append(spec.bandwidth_GBps)
            self.links.latency_us.append(spec.latency_us)
        return idx

    def path(self, ga: int, gb: int) -> np.ndarray:
        """Link indices from chip ga to chip gb (distinct ranks on them)."""
        key = ga * self.n_chips + gb
        p = self._paths.get(key)
        if p is None:
            chips = self.topo.chip_route(ga, gb) if ga != gb else [ga, ga]
            p = np.asarray([self._link(a, b) for a, b in zip(chips, chips[1:])], np.int64)
            self._paths[key] = p
        return p

    def _add_paths(self, keys) -> None:
        paths = [self.path(int(k) // self.n_chips, int(k) % self.n_chips) for k in keys]
        lens = np.fromiter((len(p) for p in paths), np.int64, len(paths))
        self._poff[keys] = len(self._flat) + np.cumsum(lens) - lens
        self._plen[keys] = lens
        self._flat = np.concatenate([self._flat] + paths)

    def lower_round(self, xfers, itemsize: int) -> RoundHops:
        t = len(xfers)
        if t == 0:
            e = np.zeros(0, np.int64)
            return RoundHops(0, e, e, e, np.zeros(0), e, np.zeros(0), np.zeros(0, bool), 1,
                             np.zeros(0, bool))
        # one pass over the transfers (src, dst, count, reduce, fold)
        rec = np.fromiter(((x.src, x.dst, x.count, x.reduce, x.fold) for x in xfers),
                          _XREC, t)
        src, dst, cnt, red = rec["src"], rec["dst"], rec["count"], rec["reduce"]
        gs, gd = self.chip[src], self.chip[dst]
        key = gs * self.n_chips + gd
        plen = self._plen[key]
        if (plen < 0).any():
            self._add_paths(np.unique(key[plen < 0]))
            plen = self._plen[key]
        plen = plen.copy()
        plen[self.world[src] == self.world[dst]] = 0  # a rank to itself: no hop
        h = int(plen.sum())
        hop_x = np.repeat(np.arange(t), plen)
        starts = np.cumsum(plen) - plen
        step = np.arange(h) - starts[hop_x]
        link = self._flat[self._poff[key][hop_x] + step]
        xbytes = (cnt * itemsize).astype(np.float64)
        return RoundHops(t, hop_x, step, link, xbytes[hop_x], gd, xbytes, red, 1,
                         rec["fold"])

    def lower(self, schedule, itemsize: int):
        """Per step of ``schedule``: a RoundHops, or the Locals step itself."""
        out = []
        for st in schedule.steps:
            if isinstance(st, Round):
                rh = self.lower_round(st.xfers, itemsize)
                rh.slices = getattr(st, "slices", 1)
                out.append(rh)
            elif isinstance(st, Locals):
                out.append(st)
        return out


@functools.lru_cache(maxsize=32)
def lowerer(view) -> Lowerer:
    return Lowerer(view)


def as_hop_tuples(view, schedule, itemsize: int) -> list[list[tuple]]:
    """(xid, step, src_chip, dst_chip, link kind, nbytes, bandwidth, latency) per hop,
    per round, xid counted over all rounds as ``router.lower`` does (for tests)."""
    lw = lowerer(view)
    out, base = [], 0
    for st in lw.lower(schedule, itemsize):
        if isinstance(st, Locals):
            continue
        rows = []
        for x, s, lk, nb in zip(st.xfer, st.step, st.link, st.nbytes):
            lk = int(lk)
            rows.append((base + int(x), int(s), lw.links.src_chip[lk], lw.links.dst_chip[lk],
                         lw.links.kind[lk], int(nb), lw.links.bandwidth_GBps[lk],
                         lw.links.latency_us[lk]))
        out.append(rows)
        base += st.n_xfers
    return out
