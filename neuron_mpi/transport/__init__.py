"""Transports: how one piece of payload reaches another rank.

The engine (neuron_mpi/engine.py) sees every transport through the same small
interface, as NCCL's ``ncclTransport`` or ASTRA-sim's network API:

    reaches(rank) -> bool          can this transport deliver to that world rank directly
    post(rank, header, payload) -> bool
                                   hand one piece to ``rank``; False: no room now, the
                                   engine keeps the piece and posts it again later
    take(key) -> Arrival | None    the piece with this key, if it waits in the transport
    collect(out)                   append the Arrivals the engine must file itself
                                   (MPI arrivals; pieces passing through this rank)
    unblock(out, dead)             backpressure: copy aside pieces that keep a waiting
                                   sender out, appending them to ``out``; pieces of
                                   the failed communicators ``dead`` are freed instead
    pending() -> bool              pieces of ours still in flight inside the transport
    flush(deadline)                wait until they are out (at exit)
    close()

``header`` is the piece's identity and routing: (communicator id, call, transfer,
piece, piece bytes, message bytes, origin rank, destination rank). A transport
never knows which collective or algorithm a piece belongs to, and never routes: the
engine picks the next rank (``router.NextHops``) and charges the link ledger.

Two transports exist: ``shm`` (ranks of one host, or of one emulated node, through a
shared /dev/shm segment, waking each other with futexes) and ``mpi`` (buffer-based
MPI messages, the hops between hosts: the EFA links of the hierarchical stage).
"""
from __future__ import annotations

import numpy as np

HEADER_FIELDS = ("comm", "seq", "xid", "piece", "nbytes", "total", "origin", "dst")
HEADER_LEN = len(HEADER_FIELDS)


class Arrival:
    """One piece that arrived for this rank (or for it to forward). ``data`` is a
    uint8 view of the payload: in the transport's memory (a landing slot) until
    ``release()`` or ``detach()``. ``error``: why its payload could not be had (a
    read of its sender's buffer that failed while the piece was copied aside), None
    when it could; whoever takes such a piece raises it (Engine.take)."""

    __slots__ = ("key", "total", "origin", "dst", "data", "_owner", "_slot", "_src", "error")

    def __init__(self, key, total, origin, dst, data, owner=None, slot=-1, src=-1,
                 error=None):
        self.key = key
        self.total = total
        self.origin = origin
        self.dst = dst
        self.data = data
        self._owner = owner
        self._slot = slot
        self._src = src
        self.error = error

    def release(self) -> None:
        """The payload has been consumed: give its memory back to the transport."""
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.release(self._slot, self._src)

    def detach(self) -> None:
        """Copy the payload into private memory and free the transport's memory."""
        if self._owner is not None:
            self.data = self.data.copy()
            self.release()

    @property
    def in_transport(self) -> bool:
        return self._owner is not None


def private_arrival(header, payload: np.ndarray) -> Arrival:
    comm, seq, xid, piece, _nbytes, total, origin, dst = header
    return Arrival((comm, seq, xid, piece), total, origin, dst, payload)
