"""The MPI transport: pieces as buffer-based MPI messages over a private duplicate
of the job's communicator (no pickle). These are the hops between hosts (the EFA
links of the hierarchical stage), or every hop with NEURON_MPI_TRANSPORT=mpi.

A piece is one message: a fixed int64 header followed by the payload when it is
small (up to INLINE_MAX bytes); a larger payload follows as a second message. The
payload is copied into the message at post time, so the sender's buffers are free
as soon as ``post`` returns (the schedule's "sources are read at the start of the
round"). MPI keeps per-sender order for each tag, so a header is always followed by
its own data message.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from . import HEADER_LEN, private_arrival

INLINE_MAX = 32 * 1024
TAG_HDR = 0x4E31
TAG_DATA = 0x4E32
_HDR_WORDS = HEADER_LEN + 1  # + the inline flag
_HDR_BYTES = _HDR_WORDS * 8


class MpiTransport:
    name = "mpi"

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self._rbuf = np.empty(_HDR_BYTES + INLINE_MAX, np.uint8)
        self._hdr = self._rbuf[:_HDR_BYTES].view(np.int64)
        self._status = MPI.Status()
        self._req = comm.Irecv(self._rbuf, MPI.ANY_SOURCE, TAG_HDR)
        self._sends: list = []  # [request, keepalive]

    def reaches(self, world: int) -> bool:
        return True

    def post(self, world: int, header, payload: np.ndarray) -> bool:
        n = payload.nbytes
        inline = n <= INLINE_MAX
        msg = np.empty(_HDR_BYTES + (n if inline else 0), np.uint8)
        h = msg[:_HDR_BYTES].view(np.int64)
        h[:HEADER_LEN] = header
        h[HEADER_LEN] = inline
        if inline:
            msg[_HDR_BYTES:] = payload
        self._sends.append([self.comm.Isend(msg, world, TAG_HDR), msg])
        if not inline:
            data = payload.copy()
            self._sends.append([self.comm.Isend(data, world, TAG_DATA), data])
        return True

    def collect(self, out: list) -> None:
        while self._req.Test(self._status):
            h = self._hdr[:HEADER_LEN].tolist()
            inline = bool(self._hdr[HEADER_LEN])
            n = h[4]
            if inline:
                data = self._rbuf[_HDR_BYTES:_HDR_BYTES + n].copy()
            src = self._status.Get_source()
            self._req = self.comm.Irecv(self._rbuf, MPI.ANY_SOURCE, TAG_HDR)
            if not inline:
                data = np.empty(n, np.uint8)
                self.comm.Recv(data, src, TAG_DATA)
            out.append(private_arrival(h, data))
        if self._sends:
            MPI.Request.Testsome([s[0] for s in self._sends])
            self._sends = [s for s in self._sends if s[0] != MPI.REQUEST_NULL]

    def take(self, key):
        return None  # every arrival goes to the engine's inbox through collect()

    def release(self, slot, src=-1) -> None:
        pass

    def unblock(self, out: list, dead=None) -> None:
        pass

    def pending(self) -> bool:
        if self._sends:
            MPI.Request.Testsome([s[0] for s in self._sends])
            self._sends = [s for s in self._sends if s[0] != MPI.REQUEST_NULL]
        return bool(self._sends)

    def flush(self, deadline=None) -> bool:
        """Wait (polling, so other threads keep running) until every send is out;
        False if ``deadline`` passed first."""
        pause = 1e-4
        while self.pending():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        return True

    def close(self) -> None:
        try:
            self._req.Cancel()
            self._req.Wait()
        except MPI.Exception:
            pass
