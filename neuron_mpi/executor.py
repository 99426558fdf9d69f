"""The executor: runs one rank's part of any schedule on the progress engine.

It never knows which algorithm made the schedule. ``Plan`` is this rank's slice of
a schedule (built once per schedule and cached); ``Execution`` is one run of a plan
on real buffers, a small state machine that ``Engine.wait_until`` advances (so
several collectives, e.g. async ones, progress together).
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from . import kernels
from .schedule import IN, OUT, TMP, Locals, Round


class Plan:
    """Member ``me``'s steps: ('locals', [Local]) or ('round', sends, recvs) where
    sends = [(xid, dst_world, buf, off, count)] and recvs = [(xid, src_world, buf,
    off, count, reduce)] in delivery order."""

    def __init__(self, schedule, view, me: int):
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
                        sends.append((xid, view.ranks[x.dst], x.src_buf, x.src_off, x.count))
                    if x.dst == me:
                        recvs.append((xid, view.ranks[x.src], x.dst_buf, x.dst_off, x.count,
                                      x.reduce))
                    xid += 1
                if sends or recvs:
                    self.steps.append(("round", sends, recvs))
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
        self.step = 0
        self._posted = False
        self._send_reqs: list = []
        self.done = False
        self.t_start = time.perf_counter()
        self.t_end = None

    def _key(self, xid):
        return (self.comm_id, self.seq, xid)

    def _region(self, buf, off, count):
        return self.bufs[buf][off:off + count]

    def waiting_for(self):
        """(step index, [(peer, xid)]) this execution still waits on: for diagnosis."""
        if self.done or self.step >= len(self.plan.steps):
            return self.step, []
        kind, *rest = self.plan.steps[self.step]
        if kind != "round":
            return self.step, []
        return self.step, [(src, xid) for xid, src, *_ in rest[1]
                           if not self.engine.has(self._key(xid))]

    def advance(self) -> bool:
        """Run as far as arrived data allows; True once finished."""
        steps = self.plan.steps
        eng = self.engine
        while self.step < len(steps):
            kind, *rest = steps[self.step]
            if kind == "locals":
                for lo in rest[0]:
                    self._local(lo)
                self.step += 1
                continue
            sends, recvs = rest
            if not self._posted:
                for xid, dst, buf, off, count in sends:
                    payload = self._region(buf, off, count).view(np.uint8)
                    self._send_reqs += eng.post(self._key(xid), dst, payload)
                self._posted = True
            for xid, *_ in recvs:
                if not eng.has(self._key(xid)):
                    return False
            if self._send_reqs and not MPI.Request.Testall(self._send_reqs):
                return False
            self._send_reqs = []
            for xid, src, buf, off, count, reduce in recvs:
                data = eng.take(self._key(xid))
                dst = self._region(buf, off, count)
                incoming = data.view(dst.dtype)
                if incoming.size != dst.size:
                    raise RuntimeError(
                        f"{self.op}: rank {src} sent {data.nbytes} bytes where "
                        f"{dst.nbytes} were expected (transfer {xid})")
                if reduce:
                    kernels.reduce_into(dst, incoming, self.reduce_op)
                else:
                    dst[...] = incoming
            self.step += 1
            self._posted = False
        if not self.done:
            self.done = True
            self.t_end = time.perf_counter()
        return True

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
