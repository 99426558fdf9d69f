"""The control plane: the all-gather of small int64 vectors a group needs before
data moves (argument fingerprints, all-to-all-v count rows) and the census that
names absent members after a timeout.

Two ways, on the same engine as the data:

* **board**: every member shares this rank's shared-memory segment. Each writes
  its vector in its row of the communicator's board and bumps an arrival counter;
  the last to arrive wakes the others (one futex wake). The census reads the board.
* **routed**: otherwise. The vectors travel as an all-gather schedule through the
  engine (shared memory where it can, MPI between domains), under control keys
  that never meet data keys; the census sends an empty piece to every member.
"""
from __future__ import annotations

import time

import numpy as np

from .engine import CENSUS_XID
from .errors import CollectiveTimeoutError
from .executor import Execution, Plan
from .transport.segment import FP_WORDS

CENSUS_WAIT = 1.0  # s: how long the census listens after a timeout


def _control_algorithm(view) -> str:
    """Few rounds and few pieces per rank: the control vectors are tiny."""
    if view.node_symmetric:
        return "hierarchical"
    if view.rdh_ok:
        return "rdh"
    return "ring"


class Control:
    """The control plane of one communicator."""

    def __init__(self, comm):
        self.comm = comm
        self._resolved = False
        self._b = None
        self._parity = 0
        self._open = None  # the last BoardAgreement handed to an execution
        self._plans: dict = {}  # the routed exchange's plan per vector length

    @property
    def _board(self):
        """The communicator's board, claimed on first use; None: routed."""
        if not self._resolved:
            self._resolved = True
            comm = self.comm
            shm = comm._engine.shm
            if shm is not None and comm.size > 1 and all(r in shm.local for r in comm.ranks):
                self._b = shm.board(comm._id, comm.ranks)
        return self._b

    @property
    def on_board(self) -> bool:
        return self._board is not None

    def allgather(self, vec: np.ndarray, seq: int, which: int, deadline, expired) -> np.ndarray:
        """(group size, len(vec)) table of every member's ``vec`` (int64). ``which``
        tells two exchanges of one call apart. Past ``deadline`` raises
        ``expired()`` (a CollectiveTimeoutError) with the absent members named."""
        vec = np.ascontiguousarray(vec, np.int64).reshape(-1)
        if self._board is not None and vec.size <= FP_WORDS:
            self.settle(deadline, expired)
            return self._on_board(vec, seq, deadline, expired)
        return self._routed(vec, seq, which, deadline, expired)

    def board_agreement(self, fp: np.ndarray, op: str, seq: int, deadline=None,
                        expired=None, behind: bool = False):
        """The agreement on ``fp`` (agree.fingerprint's int64 vector) as a step of
        a compiled execution (see BoardAgreement), or None when this communicator
        has no board. The caller sets its ``execution``.

        ``behind`` (async calls): when the previous call's agreement is still open
        on this rank (its execution in flight, waiting for members), this one is
        not waited for here (``settle``) but queued behind it: its execution
        publishes its row only once that agreement has finished (the board's
        two-parity rule, see settle), so the call returns at once. One agreement
        waits so at a time; a third call settles first."""
        b = self._board
        if b is None or fp.size > FP_WORDS:
            return None
        prev = self._open
        if behind and prev is not None and prev.waiting_for is None and \
                not prev.finished and prev.execution is not None and \
                not prev.execution.done:
            ag = BoardAgreement(self, b, fp, op, seq, after=prev)
        else:
            self.settle(deadline, expired)
            ag = BoardAgreement(self, b, fp, op, seq)
        self._open = ag
        return ag

    def board_turn(self, fp: np.ndarray, parity: int | None = None) -> tuple:
        """The compiled data plane's agreement arguments for this communicator's
        next turn on its board (counter, table, member, size, fp, target, bells),
        as BoardAgreement holds them (``parity``: the turn's, when it is not the
        next one: an agreement queued behind an open one). The turn is taken by
        ``turn_over`` once every member has arrived."""
        b = self._b  # (the caller found the board: resolved)
        p = self._parity if parity is None else parity
        return (b.counters[p], b.tables[p], self.comm.rank, b.size, fp,
                b.size * (b.uses[p] + 1), b.bells)

    def turn_over(self, parity: int) -> None:
        """Every member arrived on the board for the turn of ``parity``: it turns
        over, as on the Python path (Control._on_board)."""
        self._b.done(parity)  # (the board is resolved: the caller took a turn on it)
        self._parity ^= 1

    def settle(self, deadline, expired) -> None:
        """Wait until the agreement of this communicator's previous call has finished
        on this rank, when that call's execution runs it (an async call returns before
        its members agreed). Agreements take turns: a member publishes its row for
        call k only after it has read the table of call k - 1, which keeps Board's
        two-parity rule with calls in flight. Past ``deadline`` raises ``expired()``."""
        ag = self._open
        if ag is None:
            return
        ex = ag.execution
        if not ag.finished and ex is not None and not ex.done:
            eng = self.comm._engine
            try:
                eng.drive(lambda: ag.finished or ex.done, deadline, expired)
            except CollectiveTimeoutError as err:
                raise self._named(err, ag.absent())
        if not ag.finished:
            # its execution ended inside the agreement: the board's turn is lost
            err = ex.error if ex is not None and ex.error is not None else None
            raise CollectiveTimeoutError(
                f"{ag.op} (call {ag.seq} on this communicator) ended before its members "
                f"agreed on the arguments ({err}); the next call cannot agree")
        self._open = None

    # --- board ------------------------------------------------------------------------
    def _on_board(self, vec, seq, deadline, expired):
        b = self._board
        p = self._parity
        target = b.arrive(p, self.comm.rank, vec)
        while not b.ready(p, target):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._named(expired(), self._absent_on_board(seq, p))
            b.wait(p, target, left)
        table = b.table(p)[:, :vec.size]
        b.done(p)
        self._parity ^= 1
        return table

    def _absent_on_board(self, seq, p) -> list[int]:
        from .agree import SEQ
        t = self._board.table(p)
        return [m for m in range(self.comm.size) if t[m, SEQ] != seq]

    # --- routed -----------------------------------------------------------------------
    def _routed(self, vec, seq, which, deadline, expired):
        from .algorithms.select import schedule_for

        comm = self.comm
        eng = comm._engine
        n = comm.size
        cseq = -(2 * seq + which) - 1  # control keys: negative call numbers
        plan = self._plans.get(vec.size)
        if plan is None:  # (kept: building the whole group's schedule costs more than
            # a small exchange over shared memory)
            sched = schedule_for(comm._view, "all_gather", _control_algorithm(comm._view),
                                 (vec.size,) * n)
            # not elided (its one leading copy, the member's own row, would only
            # move to the end)
            plan = Plan(sched, comm._view, comm.rank, 8, eng.piece_bytes, eng, "int64",
                        control=True, elide=False)
            if len(self._plans) > 8:
                self._plans.clear()
            self._plans[vec.size] = plan
        out = np.empty(n * vec.size, np.int64)
        ex = Execution(eng, plan, {"in": vec, "out": out, "tmp": np.empty(plan.tmp_elems,
                                                                          np.int64)},
                       comm._id, cseq, "agreement")
        try:  # (done with its own pieces posted: Engine.finished)
            eng.drive(lambda: eng.finished(ex), deadline, expired, start=ex)
        except CollectiveTimeoutError as err:
            eng.cancel(ex, err)
            raise self._named(err, self._census(seq))
        if ex.error is not None:
            raise ex.error
        return out.reshape(n, vec.size)

    def _census(self, seq: int) -> list[int]:
        """Every member that is here tells every other one (an empty piece through
        the engine); the ones not heard from within CENSUS_WAIT seconds are named."""
        comm = self.comm
        eng = comm._engine
        empty = np.empty(0, np.uint8)
        me = comm.rank
        keys = {m: (comm._id, seq, CENSUS_XID - m, 0) for m in range(comm.size) if m != me}

        def post_and_check():
            if not posted:
                for m in keys:
                    eng.send((comm._id, seq, CENSUS_XID - me, 0), comm.ranks[m], empty, 0)
                posted.append(True)
            return all(eng.has(k) for k in keys.values())

        posted: list = []
        try:
            eng.drive(post_and_check, time.monotonic() + CENSUS_WAIT, TimeoutError)
        except TimeoutError:
            pass
        absent = []
        with eng.held():
            for m, k in keys.items():
                a = eng.take(k)
                if a is None:
                    absent.append(m)
                else:
                    a.release()
        return absent

    @staticmethod
    def _named(err, absent):
        from .agree import ranks_text
        if absent:
            err.args = (f"{err.args[0]}; not heard from: rank {ranks_text(absent)}",)
            err.absent = absent
        return err


class BoardAgreement:
    """The board agreement of one call, run by the compiled data plane before the
    call's first step (transport.native._agreement): the same board, parity and
    target the Python path (Control._on_board) would use, so either can run it."""

    def __init__(self, control: Control, board, fp, op: str, seq: int, after=None):
        self.control = control
        self.board = board
        # queued behind ``after`` (the previous call's, still open): the other parity
        self.parity = control._parity if after is None else after.parity ^ 1
        self.fp = fp
        # the compiled data plane's, for its turn (that parity's table was read by
        # this rank before ``after`` began: its use count is final)
        self.args = control.board_turn(fp, self.parity)
        self.op = op
        self.seq = seq
        self.finished = False
        self.execution = None  # the Execution that runs it (set by the caller)
        self.waiting_for = after  # publish only once it has finished (ready())
        self._after_ex = None if after is None else after.execution

    def ready(self) -> bool:
        """Whether its execution may publish this rank's row: no agreement ahead of
        it still open. Raises CollectiveTimeoutError when the one ahead can never
        finish (its execution ended inside it: the board's turn is lost)."""
        ahead = self.waiting_for
        if ahead is None:
            return True
        if ahead.finished:
            self.waiting_for = self._after_ex = None
            return True
        ex = self._after_ex
        if ex is not None and ex.done:
            raise CollectiveTimeoutError(
                f"{self.op} (call {self.seq} on this communicator): call {ahead.seq} "
                f"ended before its members agreed on the arguments ({ex.error}); this "
                "call cannot agree")
        return False

    def finish(self) -> None:
        """Every member has arrived: the parity turns over, as on the Python path.
        The execution is let go (it and this object refer to each other: holding on
        would keep the call's buffers alive until the next call or a garbage
        collection, and fresh buffers every call cost page faults)."""
        self.finished = True
        self.control.turn_over(self.parity)
        self.execution = None
        if self.control._open is self:
            self.control._open = None

    def raise_mismatch(self):
        from .agree import FIELDS, compare, counts_disagree
        from .errors import CollectiveMismatchError

        nf = min(self.fp.size, len(FIELDS))
        compare(self.board.table(self.parity)[:, :nf], self.op, self.seq)
        if self.fp.size > nf:  # all-to-all-v's shares did not sum to 0
            raise counts_disagree(self.op, self.seq)
        raise CollectiveMismatchError(f"{self.op} (call {self.seq}): fingerprints differ")

    def absent(self) -> list[int]:
        ahead = self.waiting_for
        if ahead is not None and not ahead.finished:  # (this one has not published)
            return ahead.absent()
        return self.control._absent_on_board(self.seq, self.parity)
