"""The executor: runs one rank's part of any schedule on the engine.

It never knows which algorithm made the schedule. ``Plan`` is this rank's slice of
a schedule, cut into pieces the transports carry (built once per schedule, piece
size and item size, and cached); ``Execution`` is one run of a plan on real
buffers, a small state machine the engine advances, so several collectives (async
ones) progress together.

The round contract of schedule.py holds piece by piece: a round's pieces are posted
(their bytes copied out) when the round starts; deliveries are applied as their
pieces arrive, straight from the transport's landing slot, except in a round whose
deliveries overlap each other, where they are applied in listed order. Where a
round's deliveries overlap its own sends' sources, or a round ends with a send that
found no room yet, the waiting pieces are copied aside first, so a later write can
never change bytes a send has yet to move.
"""
from __future__ import annotations

import time

import numpy as np

from . import kernels
from .schedule import IN, OUT, TMP, Locals, Round


class Send:
    __slots__ = ("xid", "piece", "dst", "buf", "off", "count", "total")

    def __init__(self, xid, piece, dst, buf, off, count, total):
        self.xid, self.piece, self.dst = xid, piece, dst
        self.buf, self.off, self.count, self.total = buf, off, count, total


class Recv:
    __slots__ = ("xid", "piece", "src", "buf", "off", "count", "reduce")

    def __init__(self, xid, piece, src, buf, off, count, reduce):
        self.xid, self.piece, self.src = xid, piece, src
        self.buf, self.off, self.count, self.reduce = buf, off, count, reduce


class RoundStep:
    __slots__ = ("sends", "recvs", "ordered", "hazard")

    def __init__(self, sends, recvs):
        self.sends = sends
        self.recvs = recvs
        dst = [(r.buf, r.off, r.off + r.count) for r in recvs if r.count]
        src = [(s.buf, s.off, s.off + s.count) for s in sends if s.count]
        self.ordered = _overlap(dst, dst)
        self.hazard = _overlap(src, dst)


def _overlap(a, b) -> bool:
    """Do two lists of (buffer, start, end) regions overlap? With a is b: does any
    region overlap another one of the same list."""
    same = a is b
    if same and len(a) < 2 or not a or not b:
        return False
    tagged = sorted([(buf, lo, hi, 0) for buf, lo, hi in a]
                    + ([] if same else [(buf, lo, hi, 1) for buf, lo, hi in b]))
    reach: dict = {}  # (buffer, side) -> furthest end seen
    for buf, lo, hi, side in tagged:
        other = (buf, side if same else 1 - side)
        if reach.get(other, -1) > lo:
            return True
        key = (buf, side)
        reach[key] = max(reach.get(key, -1), hi)
    return False


def pieces(count: int, per_piece: int) -> list[tuple[int, int]]:
    """(offset, length) pieces of ``count`` elements; one empty piece for 0."""
    if count <= 0:
        return [(0, 0)]
    return [(o, min(per_piece, count - o)) for o in range(0, count, per_piece)]


class Plan:
    """Member ``me``'s steps: ("locals", [Local]) or a RoundStep of pieces (world
    ranks as peers, transfer ids positional over the whole schedule)."""

    def __init__(self, schedule, view, me: int, itemsize: int = 1, piece_bytes: int = 1 << 18):
        per = max(1, piece_bytes // max(1, itemsize))
        self.steps = []
        xid = 0
        for step in schedule.steps:
            if isinstance(step, Locals):
                mine = [lo for lo in step.ops if lo.rank == me]
                if mine:
                    self.steps.append(("locals", mine))
            elif isinstance(step, Round):
                sends, recvs = [], []
                for x in step.xfers:
                    if x.src == me:
                        total = x.count * itemsize
                        for p, (o, n) in enumerate(pieces(x.count, per)):
                            sends.append(Send(xid, p, view.ranks[x.dst], x.src_buf,
                                              x.src_off + o, n, total))
                    if x.dst == me:
                        for p, (o, n) in enumerate(pieces(x.count, per)):
                            recvs.append(Recv(xid, p, view.ranks[x.src], x.dst_buf,
                                              x.dst_off + o, n, x.reduce))
                    xid += 1
                if sends or recvs:
                    self.steps.append(("round", RoundStep(sends, recvs)))
        self.tmp_elems = schedule.tmp_elems[me]


class Execution:
    """One run of a plan. ``bufs`` maps "in"/"out"/"tmp" to flat arrays."""

    def __init__(self, engine, plan: Plan, bufs: dict, comm_id: int, seq: int, op: str,
                 reduce_op: str = "sum"):
        self.engine = engine
        self.plan = plan
        self.bufs = bufs
        self.comm_id = comm_id
        self.seq = seq
        self.op = op
        self.reduce_op = reduce_op
        self.dtype = bufs[IN].dtype
        self._itemsize = self.dtype.itemsize
        self._reduce = None
        self.algorithm = None
        self.step = 0
        self._posted = False
        self._missing: list[int] = []
        self._pending: list = []
        self.done = False
        self.error: BaseException | None = None
        self.t_start = time.perf_counter()
        self.t_end = None

    def waiting_for(self):
        """(step index, [(peer, xid)]) this execution still waits on: for diagnosis."""
        steps = self.plan.steps
        if self.done or self.step >= len(steps):
            return self.step, []
        kind, st = steps[self.step]
        if kind != "round":
            return self.step, []
        missing = self._missing if self._posted else range(len(st.recvs))
        seen, out = set(), []
        for i in missing:
            r = st.recvs[i]
            if (r.src, r.xid) not in seen:
                seen.add((r.src, r.xid))
                out.append((r.src, r.xid))
        return self.step, out

    def fail(self, err: BaseException) -> None:
        self.error = err
        self._finish()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            self.t_end = time.perf_counter()

    def advance(self) -> bool:
        """Run as far as arrived data allows; True once finished. Call with the
        engine's lock held."""
        steps = self.plan.steps
        eng = self.engine
        cid, seq = self.comm_id, self.seq
        while self.step < len(steps):
            kind, st = steps[self.step]
            if kind == "locals":
                for lo in st:
                    self._local(lo)
                self.step += 1
                continue
            if not self._posted:
                bufs = self.bufs
                for s in st.sends:
                    payload = bufs[s.buf][s.off:s.off + s.count].view(np.uint8)
                    p = eng.send((cid, seq, s.xid, s.piece), s.dst, payload, s.total)
                    if p is not None:
                        self._pending.append(p)
                if st.hazard:
                    for p in self._pending:
                        p.detach()
                self._missing = list(range(len(st.recvs)))
                self._posted = True
            if self._missing:
                inbox = eng.inbox
                recvs = st.recvs
                still = []
                for i in self._missing:
                    if still and st.ordered:
                        still.append(i)
                        continue
                    r = recvs[i]
                    a = inbox.pop((cid, seq, r.xid, r.piece), None)
                    if a is None:
                        still.append(i)
                    else:
                        self._deliver(a, r)
                self._missing = still
                if still:
                    return False
            for p in self._pending:
                p.detach()  # the buffers change from here on
            self._pending = []
            self.step += 1
            self._posted = False
        self._finish()
        return True

    def _deliver(self, a, r: Recv) -> None:
        data = a.data
        if data.nbytes != r.count * self._itemsize:
            a.release()
            raise RuntimeError(
                f"{self.op}: rank {a.origin} sent {data.nbytes} bytes where "
                f"{r.count * self._itemsize} were expected (transfer {r.xid}, piece {r.piece})")
        if r.count:
            dst = self.bufs[r.buf][r.off:r.off + r.count]
            src = data.view(self.dtype)
            if r.reduce:
                if self._reduce is None:
                    self._reduce = kernels.reducer(self.reduce_op, self.dtype)
                self._reduce(dst, src)
            else:
                dst[...] = src
        a.release()

    def _region(self, buf, off, count):
        return self.bufs[buf][off:off + count]

    def _local(self, lo) -> None:
        dst = self._region(lo.dst_buf, lo.dst_off, lo.count)
        if lo.kind == "copy":
            dst[...] = self._region(lo.src_buf, lo.src_off, lo.count)
        elif lo.kind == "reduce":
            kernels.reduce_into(dst, np.ascontiguousarray(
                self._region(lo.src_buf, lo.src_off, lo.count)), self.reduce_op)
        elif lo.kind == "divide":
            kernels.divide_into(dst, lo.divisor)
        elif lo.kind == "zero":
            dst[...] = np.zeros(1, dst.dtype)[0]
        else:
            raise AssertionError(lo.kind)


def make_buffers(x_flat, out_flat, tmp_elems, dtype):
    return {IN: x_flat, OUT: out_flat, TMP: np.empty(tmp_elems, dtype)}
