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

A call's argument agreement across domains (``_agree_steps``) needs only to know whether
every fingerprint is the same (and whether all-to-all-v's shares of the count check
sum to 0), so after a communicator's first call it runs in two
levels: the members of each domain meet on a board of their own, the first member
of each domain (its leader) sends that board's table to every other domain's
leader over MPI, and the leaders tell their domain-mates the verdict on the board.
Only the leaders poll MPI; the others sleep on the board. When any fingerprint
differs, every member then all-gathers the whole table routed, so that all raise
the same error as on the other paths.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from . import agree as A
from .engine import CENSUS_XID
from .errors import CollectiveMismatchError, CollectiveTimeoutError, InvalidArgumentError
from .executor import Execution, Plan
from .transport.segment import FP_WORDS

CENSUS_WAIT = 1.0  # s: how long the census listens after a timeout
LEADER_XID = -2_000_000  # a domain leader's table: transfer LEADER_XID - member
_UNDECIDED = object()  # Control._split before the communicator's first agreement


class _Split:
    """A communicator's members by shared-memory domain, for the agreement in two
    levels: this domain's members (``local``, member indices, leader first), this
    rank's row on their board, and every other domain's leader and members."""

    __slots__ = ("board", "local", "row", "others", "parity")

    def __init__(self, board, local, row, others):
        self.board = board
        self.local = local
        self.row = row
        self.others = others  # [(leader, members)]
        self.parity = 0


class _Turn:
    """A wait of an agreement's steps: every member arrived on ``board``'s turn of
    ``parity`` (its counter reached ``target``)."""

    __slots__ = ("board", "parity", "target")

    def __init__(self, board, parity: int, target: int):
        self.board, self.parity, self.target = board, parity, target


class RoutedAgreement:
    """An async call's argument agreement where its communicator has no board
    (members in several domains, or the MPI transport): the steps of
    Control._exchange_steps, resumed by the engine's progress (the call's
    execution advances it first, with the engine's lock held) whenever the wait
    they stopped at is over. So the call returns at once, the agent agrees while
    the program computes, and a mismatch is raised by wait(), before any data moved,
    as on a board. It starts once the agreement ahead of it on the communicator
    (``after``) is over. ``over``: its steps ran to their end (``error``: the
    mismatch they raised, alike on every member); ``broken``: it failed inside
    them (its call timed out or failed), so no later call can agree."""

    def __init__(self, control, steps, op: str, seq: int, after):
        self.control = control
        self.op, self.seq = op, seq
        self._steps = steps
        self._after = after
        self._wait = None  # what the steps wait for (None: not started)
        self._ringing = None  # the _Turn it asked to be rung for (Board.wait_in_engine)
        self.over = self.broken = False
        self.error = None

    def advance(self) -> bool:
        """Resume the steps as far as their waits allow; True once every member
        agreed. Raises the agreement's error."""
        if self.over or self.broken:
            if self.error is not None:
                raise self.error
            return True
        ahead = self._after
        if ahead is not None:
            if ahead.broken:
                self.fail(CollectiveTimeoutError(
                    f"{self.op} (call {self.seq} on this communicator): call {ahead.seq} "
                    f"ended before its members agreed on the arguments ({ahead.error}); "
                    "this call cannot agree"))
                raise self.error
            if not ahead.over:
                return False
            self._after = None
        try:
            while self._wait is None or self._met(self._wait):
                self._wait = self._steps.send(None)
        except StopIteration:
            self.over = True
            return True
        except (CollectiveMismatchError, InvalidArgumentError) as e:  # (agreed: every
            self.over = True  # member raises it, its steps all taken)
            self.error = e
            raise
        except BaseException as e:  # (a failed exchange: it gives its pieces back)
            self.fail(e)
            raise
        return False

    def _met(self, w) -> bool:
        if isinstance(w, Execution):
            return w.done or w.advance()
        if isinstance(w, _Turn):
            b = w.board
            if b.ready(w.parity, w.target):
                self._unring()
                return True
            if self._ringing is None:  # (its board rings no doorbells otherwise: this
                # thread would see the turn complete only at its next poll)
                self._ringing = w
                b.wait_in_engine(w.parity, 1)
                if b.ready(w.parity, w.target):
                    self._unring()
                    return True
            return False
        eng = self.control.comm._engine
        return all(eng.has(key) for key in w)

    @property
    def parked(self) -> bool:
        """Waiting for nothing that comes over MPI: for a board's turn, whose
        completion rings this rank's doorbell, or for the agreement ahead (whose
        own execution is in flight). The agent then need not poll MPI for it."""
        return self._ringing is not None or self._after is not None

    def _unring(self) -> None:
        w, self._ringing = self._ringing, None
        if w is not None:
            w.board.wait_in_engine(w.parity, -1)

    def fail(self, err: BaseException) -> None:
        """It failed, or its call did, before the agreement was over (a timeout, a
        failed communicator, a failed exchange): the exchange under way gives its
        pieces back."""
        if self.over or self.broken:
            return
        self.broken = True
        self.error = err
        self._unring()
        w = self._wait
        if isinstance(w, Execution) and not w.done:
            w.fail(err)
        self._steps.close()


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
        self._split = _UNDECIDED  # a _Split, or None: no agreement in two levels
        self._routed_open = None  # the last RoutedAgreement handed to an execution

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

    def exchange(self, fp, op: str, seq: int, rows, share: int, deadline, expired) -> None:
        """A call's whole argument agreement (comm.Communicator._exchange): raises
        the same error on every member when they disagree."""
        self._run(self._exchange_steps(fp, op, seq, rows, share, deadline, expired,
                                       self.comm._engine.held), seq, deadline, expired)

    def routed_agreement(self, fp, op: str, seq: int, rows, share: int):
        """An async call's agreement where this communicator has no board, run in
        the background by its execution (RoutedAgreement), queued behind the
        previous call's when that one is still open. None when it has a board (the
        caller agrees at the call, as before)."""
        if self._board is not None:
            return None
        # (its steps run with the engine's lock held: they take no lock themselves)
        steps = self._exchange_steps(fp, op, seq, rows, share, None, None, contextlib.nullcontext)
        ag = RoutedAgreement(self, steps, op, seq, self._routed_open)
        self._routed_open = ag
        return ag

    # --- the agreement as steps -------------------------------------------------------
    # The routed agreement is a generator of waits (an Execution to finish, a _Turn
    # of a board, or piece keys to arrive), so that one text runs either at the
    # call (_run: a blocking call, driving the engine until each wait is over) or
    # in the background (RoutedAgreement: the engine's progress resumes it once
    # its wait is over, whichever thread progresses). A board's own agreement
    # (with its settle and _on_board) only runs at the call: those steps return
    # before their first yield, and RoutedAgreement is made only without a board.
    def _exchange_steps(self, fp, op, seq, rows, share, deadline, expired, held):
        if rows is None:
            A.compare((yield from self._agree_steps(fp, fp.size, seq, deadline, expired, held)),
                      op, seq)
            return
        # all-to-all-v: each member's share of the pairwise count check rides with
        # its fingerprint; only when the shares do not sum to 0 are the count rows
        # all-gathered, to name the pair that disagrees
        table = yield from self._agree_steps(np.append(fp, share), fp.size, seq, deadline,
                                             expired, held)
        A.compare(table[:, :fp.size], op, seq)
        if not A.pairs_agree(table[:, fp.size]):
            yield from self._name_pair_steps(rows, op, seq, deadline, expired)

    def name_pair(self, rows, op: str, seq: int, deadline, expired) -> None:
        """All-to-all-v's shares did not sum to 0: all-gather the count rows and
        raise the error naming the first pair that disagrees (on every member
        alike)."""
        self._run(self._name_pair_steps(rows, op, seq, deadline, expired), seq, deadline,
                  expired)

    def _name_pair_steps(self, rows, op, seq, deadline, expired):
        rows = np.ascontiguousarray(rows, np.int64).reshape(-1)
        A.check_all_to_all_v((yield from self._allgather_steps(rows, seq, 1, deadline,
                                                               expired)), op)
        raise A.counts_disagree(op, seq)  # (shares that do not sum to 0: counts differ)

    def _allgather_steps(self, vec, seq, which, deadline, expired):
        if self._board is not None and vec.size <= FP_WORDS:
            self.settle(deadline, expired)
            return self._on_board(vec, seq, deadline, expired)
        return (yield from self._routed_steps(vec, seq, which))

    def _agree_steps(self, vec, nf, seq, deadline, expired, held):
        """The members' ``vec`` (int64, at most FP_WORDS: a fingerprint's ``nf``
        fields, which must be the same on every member, then words whose sums over
        the members must be 0: all-to-all-v's agree.pair_share) as a table for
        agree.compare and agree.pairs_agree. Across domains, after the
        communicator's first call, in two levels (the module's docstring): then,
        when they agree, the table is the fields repeated and zeros."""
        if self._board is not None or vec.size > FP_WORDS:
            return (yield from self._allgather_steps(vec, seq, 0, deadline, expired))
        # every member's vector as long, whatever call it makes (as a board's rows
        # are): a member refusing its call (status 1) sends a fingerprint without
        # all-to-all-v's words; the table's words past this member's are the others'
        k = vec.size
        vec = np.append(vec, np.zeros(FP_WORDS - k, np.int64))
        sp = self._split
        if sp is _UNDECIDED:
            # the first call decides, alike on every member: a word beside the
            # vector says whether this member's domain has a board for it
            sp = self._split_layout()
            table = yield from self._routed_steps(np.append(vec, 0 if sp is None else 1), seq,
                                                  0)
            self._split = sp if table[:, -1].all() else None
            return table[:, :k]
        if sp is None:
            return (yield from self._routed_steps(vec, seq, 0))[:, :k]
        return (yield from self._two_level_steps(sp, vec, nf, seq, held))[:, :k]

    def _run(self, steps, seq, deadline, expired):
        """Run an agreement's steps at the call: drive the engine through each wait
        (after the communicator's open background agreement, if any, is over); past
        ``deadline`` raise ``expired()`` naming the members not heard from."""
        eng = self.comm._engine
        if self._board is None:
            self._settle_routed(deadline, expired)
        try:
            w = next(steps)
            while True:
                if isinstance(w, Execution):
                    try:  # (done with its own pieces posted: Engine.finished)
                        eng.drive(lambda: eng.finished(w), deadline, expired, start=w)
                    except CollectiveTimeoutError as err:
                        eng.cancel(w, err)
                        raise self._named(err, self._census(seq))
                elif isinstance(w, _Turn):
                    self._wait_turn(w.board, w.parity, w.target, deadline, expired,
                                    lambda: self._census(seq))
                else:  # piece keys
                    try:
                        eng.drive(lambda: all(eng.has(key) for key in w), deadline, expired)
                    except CollectiveTimeoutError as err:
                        raise self._named(err, self._census(seq))
                w = steps.send(None)
        except StopIteration as stop:
            return stop.value

    def _settle_routed(self, deadline, expired) -> None:
        """Wait until the communicator's last background agreement (an async call's
        RoutedAgreement) is over on this rank: agreements on a communicator take
        turns in call order. Raises when it ended inside its steps (a timeout, a
        failed read: the turns it left cannot be taken again)."""
        ag = self._routed_open
        if ag is None:
            return
        if not ag.over and not ag.broken:
            eng = self.comm._engine
            try:
                eng.drive(lambda: ag.over or ag.broken, deadline, expired)
            except CollectiveTimeoutError as err:
                raise self._named(err, self._census(ag.seq))
        self._routed_open = None
        if not ag.over:
            raise CollectiveTimeoutError(
                f"{ag.op} (call {ag.seq} on this communicator) ended before its members "
                f"agreed on the arguments ({ag.error}); the next call cannot agree")

    def _split_layout(self):
        """This rank's _Split, or None where the agreement cannot run in two levels:
        a member outside every shared-memory domain, one domain holding them all, a
        leader's table larger than a piece, or no board left in this domain."""
        comm = self.comm
        eng = comm._engine
        doms = eng.domains
        if eng.shm is None or eng.mpi is None or doms is None:
            return None
        by_dom: dict[int, list[int]] = {}
        for m, w in enumerate(comm.ranks):
            if doms[w] < 0:
                return None
            by_dom.setdefault(doms[w], []).append(m)
        mine = by_dom[doms[comm.world_rank]]
        if len(by_dom) < 2 or max(len(v) for v in by_dom.values()) * FP_WORDS * 8 > \
                eng.piece_bytes:
            return None
        # (its own id; the Python of a blocking agreement sleeps on the board's
        # counter, so no doorbells are rung, which would wake every member's agent,
        # but while a member's async agreement waits for a turn in its engine's
        # progress: RoutedAgreement, Board.wait_in_engine)
        board = eng.shm.board(comm._id | 1 << 62, [comm.ranks[m] for m in mine], ring=False)
        if board is None:
            return None
        others = [(v[0], v) for v in by_dom.values() if v is not mine]
        return _Split(board, mine, mine.index(comm.rank), others)

    def _two_level_steps(self, sp, vec, nf, seq, held):
        comm = self.comm
        n = comm.size
        k = vec.size
        # first turn: every member publishes its fingerprint; only the leader waits
        # for the others (a member arrives at the second turn, whose table nobody
        # reads but for the leader's row, before the first is complete: the leader
        # reads the first turn's table before it arrives at the second, and nobody
        # writes that table again before the second is complete)
        local = yield from self._sub_turn_steps(sp, vec, sp.row == 0, sp.board.bells[:1])
        verdict = np.zeros(1, np.int64)
        if sp.row == 0:  # the leader: every domain's table, then the verdict
            rows = local[:, :k]
            table = np.empty((n, k), np.int64)
            table[sp.local] = rows
            yield from self._leaders_steps(sp, rows, table, seq, held)
            fields = table[:, :nf]
            same = (fields == fields[0]).all() and not fields[0, A.STATUS] and \
                all(A.pairs_agree(table[:, j]) for j in range(nf, k))
            verdict[0] = 1 if same else 2
        said = yield from self._sub_turn_steps(sp, verdict, True)
        if said[0, 0] == 1:
            table = np.zeros((n, k), np.int64)
            table[:, :nf] = vec[:nf]
            return table
        # some member disagrees: the whole table, for every member's same error
        return (yield from self._routed_steps(vec, seq, 0))

    def _sub_turn_steps(self, sp, row, wait: bool, bells=None):
        """One turn on this domain's board of a two-level agreement: publish ``row``,
        and with ``wait``, wait for every domain-mate and return their rows (a copy).
        ``bells``: the doorbells of the members that wait for this turn (default
        all; the first turn's: the leader's alone)."""
        b = sp.board
        p = sp.parity
        target = b.arrive(p, sp.row, row, bells)
        if not wait:
            b.done(p)
            sp.parity ^= 1
            return None
        yield _Turn(b, p, target)
        table = b.table(p)
        b.done(p)
        sp.parity ^= 1
        return table

    def _leaders_steps(self, sp, rows, table, seq, held):
        """This domain's leader sends its domain's ``rows`` to every other domain's
        leader and files theirs in ``table`` (over the engine: MPI between domains)."""
        comm = self.comm
        eng = comm._engine
        cid, cseq, me = comm._id, -2 * seq - 1, comm.rank
        payload = np.ascontiguousarray(rows).reshape(-1).view(np.uint8)
        keys = {(cid, cseq, LEADER_XID - lead, 0): members for lead, members in sp.others}
        with held():
            for lead, _ in sp.others:
                eng.send((cid, cseq, LEADER_XID - me, 0), comm.ranks[lead], payload,
                         payload.nbytes)
        yield list(keys)
        with held():
            for key, members in keys.items():
                a = eng.take(key)
                table[members] = a.data.view(np.int64).reshape(len(members), -1)
                a.release()

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
        self._wait_turn(b, p, b.arrive(p, self.comm.rank, vec), deadline, expired,
                        lambda: self._absent_on_board(seq, p))
        table = b.table(p)[:, :vec.size]
        b.done(p)
        self._parity ^= 1
        return table

    def _wait_turn(self, b, p, target, deadline, expired, absent) -> None:
        """Sleep until every member arrived on board ``b``'s turn of parity ``p``;
        past ``deadline`` raise ``expired()`` naming ``absent()``."""
        while not b.ready(p, target):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._named(expired(), absent())
            b.wait(p, target, left)

    def _absent_on_board(self, seq, p) -> list[int]:
        from .agree import SEQ
        t = self._board.table(p)
        return [m for m in range(self.comm.size) if t[m, SEQ] != seq]

    # --- routed -----------------------------------------------------------------------
    def _routed_steps(self, vec, seq, which):
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
        yield ex
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
