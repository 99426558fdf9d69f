"""The shared-memory transport: pieces between ranks of one domain through the
landing slots of the domain's segment (transport/segment.py); the per-piece work is
compiled (transport/native.py).

Ordering and visibility: a sender writes the header and payload of a free slot,
then publishes the slot's generation with a sequentially consistent store, then
rings the receiver's doorbell (an atomic add; a futex wake only when the receiver
has a sleeper). A receiver reads the doorbell before it looks, so a piece posted
after its look changes the doorbell and its futex wait returns at once. Freeing a
slot is a sequentially consistent store of 0, after the payload has been read; a
sender that found no free slot raised its ``want`` flag first, and the receiver
rings it when it frees one.

A piece stays in its slot until someone asks for its key: an execution's round
(``native.round_pass``) or ``take``. If a sender waits for room while all slots of
its channel hold pieces nobody takes yet (a later round, a call not started), the
engine copies them aside (``unblock``), so no cycle of full channels can form.

A large piece a compiled run sends to its final destination, which copies it, may
leave its payload in the sender's buffer (``native.post_read``; docs/architecture.md,
"One copy for large copies"): every path here that takes a piece out of a slot reads
such a piece into private memory first (``native.read_slot``), which also tells its
sender the read is done.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np

from ..kernels import atomics as A
from . import Arrival, native
from .segment import CTL_STRIDE, HDR_WORDS, N_BOARDS, Board


#: bytes of private copies (pieces sent from Python, read by their receivers) a rank
#: keeps for reuse once read: two pieces of the default read size (4 MiB)
SPARE_BYTES = 8 << 20


class ShmTransport:
    name = "shm"

    def __init__(self, segment, me_world: int, spin: int = 0):
        seg = self.seg = segment
        self.members = seg.members
        self.local = {w: i for i, w in enumerate(seg.members)}
        self.me = self.local[me_world]
        self.L = seg.L
        self.K = seg.layout.K
        self.S = seg.layout.S
        self.spin = spin  # (NEURON_MPI_SHM_SPIN: yields before a wait sleeps)
        self.seg8 = np.frombuffer(seg.buf, np.uint8)
        self.g = native.geometry(seg.layout, self.me, me_world, os.getpid(), spin)
        self.gen = np.zeros(1, np.int64)
        self._scratch = np.empty(self.L * self.K, np.int64)
        self._none = np.zeros(0, np.int64)
        self._head = np.empty(8, np.int64)
        self._lent: list = []  # (slot, generation, private copy) of pieces to be read
        self._unposted: dict = {}  # piece key -> its private copy, when no slot was free
        self._spare: list = []  # private copies read and given back, for the next ones
        self._boards: dict[int, Board] = {}
        self._board_words = seg.layout.board_stride // 8
        self._board_area = np.frombuffer(seg.buf, np.int64, N_BOARDS * self._board_words,
                                         seg.layout.boards)

    # --- doorbells ----------------------------------------------------------------------
    def bell(self) -> tuple[np.ndarray, int]:
        """This rank's doorbell: (int32 array, index) of the futex word; the word
        after it counts the sleepers."""
        return self.seg.ctl, self.me * CTL_STRIDE

    def agent_bell(self) -> tuple[np.ndarray, int]:
        """The word this rank's agent sleeps on while it has nothing to do."""
        return self.seg.ctl, self.me * CTL_STRIDE + 2

    def ringer(self, word: int):
        """A compiled ring of this rank's ``word`` (0: doorbell, 2: agent), as
        engine.Bell.ring does it: add one, wake the sleepers if any."""
        return functools.partial(native.ring, self.seg8, self.g, self.me, word)

    def reaches(self, world: int) -> bool:
        return world in self.local

    # --- sending ------------------------------------------------------------------------
    def post(self, world: int, header, payload: np.ndarray) -> bool:
        h = self._head
        h[:] = header
        if payload.nbytes > self.S:
            return self._post_copy_to_read(world, h, payload)
        return native.post(self.seg8, self.g, self.gen, self.local[world], h,
                           payload.reshape(-1).view(np.uint8), self._none, 0, 0)

    def _post_copy_to_read(self, world: int, h, payload: np.ndarray) -> bool:
        """A piece larger than a slot (Engine.piece_for cuts them only where every
        rank of the domain reads pieces from their senders) sent from Python, which
        does not keep the caller's buffer: its receiver reads it from a private
        copy, kept until the read is done (two copies, as through a slot). A copy
        that found no free slot waits for the engine's next try of the same piece."""
        if not self.reads():
            raise ValueError(f"piece of {payload.nbytes} bytes exceeds the slot size "
                             f"{self.S}, and this rank's receivers do not read")
        self._return_lent()
        key = tuple(h[:4].tolist())
        keep = self._unposted.pop(key, None)
        if keep is None:
            data = payload.reshape(-1).view(np.uint8)
            keep = self._private(data.size)
            keep[:] = data
        slot = native.post_read(self.seg8, self.g, self.gen, self.local[world], h, keep, 0,
                                keep.size, self._none, 0, 0)
        if slot < 0:
            self._unposted[key] = keep
            return False
        self._lent.append((slot, int(self.gen[0]), keep))
        return True

    def _private(self, n: int) -> np.ndarray:
        """``n`` bytes of private memory for a copy to be read: a copy given back
        (_return_lent) when one is large enough, else new. Reusing them spares the
        page faults of fresh memory on every piece: a 1 MiB send on an 8-rank ring
        spent more of its time faulting the pages of its new copy in than copying."""
        spare = self._spare
        for i, buf in enumerate(spare):
            if buf.size >= n:
                del spare[i]
                return buf[:n]
        return np.empty(n, np.uint8)

    def _return_lent(self) -> None:
        """Give back the private copies whose receivers have read them (their slot
        no longer holds that generation, nor a read under way of it), keeping up to
        SPARE_BYTES of them for the next copies, the largest first."""
        if self._lent:
            state = self.seg.state
            keep, done = [], []
            for e in self._lent:
                (keep if int(state[e[0]]) in (e[1], -e[1]) else done).append(e)
            self._lent = keep
            if done:
                bufs = self._spare + [e[2].base if e[2].base is not None else e[2]
                                      for e in done]
                bufs.sort(key=len, reverse=True)
                self._spare, total = [], 0
                for b in bufs:
                    if total + b.size <= SPARE_BYTES:
                        self._spare.append(b)
                        total += b.size
                self._spare.reverse()  # (smallest first: _private takes the first that fits)

    # --- receiving ----------------------------------------------------------------------
    def _arrival(self, slot: int, private: bool = False) -> Arrival | None:
        comm, seq, xid, piece, nbytes, total, origin, dst = self.seg.hdr[slot, :8].tolist()
        if self.seg.hdr[slot, native.H_ADDR]:  # still in its sender's memory
            data = np.empty(nbytes, np.uint8)
            err = native.read_slot(self.seg8, self.g, slot, data, 0, nbytes)
            if err < 0:
                return None  # its sender failed and took it back
            if err:
                msg = native.read_failed(nbytes, origin, err, xid, piece)
                if not private:  # (taken by the execution that receives it: raised there)
                    raise RuntimeError(msg)
                # copied aside by whichever thread progresses (the agent too): the
                # slot is free again (read_slot), the piece is lost; it is filed
                # with its error, for the call that takes it to raise
                return Arrival((comm, seq, xid, piece), total, origin, dst, data[:0],
                               error=msg)
            return Arrival((comm, seq, xid, piece), total, origin, dst, data)
        data = self.slot_view(slot, nbytes)
        if private:
            a = Arrival((comm, seq, xid, piece), total, origin, dst, data.copy())
            native.release(self.seg8, self.g, slot)
            return a
        return Arrival((comm, seq, xid, piece), total, origin, dst, data, self, slot)

    def slot_view(self, slot: int, nbytes: int) -> np.ndarray:
        return self.seg.data[slot, :nbytes]

    def take(self, key) -> Arrival | None:
        """The piece with this key, if it is in one of this rank's slots."""
        slot = self._find(key)
        return None if slot < 0 else self._arrival(slot)

    def holds(self, key) -> bool:
        """Whether the piece with this key is in one of this rank's slots (left
        there: a piece still in its sender's memory is not read)."""
        return self._find(key) >= 0

    def total_of(self, key) -> int | None:
        """The size in bytes of the transfer whose piece ``key`` is in one of this
        rank's slots (its header's total), or None."""
        slot = self._find(key)
        return None if slot < 0 else int(self.seg.hdr[slot, 5])  # (_arrival's order)

    def _find(self, key) -> int:
        return native.find(self.seg8, self.g, key[0], key[1], key[2], key[3])

    def reads(self) -> bool:
        """Do this domain's receivers read pieces from their senders (enable_reads)?"""
        return bool(self.g[native.G_PULL])

    def enable_reads(self, min_bytes: int) -> None:
        """Let receivers read pieces of at least ``min_bytes`` that they copy straight
        from this rank's buffers (process_vm_readv): one copy instead of two. Only
        once every rank of the domain has shown it can (engine.make_engine)."""
        self.g[native.G_PULL] = min_bytes

    def collect(self, out: list) -> None:
        """Pieces that landed here on their way to another rank (several domains)."""
        self._aside(native.passing(self.seg8, self.g, self._scratch), out)

    def _aside(self, n: int, out: list) -> None:
        """The pieces of the first ``n`` scratch slots, copied (or read) into private
        memory, their slots freed, appended to ``out``."""
        for slot in self._scratch[:n].tolist():
            a = self._arrival(slot, private=True)
            if a is not None:
                out.append(a)

    def release(self, slot: int, src: int = -1) -> None:
        native.release(self.seg8, self.g, slot)

    # --- large receives posted: one copy for a send whose receiver waits -------------
    def post_receive(self, src: int, comm: int, xid: int) -> None:
        """Show that this rank waits in a receive for transfer ``xid`` of
        communicator ``comm`` from world rank ``src`` (its domain's): a send of that
        message may then leave its pieces in the sender's buffer for this rank to
        read (``receiving``). The transfer word is cleared first and set last, so
        a sender that reads it twice around the communicator word reads a pair
        that was posted together."""
        p, j = self.seg.posted, self.local[src]
        i = 2 * (self.me * self.L + j)
        p[i + 1] = 0
        p[i] = comm
        p[i + 1] = xid + 1
        native.ring(self.seg8, self.g, j, 0)  # (a sender may wait for it: await_receive)

    def unpost_receive(self, src: int) -> None:
        self.seg.posted[2 * (self.me * self.L + self.local[src]) + 1] = 0

    def receiving(self, dst: int, comm: int, xid: int) -> bool:
        """Does world rank ``dst`` (this domain's) wait in a receive for transfer
        ``xid`` of ``comm`` from this rank (post_receive)? (x86-64 keeps stores and
        loads in program order, the only target of the compiled plane.)"""
        p, i = self.seg.posted, 2 * (self.local[dst] * self.L + self.me)
        a = int(p[i + 1])
        c = int(p[i])
        return a == xid + 1 and c == comm and int(p[i + 1]) == a

    def await_receive(self, dst: int, comm: int, xid: int, bell, end: float) -> bool:
        """``receiving``, waiting for it until time.monotonic() ``end`` asleep on this
        rank's doorbell ``bell``, which post_receive rings."""
        while True:
            seen = bell.value()
            if self.receiving(dst, comm, xid):
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            bell.sleep(seen, left)

    def wanted(self) -> bool:
        """Some sender waits for a slot to this rank."""
        return bool(native.any_want(self.seg8, self.g))

    def unblock(self, out: list, dead: np.ndarray | None = None) -> None:
        """Copy aside the pieces of every channel whose sender waits while all its
        slots are full; they go to ``out`` (the engine's inbox). Pieces there for
        the failed communicators ``dead`` (sorted ids) are freed first (``drop``),
        which may leave nothing to copy. Also drops the private copies of pieces
        sent from Python that have been read."""
        if self._lent:
            self._return_lent()
        if dead is not None and dead.size and native.any_want(self.seg8, self.g):
            native.drop(self.seg8, self.g, dead)
        self._aside(native.stuck(self.seg8, self.g, self._scratch), out)

    def drop(self, dead: np.ndarray) -> int:
        """Free the slots holding pieces for this rank of the failed communicators
        ``dead`` (sorted ids): nobody will take them, and each would hold one of
        the K slots of its channel until the channel filled, when ``unblock``
        would copy every piece in it aside, live calls' too. Returns how many."""
        return int(native.drop(self.seg8, self.g, dead))

    def pending(self) -> bool:
        return False  # a posted piece is in the receiver's slot already

    def flush(self, deadline=None) -> bool:
        return True

    # --- boards and ledger ----------------------------------------------------------------
    def board(self, comm_id: int, ranks, ring: bool = True) -> Board | None:
        """The agreement board of a communicator whose members (``ranks``, world
        ranks) are all in this domain (claimed by compare-and-swap in an
        open-addressed table), or None when the table is full. ``ring``: the
        last member to arrive rings every member's doorbell (where compiled runs
        wait for the agreement) besides waking the board's own sleepers; False:
        only while a member waits for it in its engine (Board.wait_in_engine)."""
        b = self._boards.get(comm_id)
        if b is not None:
            return b
        h = comm_id % N_BOARDS
        for probe in range(N_BOARDS):
            idx = (h + probe) % N_BOARDS
            old = A.compare_exchange(self._board_area, idx * self._board_words, 0, comm_id)
            if old == 0 or old == comm_id:
                b = Board(self.seg, idx, np.array([self.local[r] for r in ranks], np.int64),
                          self._ring_many, ring)
                self._boards[comm_id] = b
                return b
        return None

    def _ring_many(self, bells: np.ndarray) -> None:
        native.ring_many(self.seg8, self.g, bells)

    def ledger(self) -> np.ndarray:
        return self.seg.ledger

    def close(self) -> None:
        self._boards.clear()
        self.seg8 = self._board_area = None
        self.seg.close()


__all__ = ["ShmTransport", "HDR_WORDS"]
