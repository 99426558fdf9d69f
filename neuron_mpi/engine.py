"""The engine: each rank's emulated CC core.

One Engine per process moves the pieces of every collective in flight. It owns the
transports (shared memory inside the rank's domain, MPI between domains), the
next-hop table, the inbox of pieces that arrived for this rank, the queue of
pieces waiting for room, the link ledger and the executions in flight.

Who runs it. ``progress()`` is called by whichever thread holds the engine's lock:

* the **caller's thread** while it waits in a blocking call (it drives the engine
  itself, so a blocking collective costs no thread switch);
* the **agent** thread (``Agent``, started at init) whenever no caller drives: it
  finishes async collectives while the program computes, forwards pieces that
  reach this rank over MPI on their way elsewhere, and frees landing slots that a
  sender waits for. It sleeps in the kernel (a futex) when there is nothing to do.

Waiting. Every transport rings this rank's doorbell (a futex word) when something
arrives for it; a waiter reads the doorbell, progresses, and sleeps only if the
doorbell still holds the value it read. With an MPI transport (whose arrivals do
not ring) the sleeps are short polls with backoff.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from . import env
from .executor import NO_CLAIM, deadline_ns
from .kernels import atomics as A
from .router import NextHops
from .transport import Arrival, futex, native, private_arrival
from .transport.native import CTL_ANY, CTL_COUNTING, TIMEOUT

CENSUS_XID = -1_000_000  # the census's pieces: transfer CENSUS_XID - member
POLL_MIN = 5e-5  # s: first pause when an MPI transport has to be polled
POLL_MAX = 2e-3
# the agent's longest pause polling MPI while nothing of this rank is in flight or
# queued: what comes then is for a later call (a message entering this domain goes
# straight to the rank of its route furthest in, router.NextHops)
POLL_IDLE = 0.05
# a caller waiting that long with nothing moved waits for a late rank: its polls of
# MPI slow down to POLL_IDLE (64 ranks on 2 cores polling every POLL_MAX burn both)
QUIET = 0.1
# a blocking call's compiled part (a plan in parts, Execution.part_run) polls MPI at
# most this often between its slices
PART_POLL = 0.01


class Pending:
    """A piece posted while the next rank had no room: kept (and posted again) by
    the engine. ``detach()`` copies its payload, so the sender's buffer is free."""

    __slots__ = ("hop", "header", "payload", "sent", "private")

    def __init__(self, hop, header, payload):
        self.hop = hop
        self.header = header
        self.payload = payload
        self.sent = False
        self.private = False

    def detach(self) -> None:
        if not self.sent and not self.private:
            self.payload = self.payload.copy()
            self.private = True


class Bell:
    """A futex word this rank sleeps on: its doorbell in the shared segment, or a
    private word when there is no segment."""

    def __init__(self, words: np.ndarray, index: int, ring=None):
        """``ring``: a compiled ring of this word (ShmTransport.ringer), one call
        instead of three atomics and a ctypes futex call."""
        self.words = words
        self.index = index
        self.addr = words.ctypes.data + index * words.itemsize
        self._ring = ring

    def value(self) -> int:
        return int(A.load(self.words, self.index))

    def ring(self) -> None:
        """Wake every sleeper: those on any ring and a compiled run counting
        pieces (transport.native's control words)."""
        if self._ring is not None:
            self._ring()
            return
        i = self.index
        A.fetch_add(self.words, i, 1)
        if A.load(self.words, i + CTL_ANY) > 0 or A.load(self.words, i + CTL_COUNTING) > 0:
            futex.wake(self.addr)

    def sleep(self, seen: int, timeout: float | None) -> None:
        A.fetch_add(self.words, self.index + CTL_ANY, 1)
        try:
            futex.wait(self.addr, seen, timeout)
        finally:
            A.fetch_add(self.words, self.index + CTL_ANY, -1)


def _private_bell() -> Bell:
    return Bell(np.zeros(16, np.int32), 0)


class _Held:
    """``with engine.held():`` (a class, not a generator: every call enters it)."""

    __slots__ = ("engine",)

    def __init__(self, engine):
        self.engine = engine

    def __enter__(self):
        self.engine._claim()

    def __exit__(self, *exc):
        eng = self.engine
        eng.lock.release()
        if not eng.driving and eng.background():
            eng.agent.poke()


class Engine:
    def __init__(self, comm: MPI.Comm, topo, piece_bytes: int, shm=None, mpi=None,
                 read_piece: int = 0, domains=None):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.topo = topo
        self.piece_bytes = piece_bytes
        # pieces of a copied transfer inside this domain, read from the sender's
        # buffer (no slot space): see piece_for(); 0: every piece is piece_bytes
        self.read_piece = read_piece if read_piece > piece_bytes else 0
        self._piece_for: dict[tuple[int, int], int] = {}
        self.shm = shm
        self.mpi = mpi
        self.transports = [t for t in (shm, mpi) if t is not None]
        from .transport import native
        self.native = shm is not None and native.SUPPORTED
        self.by_name = {t.name: t for t in self.transports}
        n = topo.size
        if shm is not None:
            self._ledger = shm.ledger()
            local = shm.local
            self.hops = NextHops(topo, self.rank, shm.members, lambda r: local[r], domains)
            self._my_row = local[self.rank]
            self.bell = Bell(*shm.bell(), ring=shm.ringer(0))
            agent_bell = Bell(*shm.agent_bell(), ring=shm.ringer(2))
        else:
            self._ledger = np.zeros(n * 2, np.int64)
            self.hops = NextHops(topo, self.rank, (), lambda r: 0)
            self._my_row = 0
            self.bell = _private_bell()
            agent_bell = _private_bell()
        # each world rank's shared-memory domain (its first member; -1: none); None
        # when not known
        self.domains = domains
        self.inbox: dict[tuple, Arrival] = {}
        self._dead: set[int] = set()  # failed communicators (forget())
        self._dead_ids = np.zeros(0, np.int64)  # the same, sorted (ShmTransport.drop)
        self.outq: list[Pending] = []
        self.active: list = []  # executions in flight
        self.lock = threading.Lock()
        # a thread that wants the lock raises this word and rings the doorbell: the
        # agent's compiled run, asleep on that doorbell, hands over (see held())
        self.claim = np.zeros(1, np.int32)
        self.driving = 0  # callers inside drive()
        self._held = _Held(self)
        self.closed = False
        self.threaded = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
        # the exit barrier runs on its own communicator: a rank that leaves early must
        # not have its barrier matched against another call
        self._exit_comm = comm.Dup()
        self.agent = Agent(self, agent_bell)
        self.agent.start()

    # --- sending --------------------------------------------------------------------
    def piece_for(self, src: int, dst: int) -> int:
        """Bytes per piece of a transfer from world rank ``src`` to ``dst`` that its
        receiver copies (a reduced one is always cut at ``piece_bytes``): larger
        (``read_piece``) when the whole route stays in this domain, where every rank
        publishes such pieces for their receivers to read (make_engine). Both ends
        of a transfer compute the same value."""
        if not self.read_piece:
            return self.piece_bytes
        key = (src, dst)
        per = self._piece_for.get(key)
        if per is None:
            per = self._piece_for[key] = (self.read_piece if self.hops.inside(src, dst)
                                          else self.piece_bytes)
        return per

    def send(self, key, dst: int, payload: np.ndarray, total: int,
             origin: int | None = None) -> Pending | None:
        """Move one piece (a contiguous uint8 array of at most ``piece_for(origin,
        dst)`` bytes) towards world rank ``dst``. Returns None once it is posted (its bytes are
        copied out of ``payload``), or a Pending the engine posts later. Call with
        the lock held."""
        origin = self.rank if origin is None else origin
        hop = self.hops.decide(origin, dst)
        header = (key[0], key[1], key[2], key[3], payload.nbytes, total, origin, dst)
        if hop.transport == "self":
            self.inbox[key] = private_arrival(header, payload.copy())
            return None
        if self.by_name[hop.transport].post(hop.to, header, payload):
            self._charge(hop, payload.nbytes, key)
            return None
        p = Pending(hop, header, payload)
        self.outq.append(p)
        return p

    def _charge(self, hop, nbytes: int, key) -> None:
        """Count one piece on every link of its hop, unless it is control traffic:
        the routed agreement (negative call numbers) or the census (transfer numbers
        at CENSUS_XID and below). Point-to-point messages (transfer -1 - source rank)
        are counted."""
        self._charge_links(hop.charges, nbytes, key)

    def _charge_links(self, c, nbytes: int, key) -> None:
        if key[1] < 0 or key[2] <= CENSUS_XID:
            return
        if len(c) == 2:
            A.fetch_add(self._ledger, c[0], nbytes)
            A.fetch_add(self._ledger, c[1], 1)
        else:
            vals = np.empty(len(c), np.int64)
            vals[0::2] = nbytes
            vals[1::2] = 1
            A.add_many(self._ledger, np.asarray(c, np.int64), vals)

    def _flush_outq(self) -> bool:
        did = False
        keep = []
        for p in self.outq:
            if self.by_name[p.hop.transport].post(p.hop.to, p.header, p.payload):
                p.sent = True
                self._charge(p.hop, p.payload.nbytes, p.header)
                did = True
            else:
                keep.append(p)
        self.outq = keep
        return did

    # --- progress -------------------------------------------------------------------
    def progress(self, mpi: bool = True) -> bool:
        """Post what waits for room, take in arrivals (keep or forward), advance the
        executions in flight. Call with the lock held. True if anything moved.
        ``mpi``: poll the MPI transport too (False: only what passes through this
        domain)."""
        did = self._flush_outq() if self.outq else False
        arrivals: list[Arrival] = []
        if self.mpi is not None:  # pieces pass through this rank only across domains
            if self.shm is not None:
                self.shm.collect(arrivals)
            n = len(arrivals)
            if mpi:
                self.mpi.collect(arrivals)
            for a in arrivals[n:]:  # over MPI: the links crossed inside this domain
                entry = self.hops.entry(a.origin, a.dst)  # on the way here
                if entry:
                    self._charge_links(entry, a.data.nbytes, a.key)
        if arrivals:
            did = True
            self._file(arrivals)
        if self.active:
            still = []
            for ex in self.active:
                if ex.done:
                    continue
                try:
                    finished = ex.advance()
                except BaseException as e:  # belongs to that execution; its waiter raises it
                    ex.fail(e)
                    finished = True
                    if not isinstance(e, Exception) and \
                            threading.current_thread() is threading.main_thread():
                        self.active = [a for a in self.active if not a.done]
                        raise  # SystemExit, KeyboardInterrupt: the program's own
                if finished:
                    did = True
                else:
                    still.append(ex)
            self.active = still
        if self.shm is not None:
            stuck: list[Arrival] = []
            self.shm.unblock(stuck, self._dead_ids)
            if stuck:
                did = True
                self._file(stuck)
        return did

    def _file(self, arrivals) -> None:
        me, dead = self.rank, self._dead
        for a in arrivals:
            if a.key[0] in dead:  # for a failed communicator: nobody will take it
                a.release()
            elif a.dst == me:
                self.inbox[a.key] = a
            elif a.error is None:
                self._forward(a)
            # (a piece on its way elsewhere whose read failed is lost: its receiver's
            # deadline finds it, as it finds a dead sender)

    def _forward(self, a: Arrival) -> None:
        header = (a.key[0], a.key[1], a.key[2], a.key[3], a.data.nbytes, a.total,
                  a.origin, a.dst)
        hop = self.hops.decide(a.origin, a.dst)
        if self.by_name[hop.transport].post(hop.to, header, a.data):
            self._charge(hop, a.data.nbytes, a.key)
            a.release()
        else:
            a.detach()
            p = Pending(hop, header, a.data)
            p.private = True
            self.outq.append(p)

    def finished(self, ex) -> bool:
        """Execution ``ex`` is done and none of its pieces still waits here for room
        at its next rank (call with the lock held): a call returns with its sends
        made, as the agent, which would post them later, cannot run while the
        program's thread holds the GIL in a blocking C call (a first lower-case
        mpi4py collective on a communicator: MPI_Comm_dup)."""
        if not ex.done:
            return False
        cid, seq = ex.comm_id, ex.seq
        return not any(p.header[0] == cid and p.header[1] == seq for p in self.outq)

    def take(self, key) -> Arrival | None:
        """The piece with this key, if it has arrived (call with the lock held).
        Raises RuntimeError when it arrived but its payload could not be read
        (Arrival.error)."""
        a = self.inbox.pop(key, None)
        if a is None:
            if self.shm is not None:
                a = self.shm.take(key)
        elif a.error is not None:
            raise RuntimeError(a.error)
        return a

    def forget(self, comm_id: int, err: BaseException | None = None) -> None:
        """A communicator failed on this rank (it is never used again): fail its
        executions still in flight with ``err`` (async calls that would otherwise stay
        listed for ever: the engine were never solo again), and drop the
        pieces for it that wait in the inbox or in this rank's slots, those filed
        later, and those landing later once their channel fills (ShmTransport.unblock),
        so that they neither stay for ever nor keep blocking calls off their compiled
        run."""
        if err is not None:
            for ex in [a for a in self.active if a.comm_id == comm_id]:
                self.cancel(ex, err)
        with self.held():
            self._dead.add(comm_id)
            self._dead_ids = np.array(sorted(self._dead), np.int64)
            for key in [k for k in self.inbox if k[0] == comm_id]:
                self.inbox.pop(key).release()
            if self.shm is not None:  # and those in this rank's slots (later ones: unblock)
                self.shm.drop(self._dead_ids)

    def total_of(self, key) -> int | None:
        """The size in bytes of the transfer whose piece ``key`` has arrived (call
        with the lock held), or None; the piece stays where it is for take()."""
        a = self.inbox.get(key)
        if a is not None:
            return a.total
        return None if self.shm is None else self.shm.total_of(key)

    def has(self, key) -> bool:
        """Whether the piece with this key has arrived (call with the lock held);
        it stays where it is for take()."""
        if key in self.inbox:
            return True
        return self.shm is not None and self.shm.holds(key)

    # --- waiting --------------------------------------------------------------------
    def _pause(self, pause: float, deadline) -> float | None:
        """How long the next sleep may last: a poll interval with an MPI transport to
        poll, capped by the deadline; None = until rung."""
        t = pause if self.mpi is not None else None
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            t = left if t is None else min(t, left)
        return t

    def drive(self, done, deadline=None, on_timeout=None, start=None, lone=None) -> None:
        """Progress on the calling thread until ``done()`` (called with the lock
        held) is true; past ``deadline`` (time.monotonic()) raise ``on_timeout()``.
        ``start``: an execution to put in flight first; ``lone``: one already in
        flight (an async call's wait). Either runs compiled while it is the only
        work in flight."""
        self.driving += 1
        try:
            if lone is not None:
                self._let_agent_finish(lone, deadline)
            with self.held():
                try:
                    self._drive(done, deadline, on_timeout, start, lone)
                except BaseException as e:
                    if start is not None and not start.done and not isinstance(e, Exception):
                        start.fail(e)  # nobody may run it further
                    raise
        finally:
            self.driving -= 1
            if self.background():
                self.agent.poke()

    def _let_agent_finish(self, ex, deadline) -> None:
        """An async call's wait() while the agent runs ``ex`` compiled, the one
        execution in flight: wait for that run to end (or return for Python's help)
        rather than claim the engine, whose run would return at once for this
        thread to enter it again: a wake-up and the Python of both threads at the
        moment the call is nearly done. The caller has raised ``driving``, so the
        agent starts nothing once its run returns; past ``deadline`` the caller
        claims the engine as before and raises the timeout."""
        if self.solo_native() is not ex:
            return
        wait = -1 if deadline is None else max(0.0, deadline - time.monotonic())
        if self.lock.acquire(timeout=wait):
            self.lock.release()

    def _drive(self, done, deadline, on_timeout, start, lone) -> None:
        if start is not None:
            if self.solo() and start.plan.native is not None:
                # nothing else in flight: run it compiled to its end before it is
                # even listed (the loop below would do the same, at more cost)
                if start.run(deadline) == TIMEOUT:
                    self.active.append(start)
                    raise on_timeout()
                if start.done and done():
                    return
            self.active.append(start)
            lone = start
        pause = POLL_MIN
        quiet = 0.0  # seconds slept since anything last moved
        polled = 0.0  # when MPI was last polled after a compiled part's slice
        while True:
            if lone is not None and self.solo_native() is lone:
                # the only work in flight: run it compiled, to its end
                if lone.run(deadline) == TIMEOUT:
                    raise on_timeout()
                if lone.done:
                    # it was the only one in flight: no pass over the others needed
                    self.active = [a for a in self.active if a is not lone]
                    if done():
                        return
            ran = lone is not None and self._part_slice(lone, deadline, quiet)
            seen = self.bell.value()
            poll = True
            if ran and lone.in_compiled_part:  # still in a compiled part: it waits for
                # nothing over MPI, whose every poll costs a yield of the CPU (Open MPI
                # oversubscribed); what comes is for a later part, or to forward
                now = time.monotonic()
                poll = now - polled >= PART_POLL
                if poll:
                    polled = now
            moved = self.progress(poll)
            if done():
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise on_timeout()
            if ran:  # (the slice slept meanwhile: no pause after it)
                quiet = 0.0 if moved or ran is True else quiet + ran
                pause = POLL_MIN
                continue
            if moved:
                pause, quiet = POLL_MIN, 0.0
                continue
            # (an agreement's last member rings every member's doorbell too)
            self.bell.sleep(seen, self._pause(pause, deadline))
            quiet += pause
            pause = min(pause * 2, POLL_MAX if quiet < QUIET else POLL_IDLE)

    def _part_slice(self, ex, deadline, quiet: float, claim=None):
        """Run the compiled part under way of ``ex`` (a plan in parts: ranks on
        several domains) on this thread while it is the only work in flight, for
        one slice: POLL_MAX, or POLL_IDLE once nothing moved for QUIET (a late
        rank), at most to ``deadline``; MPI is polled between slices. ``claim``:
        the agent's (the run hands over when a caller claims the engine). False
        when nothing ran; True when the run ended or moved on; else the seconds
        slept (a slice that timed out)."""
        if ex.plan.parts is None or self.outq or self.inbox or len(self.active) != 1 \
                or self.active[0] is not ex or not ex.in_compiled_part:
            return False
        now = time.monotonic()
        end = now + (POLL_MAX if quiet < QUIET else POLL_IDLE)
        if deadline is not None and deadline < end:
            end = deadline
        step = ex.step
        try:
            status = ex.part_run(end, claim)
        except Exception as e:  # belongs to that execution; its waiter raises it
            ex.fail(e)
            return True
        if status is None:
            return False
        if status != TIMEOUT or ex.step != step:
            return True
        return max(end - now, 1e-6)

    def held(self) -> "_Held":
        """The engine's lock, taken from the agent at once: a compiled run of the
        agent sleeps on the doorbell with no deadline, so the claim word asks it to
        return (YIELDED) and the ring wakes it (only when the lock is taken). The
        agent waits while the word is raised, and is poked when the lock is free
        again (by drive() itself when a caller drives)."""
        return self._held

    def _claim(self) -> None:
        if not self.lock.acquire(blocking=False):
            A.fetch_add(self.claim, 0, 1)
            try:
                self.bell.ring()
                self.lock.acquire()
            finally:
                A.fetch_add(self.claim, 0, -1)

    def run_alone(self, args, deadline):
        """A blocking call's whole compiled run (``args``: executor.native_args'
        tuple) on the calling thread, with no Execution and no drive loop: the
        status exec_run returned, or None (nothing run) when anything else is in
        flight or set aside (``solo()``)."""
        self.driving += 1
        lock = self.lock
        try:
            if not lock.acquire(blocking=False):
                self._claim()  # (drive(), without its loop)
            try:
                if self.active or self.outq or self.inbox:
                    return None  # (not solo(): written out, as on every small call)
                if self.mpi is not None:
                    return self._run_alone_polling(args, deadline)
                return native.exec_run(*args, NO_CLAIM,
                                       -1 if deadline is None else deadline_ns(deadline))
            finally:
                lock.release()
        finally:
            self.driving -= 1
            if self.background():
                self.agent.poke()

    def _run_alone_polling(self, args, deadline):
        """run_alone beside an MPI transport (ranks on other hosts; the run itself
        stays in this domain: its plan is compiled). Nothing tells this thread that
        a message came over MPI, so the run sleeps on the doorbell for at most
        POLL_MAX at a time and the transport is polled in between; once anything
        came (to keep or to forward) or is still going out, the general path takes
        over, adopting the run (status TIMEOUT, the call's deadline not passed: it
        goes on from there). None: nothing run (sends still going out)."""
        if self.mpi.pending():
            return None
        while True:
            end = time.monotonic() + POLL_MAX
            if deadline is not None and deadline < end:
                end = deadline
            status = native.exec_run(*args, NO_CLAIM, deadline_ns(end))
            if status != native.TIMEOUT or end == deadline:
                return status
            self.progress()  # (what came over MPI: filed, or forwarded)
            if self.inbox or self.outq or self.active or self.mpi.pending():
                return status

    def background(self) -> bool:
        """Work the agent must do while no caller drives: executions in flight,
        pieces waiting for room, an MPI transport to poll (pieces to forward), or
        a sender waiting for one of this rank's landing slots."""
        return bool(self.active or self.outq or self.mpi is not None
                    or (self.shm is not None and self.shm.wanted()))

    def solo_native(self):
        """The one execution in flight, when it is compiled and nothing else waits
        (no queue, no inbox, no MPI transport): the agent then runs it compiled, as a
        blocking caller would, until it ends or another thread claims the engine.
        Else None."""
        if len(self.active) != 1 or self.outq or self.inbox or self.mpi is not None:
            return None
        ex = self.active[0]
        return None if ex.done or ex.plan.native is None or ex.pre is not None else ex

    def solo(self) -> bool:
        """Nothing else in flight: a blocking call may run compiled to its end."""
        return not (self.active or self.outq or self.inbox) and self.mpi is None

    def cancel(self, ex, err: BaseException) -> None:
        """Take a failed or abandoned execution out of flight."""
        with self.held():
            if ex in self.active:
                self.active.remove(ex)
            if not ex.done:
                ex.fail(err)

    def start(self, ex) -> None:
        """Put an execution in flight (an async call) and return: the agent advances
        it while the program computes. Only when the agent cannot (an MPI transport
        without MPI_THREAD_MULTIPLE) does this thread make a first pass."""
        with self.held():  # (leaving it pokes the agent: it has work now)
            self.active.append(ex)
            if self.mpi is not None and not self.threaded:
                self.progress()
            elif ex.pre is not None:
                # a routed agreement's first steps here, at the call (publish this
                # rank's row, post its pieces): an agent may get a core only
                # tens of ms later with 64 ranks on 2 cores, and every member
                # waits for the last to publish
                try:
                    ex.advance()
                except Exception as e:  # (its waiter raises it)
                    ex.fail(e)
        # the agent sleeps on its own word (which leaving held() rings) only while
        # it has nothing to do; with work in flight, or an MPI transport to poll, it
        # sleeps on the doorbell, up to POLL_IDLE when idle: ring it too, or the new
        # execution would wait for the next ring or poll
        self.bell.ring()

    def try_progress(self) -> None:
        """One non-blocking round of progress (async handles' test())."""
        if self.lock.acquire(blocking=False):
            try:
                self.progress()
            finally:
                self.lock.release()

    def sends_pending(self) -> bool:
        return bool(self.outq) or any(t.pending() for t in self.transports)

    # --- the link ledger --------------------------------------------------------------
    def link_stats(self) -> list[dict]:
        n = self.topo.size
        row = self._ledger[self._my_row * n * 2:(self._my_row + 1) * n * 2].reshape(n, 2)
        out = []
        for dst in np.flatnonzero(row[:, 1]).tolist():
            spec = self.topo.link_between_ranks(self.rank, dst)
            out.append({"src": self.rank, "dst": dst, "link": spec.kind if spec else "none",
                        "bytes": int(row[dst, 0]), "messages": int(row[dst, 1])})
        return out

    # --- exit -----------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """At exit (atexit): post what is left, wait at a barrier of every rank
        while the agent goes on serving (forwarding, freeing slots), then stop the
        agent and unmap. Gives up after ``timeout`` seconds (NEURON_MPI_TIMEOUT):
        the others are then stuck waiting for this rank, and their own deadlines
        end the job."""
        if self.closed or MPI.Is_finalized():
            self.agent.stop()
            return
        self.closed = True
        if timeout is None:
            try:
                timeout = env.timeout_seconds()
            except Exception:
                timeout = env.DEFAULT_TIMEOUT
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = True
        try:
            self.drive(lambda: not self.outq, deadline, _DrainTimeout)
            ok = self.mpi is None or self.mpi.flush(deadline)
            if ok:
                barrier = self._exit_comm.Ibarrier()
                pause = 1e-4
                while not barrier.Test():
                    if deadline is not None and time.monotonic() >= deadline:
                        ok = False
                        break
                    time.sleep(pause)
                    pause = min(pause * 2, 0.01)
        except _DrainTimeout:
            ok = False
        if not ok:
            print(f"[rank {self.rank}] neuron_mpi: at exit, other ranks did not finish "
                  f"within {timeout:g} s; leaving without them", file=sys.stderr, flush=True)
            self.agent.stop()
            return
        self.agent.stop()
        for t in self.transports:
            t.close()


def _parked(ex) -> bool:
    """``ex`` waits in its routed agreement for a turn that rings this rank (read
    without the engine's lock: ``pre`` is read once, as another thread may end it)."""
    pre = ex.pre
    return pre is not None and pre.parked


class _DrainTimeout(Exception):
    pass


class Agent(threading.Thread):
    """The CC core: progresses the engine whenever no caller drives it, and sleeps
    on the doorbell when there is nothing to do (on its own word while a caller
    drives). Exceptions of an execution are stored in it for its waiter."""

    def __init__(self, engine: Engine, bell: Bell):
        super().__init__(name="neuron_mpi-agent", daemon=True)
        self.engine = engine
        self.word = bell
        self._halt = False

    def poke(self) -> None:
        self.word.ring()

    def stop(self) -> None:
        if not self.is_alive():
            return
        self._halt = True
        A.fetch_add(self.engine.claim, 0, 1)  # out of a compiled run; never lowered
        self.poke()
        self.engine.bell.ring()
        if threading.current_thread() is not self:
            self.join(timeout=5)

    def run(self) -> None:
        eng = self.engine
        mpi_ok = eng.mpi is None or eng.threaded
        pause = POLL_MIN
        try:
            while not self._halt:
                parked = self.word.value()
                if eng.driving or eng.claim[0] or not mpi_ok or not eng.background():
                    self.word.sleep(parked, None)
                    continue
                if not eng.lock.acquire(timeout=0.05):
                    continue
                try:
                    if eng.driving:
                        continue
                    seen = eng.bell.value()
                    ex = eng.solo_native()
                    ran = False
                    if ex is not None:
                        try:  # an async call while the program computes: run it to
                            # its end, or until a caller claims the engine
                            ex.run(None, eng.claim)
                        except BaseException as e:  # its waiter raises it
                            ex.fail(e)
                    elif len(eng.active) == 1:  # a plan in parts: its compiled part
                        ran = eng._part_slice(eng.active[0], None, 0.0, eng.claim)
                    moved = eng.progress() or ex is not None or bool(ran)  # (the run
                    # slept: look again at once)
                finally:
                    eng.lock.release()
                if moved:
                    pause = POLL_MIN
                    continue
                if self._halt or eng.driving:
                    continue
                # (an execution whose agreement waits for a board's turn is rung
                # when it completes: RoutedAgreement.parked)
                busy = eng.outq or not all(_parked(ex) for ex in eng.active)
                if busy:  # (what it does now, not what it did: parked a while ago)
                    pause = min(pause, POLL_MAX)
                eng.bell.sleep(seen, pause if eng.mpi is not None else None)
                pause = min(pause * 2, POLL_MAX if busy else POLL_IDLE)
        except BaseException as e:  # never die silently: the waiters would hang
            if not MPI.Is_finalized() and not self._halt:
                print(f"[rank {eng.rank}] neuron_mpi agent stopped: {type(e).__name__}: {e}",
                      file=sys.stderr, flush=True)
                os._exit(70)


def _load_data_plane(dom: MPI.Comm) -> None:
    """Compile, or load from numba's disk cache, the shared-memory data plane (the
    atomics and transport.native) here in init, where no deadline runs. Left to the
    first collective, a cold compile (tens of seconds per process, minutes with 8
    ranks on 2 cores) came out of that call's deadline, and the ranks, compiling at
    different speeds, timed out in its argument agreement, each naming the ranks
    that had not yet published (``no agreement ... within 60 s``). The domain's first
    rank goes first, so the others load what it wrote instead of all compiling at
    once; the caller's collectives after this line keep init in step."""
    from .kernels import atomics
    from .transport import native

    def load():
        atomics.warm()
        if native.SUPPORTED:
            native.warm()

    first = dom.Get_rank() == 0
    if first:
        load()
    dom.Barrier()
    if not first:
        load()


def _can_read_each_other(dom: MPI.Comm) -> bool:
    """Can every rank of the domain read the next one's memory (process_vm_readv)?
    Collective over ``dom``; the same answer on every rank. Under Yama's
    ptrace_scope 1 a process must first let others read it (PR_SET_PTRACER_ANY,
    as Open MPI's CMA support does); a kernel without the call, seccomp or a
    missing capability make the probe fail, and the domain keeps two copies."""
    import ctypes

    from .transport import native

    ok = native.SUPPORTED
    if ok:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(0x59616D61, ctypes.c_ulong(-1),
                                                    0, 0, 0)  # PR_SET_PTRACER, ANY
        except (OSError, AttributeError):
            pass
    probe = np.array([0x5EAD0000 + dom.Get_rank()], np.int64)
    peers = np.empty((dom.Get_size(), 2), np.int64)  # (also: every prctl is done)
    dom.Allgather(np.array([os.getpid(), probe.ctypes.data], np.int64), peers)
    if ok:
        nxt = (dom.Get_rank() + 1) % dom.Get_size()
        got = np.zeros(1, np.int64)
        pid, addr = (int(v) for v in peers[nxt])
        ok = (native.read_remote(pid, got.view(np.uint8), 0, addr, 8) == 0
              and int(got[0]) == 0x5EAD0000 + nxt)
    agreed = np.empty(1, np.int64)
    # (every rank has read its peer before it adds its answer: no probe is freed early)
    dom.Allreduce(np.array([1 if ok else 0], np.int64), agreed, op=MPI.MIN)
    return bool(agreed[0])


def make_engine(world: MPI.Comm, topo) -> Engine:
    """The engine of this process for ``world`` (collective over it): the shared
    segment of this rank's domain unless NEURON_MPI_TRANSPORT=mpi, MPI for the rest."""
    from .transport.mpi import MpiTransport
    from .transport.segment import Segment
    from .transport.shm import ShmTransport

    comm = world.Dup()
    kind = env.transport()
    slots, kib, read_kib = env.shm_slots(), env.shm_slot_kib(), env.shm_read_kib()
    # the piece sizes must be the same on every rank: take the largest asked for; the
    # probe for reads runs (collectively) if any rank asks for them, and each rank
    # then publishes readable pieces from its own threshold (receivers take both kinds)
    want = np.array([slots, kib, read_kib, env.shm_read_piece_kib()], np.int64)
    agreed = np.empty_like(want)
    comm.Allreduce(want, agreed, op=MPI.MAX)
    slots, kib, anyone_reads = int(agreed[0]), int(agreed[1]), int(agreed[2]) > 0
    piece = kib * 1024
    read_piece = 0
    shm = None
    rank = comm.Get_rank()
    if kind == "auto" and futex.available():
        host = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        if env.shm_domain() == "node":
            dom = host.Split(topo.placement(rank).node, rank)
            host.Free()
        else:
            dom = host
        members = np.empty(dom.Get_size(), np.int64)
        dom.Allgather(np.array([rank], np.int64), members)
        if dom.Get_size() > 1:
            seg = Segment(dom, members.tolist(), topo.size, slots, piece)
            shm = ShmTransport(seg, rank, env.shm_spin())
            _load_data_plane(dom)
            reads = anyone_reads and _can_read_each_other(dom) and read_kib > 0
            if reads:
                shm.enable_reads(read_kib * 1024)
            # pieces larger than a slot only where every rank of the domain publishes
            # all of them for reading (its threshold is at most a slot)
            ok = np.array([1 if reads and read_kib * 1024 <= piece else 0], np.int64)
            every = np.empty_like(ok)
            dom.Allreduce(ok, every, op=MPI.MIN)
            if every[0]:
                read_piece = int(agreed[3]) * 1024
        dom.Free()
    # every rank's domain (its first member; -1: none), for messages over MPI to go
    # straight to the furthest rank of their route in the next domain; one domain
    # holding every rank needs no MPI transport
    mine = np.array([min(shm.members) if shm is not None else -1], np.int64)
    domains = np.empty(topo.size, np.int64)
    comm.Allgather(mine, domains)
    mpi = None if domains[0] >= 0 and (domains == domains[0]).all() else MpiTransport(comm)
    if mpi is not None or shm is None:
        # pieces over MPI are reduced on the Python path, by the data plane's
        # reduce_bytes / divide_bytes: from the module built ahead of time that
        # starts no numba (its import cost about 0.55 CPU s a rank: 17 s of a 64-rank
        # launch on 2 cores); numba's own are compiled or loaded now, not in the
        # middle of a rank's first call or of its agent's progress
        native.warm_reductions()
    return Engine(comm, topo, piece, shm, mpi, read_piece, domains.tolist())
