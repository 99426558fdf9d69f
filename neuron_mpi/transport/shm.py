"""The shared-memory transport: pieces between ranks of one domain through the
landing slots of the domain's segment (transport/segment.py).

Ordering and visibility: a sender writes the header and payload of a free slot,
then publishes the slot's generation with a sequentially consistent store, then
rings the receiver's doorbell (an atomic add; a futex wake only when the receiver
has a sleeper). A receiver reads the doorbell before it scans, so a piece posted
after its scan changes the doorbell and the futex wait returns at once. Freeing a
slot is a sequentially consistent store of 0, after the payload has been read; a
sender that found no free slot raised its ``want`` flag first, and the receiver
rings it when it frees one.
"""
from __future__ import annotations

import numpy as np

from ..kernels import atomics as A
from . import Arrival, futex
from .segment import CTL_STRIDE, N_BOARDS, Board


class ShmTransport:
    name = "shm"

    def __init__(self, segment, me_world: int):
        seg = self.seg = segment
        self.members = seg.members
        self.local = {w: i for i, w in enumerate(seg.members)}
        self.me = self.local[me_world]
        self.L = seg.L
        self.K = seg.layout.K
        self.S = seg.layout.S
        self._gen = 0
        self._known: dict[int, Arrival] = {}  # full slots of ours already collected
        self._scanned = None  # doorbell value at the last scan
        me, L, K = self.me, self.L, self.K
        self._in_state = seg.state[me * L * K:(me + 1) * L * K]
        self._in_want = seg.want[me * L:(me + 1) * L]
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

    def ring(self, local: int, word: int = 0) -> None:
        ctl = self.seg.ctl
        i = local * CTL_STRIDE + word
        A.fetch_add(ctl, i, 1)
        if A.load(ctl, i + 1) > 0:
            futex.wake(self.seg.bell_addr(local) + 4 * word)

    def reaches(self, world: int) -> bool:
        return world in self.local

    # --- sending ------------------------------------------------------------------------
    def _free_slot(self, base: int) -> int:
        st = self.seg.state
        for k in range(self.K):
            if st[base + k] == 0:
                return base + k
        return -1

    def post(self, world: int, header, payload: np.ndarray) -> bool:
        d = self.local[world]
        L, K, me = self.L, self.K, self.me
        base = (d * L + me) * K
        slot = self._free_slot(base)
        if slot < 0:
            # ask for a slot, then look once more (the receiver may have freed one
            # before it could see the flag)
            A.store(self.seg.want, d * L + me, 1)
            slot = self._free_slot(base)
            if slot < 0:
                self.ring(d)
                self.ring(d, 2)  # its agent frees slots if nobody else does
                return False
        n = payload.nbytes
        if n > self.S:
            raise ValueError(f"piece of {n} bytes exceeds the slot size {self.S}")
        seg = self.seg
        h = seg.hdr[slot]
        h[:len(header)] = header
        if n:
            seg.data[slot, :n] = payload
        self._gen += 1
        A.store(seg.state, slot, self._gen)
        self.ring(d)
        return True

    # --- receiving ----------------------------------------------------------------------
    def collect(self, out: list) -> None:
        ctl = self.seg.ctl
        bell = int(A.load(ctl, self.me * CTL_STRIDE))
        if bell == self._scanned:
            return
        self._scanned = bell
        # a snapshot: senders write these words while we look
        full = np.flatnonzero(self._in_state.copy())
        if not full.size:
            return
        seg = self.seg
        base = self.me * self.L * self.K
        known = self._known
        for i in full.tolist():
            slot = base + i
            if slot in known:
                continue
            comm, seq, xid, piece, nbytes, total, origin, dst = seg.hdr[slot, :8].tolist()
            a = Arrival((comm, seq, xid, piece), total, origin, dst, seg.data[slot, :nbytes],
                        self, slot, i // self.K)
            known[slot] = a
            out.append(a)

    def release(self, slot: int, src: int) -> None:
        self._known.pop(slot, None)
        A.store(self.seg.state, slot, 0)
        w = self.me * self.L + src
        if self._in_want[src]:
            A.store(self.seg.want, w, 0)
            self.ring(src)

    def wanted(self) -> bool:
        """Some sender waits for a slot to this rank."""
        return bool(self._in_want.any())

    def unblock(self) -> None:
        """A sender waits for a slot to this rank while all of its channel's slots
        hold pieces nobody can take yet (they belong to a later step, or to a call
        this rank has not started): copy those out, so the sender goes on."""
        wanting = np.flatnonzero(self._in_want.copy())
        if not wanting.size:
            return
        parked: dict[int, list] = {}
        for a in list(self._known.values()):
            parked.setdefault(a._src, []).append(a)
        for s in wanting.tolist():
            held = parked.get(s, ())
            if len(held) >= self.K:
                for a in held:
                    a.detach()

    def pending(self) -> bool:
        return False  # a posted piece is in the receiver's slot already

    def flush(self, deadline=None) -> None:
        pass

    # --- boards and ledger ----------------------------------------------------------------
    def board(self, comm_id: int, size: int) -> Board | None:
        """The agreement board of a communicator whose members are all in this
        domain (claimed by compare-and-swap in an open-addressed table), or None
        when the table is full."""
        b = self._boards.get(comm_id)
        if b is not None:
            return b
        h = comm_id % N_BOARDS
        for probe in range(N_BOARDS):
            idx = (h + probe) % N_BOARDS
            old = A.compare_exchange(self._board_area, idx * self._board_words, 0, comm_id)
            if old == 0 or old == comm_id:
                b = Board(self.seg, idx, size)
                self._boards[comm_id] = b
                return b
        return None

    def ledger(self) -> np.ndarray:
        return self.seg.ledger

    def close(self) -> None:
        self._known.clear()
        self._boards.clear()
        self._in_state = self._in_want = self._board_area = None
        self.seg.close()
