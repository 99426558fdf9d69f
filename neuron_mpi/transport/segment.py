"""The shared-memory segment of one domain (the ranks of a host, or of one emulated
node): its layout, creation and unlinking, and the agreement boards in it.

Layout of the segment (every region 4 KiB-aligned; L local ranks, K slots per
channel, S bytes per slot, N ranks in the job):

  ctl     int32 [L][16]     per rank: [0] doorbell (futex word), [1] sleepers
  state   int64 [L][L][K]   [dst][src][k]: 0 empty, else the slot's generation
  want    int32 [L][L]      [dst][src]: src waits for a free slot to dst
  posted  int64 [L][L][2]   [dst][src]: (communicator, transfer + 1) of the message
                            dst waits for in a large recv from src (0: none)
  hdr     int64 [L][L][K][16]  the header of a full slot
  ledger  int64 [L][N][2]   bytes and messages from local rank a to rank b
  boards  NB agreement boards (see Board)
  data    uint8 [L][L][K][S]   the landing slots

A channel src -> dst has K fixed landing slots. The sender copies a piece (at most
S bytes) into a free slot, writes its header, publishes the slot's generation with
a sequentially consistent store and rings dst's doorbell: an atomic add, and a
futex wake only if dst has a sleeper. The receiver reduces or copies straight from
the slot into its buffer, then frees the slot (and rings the sender if it waits for
one). So a payload is copied once per transfer, however many links its route
crosses; the ledger is charged for every link. Pages are touched only on channels
in use, so memory grows with the traffic pattern, not with N^2.

The segment is created by the domain's first rank, opened by the others and
unlinked as soon as every rank has it mapped: nothing is left in /dev/shm whatever
happens to the job afterwards. A segment left by a job killed during that window
(its creator's pid is in the name) is removed by the next job that starts.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets

import numpy as np

from ..kernels import atomics as A
from . import futex

SHM_DIR = "/dev/shm"
PREFIX = "neuron_mpi-"
MAGIC = 0x4E4D5348  # "NMSH"
CTL_STRIDE = 16  # int32 per rank: one cache line
HDR_WORDS = 16
FP_WORDS = 16  # int64 per member on an agreement board
N_BOARDS = 256
_ALIGN = 4096


def _align(n: int, a: int = _ALIGN) -> int:
    return -(-n // a) * a


class Layout:
    """Offsets of the regions for L local ranks, N ranks, K slots of S bytes."""

    def __init__(self, L: int, N: int, K: int, S: int):
        self.L, self.N, self.K, self.S = L, N, K, S
        off = _align(64)
        self.ctl = off
        off = _align(off + L * CTL_STRIDE * 4)
        self.state = off
        off = _align(off + L * L * K * 8)
        self.want = off
        off = _align(off + L * L * 4)
        self.posted = off
        off = _align(off + L * L * 2 * 8)
        self.hdr = off
        off = _align(off + L * L * K * HDR_WORDS * 8)
        self.ledger = off
        off = _align(off + L * N * 2 * 8)
        self.board_stride = _align(3 * 64 + 2 * L * FP_WORDS * 8, 64)
        self.boards = off
        off = _align(off + N_BOARDS * self.board_stride)
        self.data = off
        off = _align(off + L * L * K * S)
        self.total = off


def _remove_stale() -> None:
    """Unlink segments whose creating process is gone (a job killed while starting)."""
    pat = re.compile(re.escape(PREFIX) + r"(\d+)-[0-9a-f]+$")
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return
    for name in names:
        m = pat.match(name)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(SHM_DIR, name))
            except OSError:
                pass
        except PermissionError:
            pass


def _arr(buf, offset: int, dtype, count: int) -> np.ndarray:
    return np.frombuffer(buf, dtype, count, offset)


class Board:
    """An agreement board of one communicator whose members share the segment:
    every member writes its fingerprint in its row of the parity ``seq % 2`` table
    and adds one to that parity's arrival counter; the member whose add completes
    the count wakes the others: a futex wake on the counter if the Python path
    sleeps there (its sleepers are counted beside it) and a ring of every member's
    doorbell (where compiled runs and the engine's waiters sleep; on a board made
    with ``ring`` False only while a member waits for it there, counted in the
    counter's third word: ``wait_in_engine``). Two parities suffice:
    a member writes call seq+2 only after every member arrived at seq+1, that is
    after every member has read the table of seq."""

    def __init__(self, seg, index: int, bells: np.ndarray, ring_many, ring: bool = True):
        lay = seg.layout
        base = lay.boards + index * lay.board_stride
        self._seg = seg
        self.size = len(bells)
        self.bells = bells  # the members' local indices: their doorbells
        self._ring_many = ring_many
        self._ring = ring
        # per parity: [0] the arrivals, [1] the Python path's sleepers on them, [2] the
        # members that wait for them in their engine's progress (wait_in_engine)
        self.counters = [_arr(seg.buf, base + 64 * (1 + p), np.int32, 3) for p in (0, 1)]
        self.tables = [_arr(seg.buf, base + 192 + p * lay.L * FP_WORDS * 8, np.int64,
                            lay.L * FP_WORDS).reshape(lay.L, FP_WORDS) for p in (0, 1)]
        self.uses = [0, 0]  # this member's completed agreements per parity

    def arrive(self, parity: int, member: int, row: np.ndarray, bells=None) -> int:
        """Publish ``row``; returns the counter value every member waits for.
        ``bells``: the doorbells to ring when this completes the turn (default
        every member's; on a board that rings only for members waiting in their
        engine, those of the members that may wait for this turn)."""
        t = self.tables[parity]
        t[member, :row.size] = row
        t[member, row.size:] = 0
        target = self.size * (self.uses[parity] + 1)
        c = self.counters[parity]
        old = A.fetch_add(c, 0, 1)
        if old + 1 == target:
            if A.load(c, 1) > 0:
                futex.wake(c.ctypes.data)
            if self._ring or A.load(c, 2) > 0:
                self._ring_many(self.bells if bells is None else bells)
        return target

    def ready(self, parity: int, target: int) -> bool:
        return int(A.load(self.counters[parity], 0)) - target >= 0

    def wait_in_engine(self, parity: int, n: int) -> None:
        """``n`` = 1: this member waits for the turn of ``parity`` in its engine's
        progress, asleep on its doorbell (an async call's agreement), so the last
        to arrive must ring the doorbells even on a board that rings none; -1:
        no longer. Raise it before looking at ready() again: an arrival either
        comes after it (and rings) or is seen by that look."""
        A.fetch_add(self.counters[parity], 2, n)

    def wait(self, parity: int, target: int, timeout: float | None) -> bool:
        """Sleep until every member arrived (True) or ``timeout`` passed (False)."""
        c = self.counters[parity]
        A.fetch_add(c, 1, 1)
        try:
            v = int(A.load(c, 0))
            if v - target >= 0:
                return True
            futex.wait(c.ctypes.data, v, timeout)
        finally:
            A.fetch_add(c, 1, -1)
        return self.ready(parity, target)

    def done(self, parity: int) -> None:
        self.uses[parity] += 1

    def table(self, parity: int) -> np.ndarray:
        return self.tables[parity][:self.size].copy()


class Segment:
    """The mapped segment of one domain (``members``: its world ranks, sorted)."""

    def __init__(self, domain_comm, members, n_world: int, slots: int, slot_bytes: int):
        self.members = list(members)
        self.L = len(self.members)
        self.layout = Layout(self.L, n_world, slots, slot_bytes)
        lay = self.layout
        path = None
        if domain_comm.Get_rank() == 0:
            _remove_stale()
            path = os.path.join(SHM_DIR, f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, lay.total)
                self.buf = mmap.mmap(fd, lay.total)
            finally:
                os.close(fd)
            head = _arr(self.buf, 0, np.int64, 8)
            head[:5] = (MAGIC, self.L, n_world, slots, slot_bytes)
        path = _bcast_path(domain_comm, path)
        if domain_comm.Get_rank() != 0:
            fd = os.open(path, os.O_RDWR)
            try:
                self.buf = mmap.mmap(fd, lay.total)
            finally:
                os.close(fd)
        self.path = path
        # everyone has it mapped: take the name away now
        domain_comm.Barrier()
        if domain_comm.Get_rank() == 0:
            os.unlink(path)
        head = _arr(self.buf, 0, np.int64, 8)
        if head[0] != MAGIC or head[1] != self.L:
            raise RuntimeError(f"shared-memory segment {path}: unexpected header {head[:5]}")
        L, K, S = self.L, slots, slot_bytes
        self.ctl = _arr(self.buf, lay.ctl, np.int32, L * CTL_STRIDE)
        self.state = _arr(self.buf, lay.state, np.int64, L * L * K)
        self.want = _arr(self.buf, lay.want, np.int32, L * L)
        self.posted = _arr(self.buf, lay.posted, np.int64, L * L * 2)
        self.hdr = _arr(self.buf, lay.hdr, np.int64, L * L * K * HDR_WORDS).reshape(
            L * L * K, HDR_WORDS)
        self.ledger = _arr(self.buf, lay.ledger, np.int64, L * n_world * 2)
        self.data = _arr(self.buf, lay.data, np.uint8, L * L * K * S).reshape(L * L * K, S)

    def bell_addr(self, local: int) -> int:
        return self.ctl.ctypes.data + local * CTL_STRIDE * 4

    def close(self) -> None:
        for name in ("ctl", "state", "want", "posted", "hdr", "ledger", "data"):
            setattr(self, name, None)
        try:
            self.buf.close()
        except BufferError:
            pass  # views still alive (an arrival kept by the user): the OS unmaps at exit


def _bcast_path(comm, path):
    """Broadcast the segment's path (a fixed-size byte buffer: no pickle)."""
    buf = np.zeros(256, np.uint8)
    if comm.Get_rank() == 0:
        raw = path.encode()
        buf[:len(raw)] = np.frombuffer(raw, np.uint8)
    comm.Bcast(buf, root=0)
    return bytes(buf[:np.flatnonzero(buf == 0)[0]]).decode()
