"""The transport: one progress engine per process over a private MPI communicator.

Every hop is one buffer-based MPI message to a neighbour: a fixed header (int64[8])
followed by the payload when it is small (up to 32 KiB); a larger payload follows
in a second message straight from the sender's buffer. The receiver's engine reads the header and either
keeps the payload for a local consumer (keyed by communicator id, sequence number
and transfer id) or forwards it one hop further along ``Topology.route``. So a
rank forwards for groups it is not a member of, as long as it is inside any
neuron_mpi call; at exit every rank keeps forwarding until all ranks are done
(``drain``). Nothing is pickled.

Waiting blocks in ``MPI.Request.Waitany`` on the header receive plus the pending
sends, so an idle rank sleeps in MPI's own progress loop (which yields the CPU when
oversubscribed) rather than spinning in Python.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

HDR_LEN = 8
HDR_BYTES = HDR_LEN * 8
INLINE_MAX = 32 * 1024  # payloads up to this ride in the header's message
TAG_HDR = 0x4E31
TAG_DATA = 0x4E32
K_DATA = 1
K_WAKE = 2  # wakes a blocked Waitany (watchdogs); carries nothing


class Engine:
    def __init__(self, comm: MPI.Comm, topo):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.topo = topo
        self._rbuf = np.empty(HDR_BYTES + INLINE_MAX, np.uint8)
        self._hdr = self._rbuf[:HDR_BYTES].view(np.int64)
        self._status = MPI.Status()
        self._hdr_req = comm.Irecv(self._rbuf, MPI.ANY_SOURCE, TAG_HDR)
        self._stash: dict[tuple, np.ndarray] = {}
        self._sends: list = []  # [request, keepalive]
        self.ledger: dict[tuple[int, str], list[int]] = {}
        self.active: list = []  # executions that progress whenever the engine runs
        self.closed = False
        # the exit barrier runs on its own communicator: a rank that leaves early must
        # not have its barrier matched against the others' collective calls
        self._exit_comm = comm.Dup()
        self.watchdog = Watchdog(self)
        self.threaded = MPI.Query_thread() >= MPI.THREAD_MULTIPLE

    # --- sending -----------------------------------------------------------------
    def post(self, key: tuple[int, int, int], dst: int, payload: np.ndarray,
             origin: int | None = None) -> list:
        """Send ``payload`` (a contiguous uint8 view) towards world rank ``dst``.
        Returns the requests of this hop (complete once the bytes left)."""
        origin = self.rank if origin is None else origin
        if dst == self.rank:
            self._stash[key] = payload.copy()
            return []
        path = self.topo.route(origin, dst)
        nxt = path[path.index(self.rank) + 1]
        nbytes = payload.nbytes
        inline = nbytes <= INLINE_MAX
        msg = np.empty(HDR_BYTES + (nbytes if inline else 0), np.uint8)
        msg[:HDR_BYTES].view(np.int64)[:] = (K_DATA, key[0], key[1], key[2], nbytes, dst,
                                              origin, inline)
        if inline:
            msg[HDR_BYTES:] = payload
        reqs = [self.comm.Isend(msg, nxt, TAG_HDR)]
        self._sends.append([reqs[0], msg])
        if not inline:
            reqs.append(self.comm.Isend(payload, nxt, TAG_DATA))
            self._sends.append([reqs[1], payload])
        spec = self.topo.link_between_ranks(self.rank, nxt)
        entry = self.ledger.setdefault((nxt, spec.kind), [0, 0])
        entry[0] += nbytes
        entry[1] += 1
        return reqs

    def wake(self) -> None:
        """Make a blocked wait on this rank return (safe from another thread)."""
        hdr = np.array([K_WAKE, 0, 0, 0, 0, self.rank, self.rank, 0], np.int64)
        self.comm.Send(hdr, self.rank, TAG_HDR)

    # --- receiving ---------------------------------------------------------------
    def take(self, key) -> np.ndarray | None:
        return self._stash.pop(key, None)

    def has(self, key) -> bool:
        return key in self._stash

    def _on_header(self) -> None:
        h = self._hdr.copy()
        src = self._status.Get_source()
        nbytes = int(h[4])
        if h[0] == K_DATA and h[7]:
            buf = self._rbuf[HDR_BYTES:HDR_BYTES + nbytes].copy()
        self._hdr_req = self.comm.Irecv(self._rbuf, MPI.ANY_SOURCE, TAG_HDR)
        if h[0] == K_WAKE:
            return
        if not h[7]:
            buf = np.empty(nbytes, np.uint8)
            self.comm.Recv(buf, src, TAG_DATA)
        key = (int(h[1]), int(h[2]), int(h[3]))
        dst = int(h[5])
        if dst == self.rank:
            self._stash[key] = buf
        else:
            self.post(key, dst, buf, origin=int(h[6]))

    def _gc_sends(self) -> None:
        self._sends = [s for s in self._sends if s[0] != MPI.REQUEST_NULL]

    def poll(self) -> None:
        """Serve whatever has arrived, without blocking."""
        while self._hdr_req.Test(self._status):
            self._on_header()
        if self._sends:
            MPI.Request.Testsome([s[0] for s in self._sends])
            self._gc_sends()

    def _advance_active(self) -> None:
        if self.active:
            self.active = [ex for ex in self.active if not ex.advance()]

    def wait_until(self, done, extra=None, deadline=None, on_timeout=None) -> None:
        """Progress (serving and forwarding) until ``done()`` is true. ``extra``:
        other requests whose completion ``done`` depends on (they wake the wait).
        ``deadline`` (time.monotonic()): past it, raise ``on_timeout()``."""
        self.poll()
        self._advance_active()
        if done():
            return
        if deadline is not None:
            self.watchdog.arm(deadline)
        try:
            self._wait_loop(done, extra, deadline, on_timeout)
        finally:
            if deadline is not None:
                self.watchdog.disarm()

    def _wait_loop(self, done, extra, deadline, on_timeout) -> None:
        while not done():
            if deadline is not None and time.monotonic() >= deadline:
                raise on_timeout()
            ext = [r for r in (extra or ()) if r != MPI.REQUEST_NULL]
            reqs = [self._hdr_req] + ext + [s[0] for s in self._sends]
            if deadline is not None and not self.threaded:
                # no MPI_THREAD_MULTIPLE, so no watchdog: poll with short sleeps
                idx, flag = MPI.Request.Testany(reqs, self._status)
                if not flag:
                    time.sleep(0.0005)
                    continue
            else:
                idx = MPI.Request.Waitany(reqs, self._status)
            if idx == 0:
                self._on_header()
            elif idx != MPI.UNDEFINED and idx > len(ext):
                self._sends[idx - 1 - len(ext)][0] = MPI.REQUEST_NULL
                self._gc_sends()
            self.poll()
            self._advance_active()

    def sends_pending(self) -> bool:
        self.poll()
        return bool(self._sends)

    def drain(self, timeout: float | None = None) -> None:
        """Keep forwarding until every rank has arrived here and this rank's own
        sends are out (registered with atexit). Gives up after ``timeout`` seconds
        (default NEURON_MPI_TIMEOUT or 60): the others are then stuck waiting for this
        rank, and their own deadlines end the job."""
        if self.closed or MPI.Is_finalized():
            return
        self.closed = True
        if timeout is None:
            try:
                timeout = float(os.environ.get("NEURON_MPI_TIMEOUT") or 60.0)
            except ValueError:
                timeout = 60.0
        deadline = time.monotonic() + timeout if timeout > 0 else None
        barrier = [self._exit_comm.Ibarrier()]
        try:
            self.wait_until(lambda: barrier[0] == MPI.REQUEST_NULL and not self.sends_pending(),
                            extra=barrier, deadline=deadline, on_timeout=_DrainTimeout)
        except _DrainTimeout:
            print(f"[rank {self.rank}] neuron_mpi: at exit, other ranks did not finish "
                  f"within {timeout:g} s; leaving without them", file=sys.stderr, flush=True)
            return
        self._hdr_req.Cancel()
        self._hdr_req.Wait()

    def link_stats(self) -> list[dict]:
        return [{"src": self.rank, "dst": dst, "link": kind, "bytes": b, "messages": m}
                for (dst, kind), (b, m) in sorted(self.ledger.items())]


class _DrainTimeout(Exception):
    pass


class Watchdog:
    """Wakes the engine's blocked wait at a deadline: a thread that sleeps on a
    condition and, when the deadline passes, sends the rank a header-only message
    to itself (MPI is initialised with MPI_THREAD_MULTIPLE by mpi4py)."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._cond = threading.Condition()
        self._deadline = None
        self._thread = None

    def arm(self, deadline: float) -> None:
        with self._cond:
            self._deadline = deadline
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="neuron_mpi-watchdog",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline = None
                try:
                    self._engine.wake()
                except Exception:  # MPI already finalized: nothing left to wake
                    return
