"""The Communicator: the API users code against.

Validate at the boundary, agree on the arguments across the group, pick the
algorithm, fetch the cached schedule and this rank's plan, run it on the engine.
Collectives return their result: a new array, or ``out`` when given (``out`` may be
``x`` where the shapes allow).

Threads and ordering (docs/api.md, "Threads, async calls and ordering"): any thread
may call; the calls on one communicator must be made in the same order on every
member, one at a time. An async call (``async_op=True``) returns a Handle at once;
the engine's agent moves its data while the caller computes. Its input must not be
written, and its result not read, before ``wait()`` (or a ``test()`` that returned
True).
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import math
import os
import time
import weakref

import numpy as np
from mpi4py import MPI

from . import agree as A
from . import env
from . import groups as G
from . import tracing as _tracing
from . import validate as V
from .algorithms.group import GroupView
from .algorithms.select import choose, schedule_for
from .control import Control
from .engine import make_engine
from .errors import (CollectiveTimeoutError, CommunicatorFailedError,
                     InvalidArgumentError, NeuronMPIError, TopologyError, arg_error)
from .executor import (CODES, NO_BOARD, Execution, Plan, Scratch, SendRecvExecution,
                       make_buffers, native_args, native_head, pieces, retag_native,
                       retag_sendrecv, sendrecv_plan)
from .kernels import dtype_name
from .recorder import FlightRecorder
from .schedule import CallRecord
from .topology import topology as make_topology
from .transport import native
from .transport.segment import FP_WORDS

DEFAULT_TIMEOUT = env.DEFAULT_TIMEOUT
_timeout_seconds = env.timeout_seconds
_checking = env.checking
_per_call = env.per_call


def _collective(op):
    """Wrap a collective: refuse on a failed communicator; when a rank rejects its
    own arguments, tell the group (so every member fails alike) and re-raise."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            if self._failed is not None:
                self._ensure_usable()
            try:
                return fn(self, *args, **kwargs)
            except InvalidArgumentError as e:
                if not getattr(e, "agreed", False):
                    self._tell_group_rejected(op, kwargs.get("timeout"), e)
                    e.agreed = True  # (the group has heard: an outer wrapper tells no more)
                raise
        return wrapper
    return deco

from .vocab import AVG, MAX, MIN, PROD, SUM  # noqa: E402,F401  (nm.comm.SUM ...)


class Handle:
    """An async collective: ``test()`` progresses and says whether it is done;
    ``wait()`` finishes it (raising its error, if any) and returns the result."""

    def __init__(self, comm, ex, finish):
        self._comm = comm
        self._ex = ex
        self._finish = finish
        self._result = None
        self._finished = False

    def test(self) -> bool:
        if not self._ex.done:
            self._comm._engine.try_progress()
        return self._ex.done

    def is_completed(self) -> bool:
        return self.test()

    def wait(self):
        if not self._finished:
            ex = self._ex
            if not (ex.done and ex.error is None):  # (a call that finished before its
                # communicator failed keeps its result, as a completed MPI request does)
                self._comm._ensure_usable()
            self._result = self._finish()
            self._finished = True
        return self._result


_DTYPE_STR: dict = {}
_U8 = np.dtype(np.uint8)
_EMPTY_BYTES = np.empty(0, np.uint8)  # a receive's payload (it sends nothing)


def _dtype_str(dtype) -> str:
    s = _DTYPE_STR.get(dtype)
    if s is None:
        s = _DTYPE_STR[dtype] = str(dtype)
    return s


def _child_id(parent: int, nsplit: int, index: int) -> int:
    h = hashlib.blake2b(f"{parent}/{nsplit}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 62) - 1)


_REDUCING = frozenset(("all_reduce", "reduce_scatter", "reduce_scatter_v", "reduce", "scan",
                       "exscan"))
_ROOTED = frozenset(("broadcast", "reduce", "gather", "scatter"))


class _Shape:
    """What every call of one shape on a communicator shares, worked out once (a
    small blocking call spends more on this than on its data): the algorithm, the
    plan, the fingerprint (its call number is set per call), and the compiled
    run's scratch for blocking calls (``executor.Scratch``), and spare ones for
    async calls (``lend``/``give_back``)."""

    __slots__ = ("algo", "plan", "nbytes", "count", "dtype_str", "fp", "scratch", "code",
                 "spares", "head")

    def __init__(self, comm, op, algorithm, sizes, x, out_shape, reduce_op, extra, fp_count,
                 dig, traced):
        self.nbytes = max(int(x.nbytes), math.prod(out_shape) * x.itemsize)
        self.algo = algo = choose(op, comm._view, algorithm, self.nbytes)
        self.plan = plan = comm._plan(op, algo, sizes, x.dtype, reduce_op == "avg", extra,
                                      traced)
        self.count = int(x.size) if fp_count is None else fp_count
        self.dtype_str = _dtype_str(x.dtype)
        self.fp = A.fingerprint(op, 0, self.count, x.dtype,
                                reduce_op if op in _REDUCING else None,
                                extra if op in _ROOTED else -1, dig, algo)
        self.scratch = None if plan.native is None else Scratch(
            plan.native.max_flags, plan.tmp_elems, x.dtype)
        self.code = 0 if plan.native is None else CODES.get(
            ("sum" if reduce_op == "avg" else reduce_op, plan.native.dtype_name), 0)
        self.spares: list = []
        self.head = None  # the compiled run's arguments before the buffers (run_args)

    def run_args(self, shm, b0, b1, comm_id, seq, board) -> tuple:
        """executor.native_args for a blocking run of this shape on its scratch
        (zeroed by the caller), the arguments that never change kept."""
        np_, sc = self.plan.native, self.scratch
        return native_args(shm, np_, sc.xs, sc.flags, b0, b1, sc.tmp8, comm_id, seq,
                           self.code, board, sc.pend, self.head_for(shm))

    def head_for(self, shm) -> tuple:
        """executor.native_head of this shape's plan on its scratch, made once."""
        if self.head is None:
            sc = self.scratch
            self.head = native_head(shm, self.plan.native, sc.xs, sc.flags)
        return self.head

    def lend(self):
        """A scratch for an async call of this shape, which may be in flight with
        others: a spare one (given back by a finished call), else a new one; None
        without a compiled plan. Reusing them spares each async call a new
        temporary buffer, whose first touch costs page faults (or, as a block of
        the heap reused or not, moves a call's time by more than its data)."""
        if self.scratch is None:
            return None
        if self.spares:
            return self.spares.pop()
        return Scratch(self.plan.native.max_flags, self.plan.tmp_elems, self.scratch.tmp.dtype)

    def give_back(self, scratch) -> None:
        """A lent scratch whose call has finished without error (a failed call's may
        still be read by a peer): kept for the next async call, two at most."""
        if scratch is not None and len(self.spares) < 2:
            self.spares.append(scratch)


# a send of more than a slot waits up to nbytes / POST_WAIT_RATE s (at most
# POST_WAIT_MAX) for its receiver to wait for it, to be read from x (_p2p_compiled)
POST_WAIT_RATE, POST_WAIT_MAX = 4e9, 0.002
KEPT, SEEN = 16, 64  # calls kept to repeat, input arrays remembered (Communicator._keep)


class _Call:
    """A collective call's arguments as validated and worked out (``_Shape``, the
    deadline's seconds, whether to agree, ...): what ``Communicator._go`` runs. Kept
    per operation when its input array came again (``Communicator._keep``), with
    what the validation looked at, so that a loop calling with the same arrays and
    arguments (``_repeat``) skips validating and looking them up again. It holds
    the arrays by weak reference only: a kept call keeps no buffer alive (numpy
    then refuses to ``resize`` them in place: docs/api.md)."""

    __slots__ = ("sh", "op", "out_shape", "reduce_op", "async_op", "timeout", "seconds",
                 "checking", "rows", "share", "raw", "extra", "x", "out", "xmeta", "ometa",
                 "env", "alone", "lone")

    def __init__(self, sh, op, out_shape, reduce_op, async_op, timeout, seconds, checking,
                 rows, share):
        self.sh, self.op, self.out_shape, self.reduce_op = sh, op, out_shape, reduce_op
        self.async_op, self.timeout, self.seconds, self.checking = (async_op, timeout,
                                                                     seconds, checking)
        self.rows, self.share = rows, share
        self.alone = 0  # kept: _fit_alone of its arrays (they cannot change meanwhile)
        # its _Lone (Communicator._go_alone): None once kept (made at the first
        # repeat), False where none applies
        self.lone = False


class _Lone:
    """What a kept blocking call run alone (``Communicator._go_alone``) passes to its
    compiled run that does not change from call to call (executor.native_args'
    head, ``tmp``, the reduction's code and ``pend``), the state to zero, the
    fingerprint (None: no agreement) and the flight recorder's entry but for the
    call's number. Made at the call's first repeat."""

    __slots__ = ("head", "tmp8", "code", "pend", "state", "xs", "fp", "record", "shape",
                 "entry")

    @staticmethod
    def make(comm, c):
        """Kept call ``c``'s _Lone (_keep found its arrays fit as they are), or False
        where the lean run does not apply: no compiled plan, a fingerprint too long
        for the board."""
        sh = c.sh
        if sh.scratch is None:
            return False
        agree = c.checking and comm.size > 1
        if agree and sh.fp.size > FP_WORDS:
            return False
        sc = sh.scratch
        lone = _Lone()
        lone.head, lone.tmp8 = sh.head_for(comm._engine.shm), sc.tmp8
        lone.code, lone.pend = sh.code, sc.pend
        lone.state, lone.xs = sc.state, sc.xs
        lone.fp = sh.fp if agree else None
        lone.record, lone.shape = sh.plan.record, sh
        lone.entry = FlightRecorder.template(comm._id, c.op, sh.algo, sh.count, sh.dtype_str,
                                             comm.size)
        return lone


class _P2P:
    """A sendrecv, send or recv that ran as one compiled round, kept to repeat: a loop
    exchanging the same arrays with the same peers (``Communicator._p2p_again``)
    skips the argument checks, the plan lookup and the parsing of its timeout, and
    builds only the run's arguments. Holds the arrays by weak reference only, as
    ``_Call`` does."""

    __slots__ = ("x", "out", "xmeta", "ometa", "timeout", "env", "seconds", "plan", "state",
                 "xs", "head", "tail")

    def __init__(self, comm_id, x, out, timeout, seconds, plan, sc, head):
        self.x = None if x is None else weakref.ref(x)
        self.out = None if out is None else weakref.ref(out)
        self.xmeta = None if x is None else _meta(x)
        self.ometa = None if out is None else _meta(out)
        self.timeout = (type(timeout), timeout)
        self.env = env.per_call_key()
        self.seconds = seconds
        self.plan = plan
        self.state, self.xs = sc.state, sc.xs
        self.head = head
        self.tail = (sc.tmp8, comm_id, 0, 0) + NO_BOARD + (sc.pend,)


def _fit_alone(x, out) -> int:
    """Whether arrays ``x`` and ``out`` (None: a new result) can be the compiled run's
    buffers: plain ndarrays, C-contiguous, ``x`` writable (the run's buffers are
    typed so). 1: as they are; 2: with ``x`` copied first, as it overlaps ``out``
    (in place, as the general path does too); 0: not."""
    if type(x) is not np.ndarray:
        return 0
    f = x.flags
    if not (f.c_contiguous and f.writeable):
        return 0
    if out is None:
        return 1
    if type(out) is not np.ndarray or not out.flags.c_contiguous:
        return 0
    return 2 if x.size and out.size and np.may_share_memory(x, out) else 1


def _int_pairs(pairs):
    """A list of permute pairs as the tuple of (int, int) tuples it holds now, or None
    when it holds anything else (validated at every call). Compared by value, as a
    list can change in place between calls; exact ints only, so that True is not
    taken for 1."""
    try:
        t = tuple(map(tuple, pairs))
    except TypeError:
        return None
    for q in t:
        if len(q) != 2 or type(q[0]) is not int or type(q[1]) is not int:
            return None
    return t


def _int_lists(lists):
    """Count arguments (lists or tuples of ints) as the tuple of the tuples they hold
    now, or None when any holds anything else (validated at every call): compared
    by value, as for _int_pairs."""
    out = []
    for c in lists:
        if type(c) is not list and type(c) is not tuple:
            return None
        t = tuple(c)
        for v in t:
            if type(v) is not int:
                return None
        out.append(t)
    return tuple(out)


def _meta(a: np.ndarray) -> tuple:
    """What the validation of an array argument depends on and a program may change
    on the same array object between calls (Communicator._repeat compares them
    written out)."""
    return a.shape, a.strides, a.dtype, a.flags.writeable


class Communicator:
    def __init__(self, engine, topo, ranks, comm_id: int, strict: bool,
                 recorder: FlightRecorder):
        self._engine = engine
        self._recorder = recorder
        recorder.register(comm_id, ranks)
        self._failed: BaseException | None = None
        self.topology = topo
        self._ranks = tuple(ranks)  # world ranks of the members
        self._view = GroupView(topo, self._ranks)
        self._id = comm_id
        self.strict = strict
        self.size = len(self._ranks)
        self.rank = self._ranks.index(engine.rank)
        self.world_rank = engine.rank
        self.placement = topo.placement(engine.rank)
        self._seq = 0
        self._nsplit = 0
        self._ngroup: dict[tuple, int] = {}
        self._p2p_sent: dict[int, int] = {}
        self._p2p_recv: dict[int, int] = {}
        self._plans: dict = {}
        # (id(x) or 0, id(out) or 0, dst or -1, src or -1) -> _P2P: point-to-point
        # calls kept to repeat; and the keys of recent ones, kept once they come again
        self._p2p_kept: dict = {}
        self._p2p_seen: set = set()
        # arguments given as lists (permute's pairs, the v operations' counts): their
        # value (_int_pairs, _int_lists) -> the one tuple of it that kept calls hold,
        # compared by identity in _repeat (_by_value)
        self._values: dict = {}
        self._shapes: dict = {}  # call shape -> _Shape
        self._kept: dict = {}  # (operation, id(x)) -> its _Call kept to repeat
        self._seen: dict = {}  # (operation, id(x)) -> a weak reference to that array, for
        # the input arrays of recent calls
        self._squares: dict = {}  # all_to_all block size -> its count matrix
        self._vmatrices: dict = {}  # all_to_all_v (send, recv counts, row elems) ->
        # (matrix, count rows, pair share)
        self._control = Control(self)
        #: the last collective this rank ran: schedule.CallRecord(op, algorithm,
        #: schedule, itemsize), for the time model (neuron_mpi.model.price_record)
        self.last_call = None

    @property
    def ranks(self) -> tuple[int, ...]:
        """World ranks of the members, in group order."""
        return self._ranks

    def __repr__(self):
        return (f"<neuron_mpi.Communicator rank {self.rank} of {self.size} on "
                f"{self.topology.instance} LNC={self.topology.lnc}>")

    # --- running a schedule -------------------------------------------------------
    def _plan(self, op, algorithm, sizes, dtype, avg=False, extra=None, traced=False):
        # a traced call runs on the executor's Python path, where steps are visible,
        # and runs the schedule's steps as written (its leading copies too), so that
        # its trace has the steps of the modeled one (docs/trace.md)
        key = (op, algorithm, sizes, dtype, avg, extra, traced)
        plan = self._plans.get(key)
        if plan is None:
            sched = schedule_for(self._view, op, algorithm, sizes, avg, extra)
            eng = self._engine
            plan = Plan(sched, self._view, self.rank, dtype.itemsize, eng.piece_bytes,
                        None if traced else eng, dtype_name(dtype), cut=eng.piece_for,
                        elide=not traced)
            plan.record = CallRecord(op, algorithm, sched, dtype.itemsize)
            if len(self._plans) > 64:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    # --- reliability: agreement, deadlines, failure ---------------------------------
    def _ensure_usable(self):
        if self._failed is not None:
            raise CommunicatorFailedError(
                f"this communicator failed earlier and cannot be used: {self._failed}"
            ) from self._failed

    def _fail(self, err, entry=None, ex=None):
        self._failed = err
        if ex is not None:
            self._engine.cancel(ex, err)
        self._engine.forget(self._id, err)
        if entry is not None:
            FlightRecorder.fail(entry, err, getattr(err, "waiting_for", None))
        self._recorder.dump(f"{type(err).__name__}: {err}")

    def _exchange(self, fp, op, timeout, rows=None, share=0):
        """All-gather fingerprints across the group (the control plane: a shared
        board, or routed through the engine) and compare them; for all-to-all-v,
        check the count rows pairwise (``share``: this rank's agree.pair_share; the
        rows themselves are all-gathered only when they disagree, and only once every
        member agreed it is an all-to-all-v)."""
        seconds = _timeout_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        seq = int(fp[A.SEQ])
        self._control.exchange(fp, op, seq, rows, share, deadline,
                               lambda: self._agreement_timeout(op, seq, seconds))

    def _tell_group_rejected(self, op, timeout, err=None):
        """This rank rejected its arguments (``err``): take part in the agreement with
        status 1 so the other members fail too instead of waiting, the call recorded
        as refused (as the members record it); the caller then raises its own error."""
        if not (_checking() and self.size > 1):
            return
        self._seq += 1
        # (split records no call on any member)
        entry = None if op == "split" else self._recorder.start(
            self._id, self._seq, op, None, None, None, self.size)
        try:
            _timeout_seconds(timeout)
        except InvalidArgumentError:
            timeout = None  # the bad timeout is this rank's own error: use the default
        fp = A.fingerprint(op, self._seq, status=1)
        # (all-to-all-v's members' vectors carry a share of the count check: the
        # same exchange, with a share of 0 and no rows, which compare never reaches)
        rows = () if op == "all_to_all_v" else None
        try:
            self._exchange(fp, op, timeout, rows, 0)
        except InvalidArgumentError as e:
            # the refusal itself, seen by every member: the communicator goes on
            if entry is not None:
                FlightRecorder.refuse(entry, err if err is not None else e)
        except NeuronMPIError as e:
            # the agreement timed out, or it disagreed: the others fail the
            # communicator, so this rank does too (it raises its own error)
            self._fail(e, entry)

    def _timeout_error(self, ex, op, seconds):
        step, pending = ex.waiting_for()
        topo = self.topology
        me = self.world_rank
        unread = ex.unread()
        if pending:
            parts = []
            for src, xid in pending[:4]:
                path = topo.route(src, me)
                prev = path[-2]
                link = topo.link_between_ranks(prev, me).kind
                via = "" if prev == src else f" forwarded via rank {prev}"
                parts.append(f"data from rank {src} (transfer {xid}){via} over {link}")
            more = f" and {len(pending) - 4} more" if len(pending) > 4 else ""
            what = "; ".join(parts) + more
        elif unread:
            what = "; ".join(f"rank {dst} to read transfer {xid} from this rank's buffer"
                             for dst, xid in unread[:4])
            what += f" and {len(unread) - 4} more" if len(unread) > 4 else ""
        else:
            what = "its own sends to complete"
        err = CollectiveTimeoutError(
            f"{op} (call {ex.seq} on this communicator, algorithm {ex.algorithm}) timed out "
            f"after {seconds:g} s at step {step + 1} of {len(ex.plan.steps)}: waiting for "
            f"{what}")
        err.waiting_for = {"step": step, "pending": [list(p) for p in pending]}
        return err

    def _shape(self, op, algorithm, env_algo, sizes, x, out_shape, reduce_op, extra, fp_count,
               dig, traced, skey) -> "_Shape":
        """The call's ``_Shape``, worked out on the first call of that shape. The key
        holds everything the algorithm, the plan and the fingerprint depend on
        (``env_algo``: NEURON_MPI_ALGO, read at every call)."""
        key = (op, algorithm, None if algorithm is not None else env_algo,
               sizes if skey is None else skey, x.dtype, x.size, out_shape, reduce_op,
               extra, fp_count, dig, traced)
        try:
            sh = self._shapes.get(key)
        except TypeError:  # an unhashable part: work it out, keep nothing
            sh, key = None, None
        if sh is None:
            sh = _Shape(self, op, algorithm, sizes, x, out_shape, reduce_op, extra, fp_count,
                        dig, traced)
            if key is not None:
                if len(self._shapes) > 64:
                    self._shapes.clear()
                self._shapes[key] = sh
        return sh

    def _run(self, op, algorithm, sizes, x, out, out_shape, reduce_op="sum", extra=None,
             async_op=False, timeout=None, fp_count=None, dig=0, rows=None, skey=None,
             share=0, keep=None):
        """x: validated input; out: validated out or None. ``skey``: a small hashable
        standing for ``sizes`` in the shape cache (all_to_all's count matrix).
        ``rows``, ``share``: all-to-all-v's count rows and this rank's share of their
        pairwise check (agree.pair_share). ``keep``: the caller's raw arguments (other
        than the arrays) and an argument compared by identity (None: none), to keep
        the call for ``_repeat``."""
        tr = _tracing.ACTIVE
        ekey = env.per_call_key()
        env_algo, seconds, checking = _per_call(timeout, ekey)
        sh = self._shape(op, algorithm, env_algo, sizes, x, out_shape, reduce_op, extra,
                         fp_count, dig, tr is not None, skey)
        c = _Call(sh, op, out_shape, reduce_op, async_op, timeout, seconds, checking, rows,
                  share)
        if keep is not None and tr is None:
            self._keep(c, keep[0], keep[1], ekey, x, out)
        return self._go(c, x, out)

    def _keep(self, c, raw, extra, ekey, x, out) -> None:
        """Keep call ``c`` for its operation and input array when that array was the
        input of a recent call of the operation (a loop reusing its buffers, several
        of them in turn as a step's gradient buckets are; a program passing new
        arrays at every call pays a weak reference and a dictionary entry, both gone
        with the array). At most KEPT calls and SEEN arrays are remembered; past that
        each starts over."""
        if type(x) is not np.ndarray or out is not None and type(out) is not np.ndarray:
            return
        key = (c.op, id(x))
        seen = self._seen
        was = seen.get(key)
        if was is None or was() is not x:
            if len(seen) >= SEEN:
                seen.clear()
            # (the entry goes when the array does: a program slicing new views at
            # every call leaves none behind, and no new array finds a dead one's id)
            seen[key] = weakref.ref(x, functools.partial(seen.pop, key))
            return
        kept = self._kept
        c.raw, c.extra, c.env = raw, extra, ekey
        c.x, c.xmeta = weakref.ref(x, functools.partial(kept.pop, key)), _meta(x)
        c.out, c.ometa = (None, None) if out is None else (weakref.ref(out), _meta(out))
        # (what _fit_alone looked at does not change while the metas match: the same
        # objects, whose data cannot move into one another)
        c.alone = not c.async_op and c.rows is None and _fit_alone(x, out)
        # (the lean run: blocking, no count rows, the arrays as they are, not in place,
        # an out given; made at the first repeat)
        c.lone = None if c.alone == 1 and out is not None else False
        if len(kept) >= KEPT:
            kept.clear()
        kept[key] = c

    def _repeat(self, name, x, out, raw, extra=None):
        """The kept call of operation ``name`` when this call repeats it: the same
        input and output arrays (by identity, with the shape, strides, dtype and
        writability the validation saw), the same other arguments (``raw``: each
        argument's type, then its value, so that a value is only compared with one
        of its own type: an array passed as ``op`` is refused by the validation, not
        by ``==``; ``extra``: the same object, immutable), the same per-call
        environment, no tracing. Else None:
        the call is validated and worked out as a new one (also on a failed
        communicator, which the decorated path refuses)."""
        c = self._kept.get((name, id(x)))
        if c is None or c.raw != raw or c.x() is not x or c.extra is not extra or \
                _tracing.ACTIVE is not None or self._failed is not None:
            return None
        o = c.out
        if o is None:
            if out is not None:
                return None
        elif o() is not out or (out.shape, out.strides, out.dtype,
                                out.flags.writeable) != c.ometa:
            return None
        if (x.shape, x.strides, x.dtype, x.flags.writeable) != c.xmeta or \
                env.per_call_key() != c.env:
            return None
        return c

    def _by_value(self, name, x, out, raw, t):
        """_repeat for a call whose list arguments hold ``t`` now (_int_pairs or
        _int_lists; None: not kept by value): the kept call holding that value."""
        same = None if t is None else self._values.get(t)
        return None if same is None else self._repeat(name, x, out, raw, same)

    def _keep_by_value(self, raw, t):
        """``keep`` for _run of a call whose list arguments held ``t`` (validated by
        now): kept under the one tuple of that value (at most KEPT values
        remembered); None (not kept) when they were not lists of ints."""
        if t is None:
            return None
        values = self._values
        if t not in values and len(values) >= KEPT:
            values.clear()
        return raw, values.setdefault(t, t)

    def _go(self, c, x, out):
        """Run call ``c`` (a _Call) on arrays ``x`` and ``out`` (validated)."""
        lone = c.lone
        if lone is not False and _tracing.ACTIVE is None:
            if lone is None:
                lone = c.lone = _Lone.make(self, c)
            if lone:
                got = self._go_alone(c, lone, x, out)
                if got is not None:
                    return got
        tr = _tracing.ACTIVE
        sh, op, out_shape, async_op, seconds = c.sh, c.op, c.out_shape, c.async_op, c.seconds
        algo, plan = sh.algo, sh.plan
        deadline = None if seconds is None else time.monotonic() + seconds
        seq = self._seq + 1
        entry = self._recorder.start(self._id, seq, op, algo, sh.count, sh.dtype_str,
                                     self.size)
        self._seq = seq
        self.last_call = plan.record
        call = None if tr is None else tr.call_begin(
            self._id, seq, op, algo, sh.nbytes, str(x.dtype), self.size, len(plan.steps))
        fp = None
        if c.checking and self.size > 1:
            # a blocking call's agreement is over when it returns: its shape's
            # fingerprint is reused; an async call's lives on in the background
            fp = sh.fp.copy() if async_op else sh.fp
            fp[A.SEQ] = seq
        ran, rows, share = None, c.rows, c.share
        if sh.scratch is not None and not async_op and call is None:
            if rows is not None and fp is not None:
                # all-to-all-v: the compiled agreement checks the counts pairwise too,
                # by this rank's share past the fingerprint's fields (agree.pair_share)
                fpv = np.append(fp, share)
                ran = self._run_alone(sh, x, out, out_shape, seq, deadline, fpv)
                if ran is None:  # nothing run: agree on the Python side, then the data
                    try:
                        self._exchange(fp, op, c.timeout, rows, share)
                    except NeuronMPIError as e:
                        self._agreement_failed(e, entry)
                    fp = rows = None
                    ran = self._run_alone(sh, x, out, out_shape, seq, deadline, None)
                elif not ran[0] and ran[2][1] == native.MISMATCH:
                    self._counts_mismatch(op, seq, rows, deadline, seconds, entry)
                else:  # (the general path goes on with the same agreement)
                    fp = fpv
            else:
                rows = None  # (all-to-all-v unchecked: nothing to agree on)
                ran = self._run_alone(sh, x, out, out_shape, seq, deadline, fp, c.alone)
            if ran is not None and ran[0]:
                FlightRecorder.finish(entry)
                return ran[1]
        # (after a lone run, the input it read: a copy of an input overlapping out, which
        # the run may have written to since)
        return self._run_general(sh, op, x if ran is None else ran[3], out, out_shape,
                                 c.reduce_op, async_op, c.timeout, seconds, deadline, seq,
                                 entry, tr, call, fp, ran, rows, share)

    def _go_alone(self, c, lone, x, out):
        """_go for a kept blocking call that runs alone (``lone``: its _Lone): the
        agreement and the whole schedule as one compiled run on this thread, as
        _run_alone makes it, with only the lines a repeat needs (at small sizes with
        more ranks than cores the Python around the run cost as much CPU as the run:
        docs/architecture.md). None, having done nothing, when anything else is in
        flight or the board is busy or not yet found: _go's own path runs it. A run
        that does not end done goes on in _run_general, as _go's does."""
        eng, ctl, fp = self._engine, self._control, lone.fp
        if eng.active or eng.outq or eng.inbox or eng.mpi is not None:
            return None
        if fp is not None and (ctl._b is None or ctl._open is not None):
            return None  # (the board not found yet, or an agreement still open)
        sh, seconds = lone.shape, c.seconds
        deadline = None if seconds is None else time.monotonic() + seconds
        seq = self._seq + 1
        entry = self._recorder.start_like(lone.entry, seq)
        self._seq = seq
        self.last_call = lone.record
        lone.state.fill(0)
        if fp is None:
            board = NO_BOARD
        else:
            fp[A.SEQ] = seq
            p = ctl._parity
            board = ctl.board_turn(fp)
            lone.xs[3] = 1  # agree first
        args = native_args(None, None, None, None,
                           x.view(_U8) if x.ndim == 1 else x.reshape(-1).view(_U8),
                           out.view(_U8) if out.ndim == 1 else out.reshape(-1).view(_U8),
                           lone.tmp8, self._id, seq, lone.code, board, lone.pend, lone.head)
        status = eng.run_alone(args, deadline)
        if status == native.DONE:
            if fp is not None:
                ctl.turn_over(p)
            FlightRecorder.finish(entry)
            return out
        return self._run_general(sh, c.op, x, out, c.out_shape, c.reduce_op, False, c.timeout,
                                 seconds, deadline, seq, entry, None, None, fp,
                                 None if status is None else (False, out, (args, status), x),
                                 None, c.share)

    def _run_general(self, sh, op, x, out, out_shape, reduce_op, async_op, timeout, seconds,
                     deadline, seq, entry, tr, call, fp, ran, rows, share):
        """_run's path for every call the compiled run alone did not finish: an
        Execution driven here (blocking) or by the agent (async). Apart from _run so
        that a call run alone builds none of the closures' cells."""
        eng, algo, plan = self._engine, sh.algo, sh.plan
        agreement = pre = None
        try:
            if fp is not None:
                if ran is not None or plan.native is not None and (
                        async_op or rows is None and eng.solo()):
                    # one compiled run: the agreement, then the data (async: the
                    # agent runs both while the program computes, also beside
                    # other calls in flight; a mismatch is raised by wait(), still
                    # before any data moved). An async all-to-all-v's share of the
                    # pairwise count check rides past its fingerprint's fields, as
                    # a blocking one's lone run carries it (a vector too long for the
                    # board: no board agreement, the exchange below).
                    fpv = fp if ran is not None or rows is None else np.append(fp, share)
                    agreement = self._control.board_agreement(
                        fpv, op, seq, deadline,
                        lambda: self._agreement_timeout(op, seq, seconds), behind=async_op)
                if agreement is None and async_op:
                    # no board: its agreement runs before its steps, in the background
                    # too (control.RoutedAgreement), or at the call (None: a board
                    # but a vector too long for it)
                    pre = self._control.routed_agreement(fp, op, seq, rows, share)
                if agreement is None and pre is None:
                    self._exchange(fp, op, timeout, rows, share)
        except NeuronMPIError as e:
            if call is not None:
                tr.call_end(call, e)
            self._agreement_failed(e, entry)
        if not plan.steps and agreement is None and not async_op:
            # nothing to move (a barrier, whose agreement was the barrier): no
            # execution to drive
            if call is not None:
                tr.call_end(call)
            FlightRecorder.finish(entry)
            return out if out is not None else np.empty(out_shape, x.dtype)
        x_flat = x.reshape(-1) if type(x) is np.ndarray and x.flags.c_contiguous else \
            np.ascontiguousarray(x).reshape(-1)  # (a subclass such as np.matrix stays 2-d)
        result = out if out is not None else (
            np.empty(out_shape, x.dtype) if ran is None else ran[1])
        target = result if result.flags.c_contiguous else np.empty(out_shape, x.dtype)
        out_flat = target.reshape(-1)
        if out is not None and x_flat.size and out_flat.size and \
                np.may_share_memory(x_flat, out_flat) and np.shares_memory(x_flat, out_flat):
            x_flat = x_flat.copy()  # in place: keep the input readable throughout
        scratch = sh.lend() if async_op else sh.scratch
        bufs = make_buffers(x_flat, out_flat, plan.tmp_elems, x.dtype,
                            None if scratch is None else scratch.tmp)
        ex = Execution(eng, plan, bufs, self._id, seq, op,
                       "sum" if reduce_op == "avg" else reduce_op, agreement, tr, scratch)
        ex.algorithm = algo
        if ran is not None:
            ex.adopt(*ran[2])  # go on from where the compiled run stopped
        if agreement is not None:
            agreement.execution = ex
        ex.pre = pre

        def on_timeout():
            if ex.agreeing:
                err = self._agreement_timeout(op, seq, seconds)
                if agreement is None:  # routed: the census once out of the drive
                    return err
                return self._control._named(err, agreement.absent())
            return self._timeout_error(ex, op, seconds)

        def wait():
            try:
                if not (async_op and ex.done and not eng.outq):  # (an async call the
                    # agent finished: nothing to drive, no claim of the engine)
                    eng.drive(lambda: eng.finished(ex), deadline, on_timeout,
                              start=None if async_op else ex, lone=ex)
            except Exception as e:  # a timeout, a failed read: the call failed midway
                if call is not None:
                    tr.call_end(call, e)
                if isinstance(e, NeuronMPIError) and (
                        agreement is not None and not agreement.finished or ex.agreeing):
                    eng.cancel(ex, e)
                    if ex.pre is not None and isinstance(e, CollectiveTimeoutError):
                        self._control._named(e, self._control._census(seq))
                    self._agreement_failed(e, entry)
                self._fail(e, entry, ex)
                raise
            if ex.error is not None:
                if call is not None:
                    tr.call_end(call, ex.error)
                if isinstance(ex.error, NeuronMPIError) and ex.agreeing:
                    # failed in its agreement on the agent's thread: as on this one
                    # (a member that refused its own arguments keeps the
                    # communicator, so the others keep it too)
                    self._agreement_failed(ex.error, entry)
                self._fail(ex.error, entry, ex)
                raise ex.error
            if target is not result:
                result[...] = target
            if async_op:
                sh.give_back(scratch)
            if call is not None:
                tr.call_end(call)
            FlightRecorder.finish(entry)
            return result

        if async_op:
            eng.start(ex)
            return Handle(self, ex, wait)
        return wait()

    def _run_alone(self, sh, x, out, out_shape, seq, deadline, fp, fit=0):
        """A blocking call with nothing else of this rank in flight, on a compiled
        plan: the agreement and the whole schedule as one compiled run on this
        thread, building no Execution or BoardAgreement (for a small call those and
        the general path cost more than its data). Returns None when the call does
        not qualify (nothing done: the general path runs it), else (done, result, run,
        input): done, or the run's arguments (with its state) and the status it ended
        with, which the general path adopts and finishes (a timeout, a mismatch, a
        piece of the wrong size, a failed read, a channel to copy aside), and the
        input array the run read. ``fp``: the call's fingerprint, None when nobody
        agrees. ``fit``: _fit_alone(x, out), when known."""
        fit = fit or _fit_alone(x, out)
        if not fit:
            return None
        if fit == 2:  # in place: the run reads a copy of the input
            x = x.copy()
        eng, ctl = self._engine, self._control
        sc = sh.scratch
        if fp is not None:
            if ctl._open is not None or fp.size > FP_WORDS or ctl._board is None:
                return None
            xs = sc.zeroed()[0]
            parity = ctl._parity
            board = ctl.board_turn(fp)
            xs[3] = 1  # agree first
        else:
            sc.zeroed()
            board = NO_BOARD
        result = out if out is not None else np.empty(out_shape, x.dtype)
        args = sh.run_args(eng.shm, (x if x.ndim == 1 else x.reshape(-1)).view(_U8),
                           (result if result.ndim == 1 else result.reshape(-1)).view(_U8),
                           self._id, seq, board)
        status = eng.run_alone(args, deadline)
        if status is None:  # something else in flight, or pieces set aside
            return None
        if status == native.DONE:
            if fp is not None:
                ctl.turn_over(parity)
            return True, result, None, x
        return False, result, (args, status), x

    def _counts_mismatch(self, op, seq, rows, deadline, seconds, entry):
        """An all-to-all-v whose compiled agreement found a mismatch: every member has
        arrived and reads the same table. The turn is over; raise on every member what
        the Python side would (_exchange): the fingerprints' difference, else the pair
        whose counts disagree (the count rows all-gathered to name it)."""
        ctl = self._control
        p = ctl._parity
        table = ctl._board.table(p)[:, :len(A.FIELDS)].copy()
        ctl.turn_over(p)
        try:
            A.compare(table, op, seq)
            ctl.name_pair(rows, op, seq, deadline,
                          lambda: self._agreement_timeout(op, seq, seconds))
        except NeuronMPIError as e:
            self._agreement_failed(e, entry)

    def _agreement_failed(self, e, entry):
        """The agreement failed before any data moved: raise ``e`` on every member."""
        e.agreed = True
        if isinstance(e, InvalidArgumentError):
            # a member rejected its own arguments: nothing moved, and that rank
            # keeps the communicator, so the others do too
            FlightRecorder.refuse(entry, e)
        else:
            self._fail(e, entry)
        raise e

    def _agreement_timeout(self, op, seq, seconds):
        err = CollectiveTimeoutError(
            f"{op} (call {seq} on this communicator): no agreement on the "
            f"arguments within {seconds:g} s: some of the {self.size} ranks have not "
            "called it (a rank exited, skipped the call, or is stuck elsewhere)")
        err.waiting_for = "argument agreement"
        return err

    def algorithm_for(self, op: str, algorithm=None, nbytes: int | None = None) -> str:
        """The algorithm ``op`` would run with on this group for a buffer of
        ``nbytes`` (all-gather: its output), e.g. for --show-algorithm."""
        return choose(op, self._view, algorithm, nbytes)

    # --- collectives ----------------------------------------------------------------
    def all_reduce(self, x, op="sum", out=None, algorithm=None, async_op=False, timeout=None):
        raw = (type(op), op, type(algorithm), algorithm, async_op, type(timeout), timeout)
        c = self._repeat("all_reduce", x, out, raw)
        if c is not None:  # (the decorator's checks: _repeat's, and _go raises agreed)
            return self._go(c, x, out)
        return self._all_reduce(x, op, out, algorithm, async_op, raw, timeout=timeout)

    @_collective("all_reduce")
    def _all_reduce(self, x, op, out, algorithm, async_op, raw, timeout=None):
        x = V.array(x)
        op = V.reduce_op(op)
        out = V.out_array(out, x.shape, x.dtype)
        return self._run("all_reduce", algorithm, int(x.size), x, out, x.shape, op,
                         async_op=async_op, timeout=timeout, keep=(raw, None))

    def all_gather(self, x, out=None, algorithm=None, async_op=False, timeout=None):
        raw = (type(algorithm), algorithm, async_op, type(timeout), timeout)
        c = self._repeat("all_gather", x, out, raw)
        if c is not None:  # (the decorator's checks: _repeat's, and _go raises agreed)
            return self._go(c, x, out)
        return self._all_gather(x, out, algorithm, async_op, raw, timeout=timeout)

    @_collective("all_gather")
    def _all_gather(self, x, out, algorithm, async_op, raw, timeout=None):
        x = V.array(x)
        r = V.rows(x)
        shape = (r * self.size,) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        counts = (int(x.size),) * self.size
        return self._run("all_gather", algorithm, counts, x, out, shape, async_op=async_op,
                         timeout=timeout, dig=A.digest(x.shape[1:]), keep=(raw, None))

    def all_gather_v(self, x, counts, out=None, algorithm=None, async_op=False, timeout=None):
        raw = (type(algorithm), algorithm, async_op, type(timeout), timeout)
        t = _int_lists((counts,))
        c = self._by_value("all_gather_v", x, out, raw, t)
        if c is not None:  # (the same counts as a kept call's: see _permute)
            return self._go(c, x, out)
        return self._all_gather_v(x, counts, out, algorithm, async_op, raw, t,
                                  timeout=timeout)

    @_collective("all_gather_v")
    def _all_gather_v(self, x, counts, out, algorithm, async_op, raw, t, timeout=None):
        x = V.array(x)
        r = V.rows(x)
        counts = V.counts(counts, self.size)
        if r != counts[self.rank]:
            raise InvalidArgumentError(
                f"counts: counts[{self.rank}] = {counts[self.rank]} rows but x has {r} rows")
        shape = (sum(counts),) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        re = V.row_elems(x)
        return self._run("all_gather_v", algorithm, tuple(c * re for c in counts), x, out,
                         shape, async_op=async_op, timeout=timeout, fp_count=sum(counts) * re,
                         dig=A.digest(counts, x.shape[1:]), keep=self._keep_by_value(raw, t))

    def reduce_scatter(self, x, op="sum", out=None, algorithm=None, async_op=False,
                       timeout=None):
        raw = (type(op), op, type(algorithm), algorithm, async_op, type(timeout), timeout)
        c = self._repeat("reduce_scatter", x, out, raw)
        if c is not None:  # (the decorator's checks: _repeat's, and _go raises agreed)
            return self._go(c, x, out)
        return self._reduce_scatter(x, op, out, algorithm, async_op, raw, timeout=timeout)

    @_collective("reduce_scatter")
    def _reduce_scatter(self, x, op, out, algorithm, async_op, raw, timeout=None):
        x = V.array(x)
        op = V.reduce_op(op)
        r = V.rows(x)
        if r % self.size:
            raise InvalidArgumentError(
                f"x: axis 0 ({r} rows) must divide evenly into {self.size} blocks; use "
                "reduce_scatter_v for uneven blocks")
        shape = (r // self.size,) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        counts = (int(x.size) // self.size,) * self.size
        return self._run("reduce_scatter", algorithm, counts, x, out, shape, op,
                         async_op=async_op, timeout=timeout, dig=A.digest(x.shape[1:]),
                         keep=(raw, None))

    def reduce_scatter_v(self, x, counts, op="sum", out=None, algorithm=None, async_op=False,
                         timeout=None):
        raw = (type(op), op, type(algorithm), algorithm, async_op, type(timeout), timeout)
        t = _int_lists((counts,))
        c = self._by_value("reduce_scatter_v", x, out, raw, t)
        if c is not None:  # (the same counts as a kept call's: see _permute)
            return self._go(c, x, out)
        return self._reduce_scatter_v(x, counts, op, out, algorithm, async_op, raw, t,
                                      timeout=timeout)

    @_collective("reduce_scatter_v")
    def _reduce_scatter_v(self, x, counts, op, out, algorithm, async_op, raw, t, timeout=None):
        x = V.array(x)
        op = V.reduce_op(op)
        r = V.rows(x)
        counts = V.counts(counts, self.size)
        if sum(counts) != r:
            raise InvalidArgumentError(
                f"counts: they sum to {sum(counts)} rows but x has {r} rows")
        shape = (counts[self.rank],) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        re = V.row_elems(x)
        return self._run("reduce_scatter_v", algorithm, tuple(c * re for c in counts), x, out,
                         shape, op, async_op=async_op, timeout=timeout,
                         dig=A.digest(counts, x.shape[1:]), keep=self._keep_by_value(raw, t))

    def all_to_all(self, x, out=None, algorithm=None, async_op=False, timeout=None):
        raw = (type(algorithm), algorithm, async_op, type(timeout), timeout)
        c = self._repeat("all_to_all", x, out, raw)
        if c is not None:  # (the decorator's checks: _repeat's, and _go raises agreed)
            return self._go(c, x, out)
        return self._all_to_all(x, out, algorithm, async_op, raw, timeout=timeout)

    @_collective("all_to_all")
    def _all_to_all(self, x, out, algorithm, async_op, raw, timeout=None):
        x = V.array(x)
        r = V.rows(x)
        if r % self.size:
            raise InvalidArgumentError(
                f"x: axis 0 ({r} rows) must divide evenly into {self.size} blocks; use "
                "all_to_all_v for uneven blocks")
        out = V.out_array(out, x.shape, x.dtype)
        b = int(x.size) // self.size
        matrix = self._squares.get(b)
        if matrix is None:  # n x n counts: built and hashed once per block size
            matrix = tuple((b,) * self.size for _ in range(self.size))
            if len(self._squares) > 16:
                self._squares.clear()
            self._squares[b] = matrix
        return self._run("all_to_all", algorithm, matrix, x, out, x.shape, async_op=async_op,
                         timeout=timeout, dig=A.digest(x.shape[1:]), skey=("square", b),
                         keep=(raw, None))

    def all_to_all_v(self, x, send_counts, recv_counts, out=None, algorithm=None,
                     async_op=False, timeout=None):
        raw = (type(algorithm), algorithm, async_op, type(timeout), timeout)
        t = _int_lists((send_counts, recv_counts))
        c = self._by_value("all_to_all_v", x, out, raw, t)
        if c is not None:  # (the same counts as a kept call's: see _permute)
            return self._go(c, x, out)
        return self._all_to_all_v(x, send_counts, recv_counts, out, algorithm, async_op, raw,
                                  t, timeout=timeout)

    @_collective("all_to_all_v")
    def _all_to_all_v(self, x, send_counts, recv_counts, out, algorithm, async_op, raw, t,
                      timeout=None):
        x = V.array(x)
        r = V.rows(x)
        sc = V.counts(send_counts, self.size, "send_counts")
        rc = V.counts(recv_counts, self.size, "recv_counts")
        if sum(sc) != r:
            raise InvalidArgumentError(
                f"send_counts: they sum to {sum(sc)} rows but x has {r} rows")
        if sc[self.rank] != rc[self.rank]:
            raise InvalidArgumentError(
                f"recv_counts: recv_counts[{self.rank}] = {rc[self.rank]} but this rank "
                f"sends itself send_counts[{self.rank}] = {sc[self.rank]}")
        shape = (sum(rc),) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype)
        re = V.row_elems(x)
        # this rank knows its row (what it sends) and its column (what it receives);
        # built once per set of counts (a loop's calls repeat them), with the count
        # rows and this rank's share of their check
        kept = self._vmatrices.get((sc, rc, re))
        if kept is None:
            me, n = self.rank, self.size
            matrix = tuple(
                tuple(sc[j] * re if i == me else (rc[i] * re if j == me else 0)
                      for j in range(n)) for i in range(n))
            if len(self._vmatrices) > 16:
                self._vmatrices.clear()
            kept = self._vmatrices[(sc, rc, re)] = (matrix, np.array(sc + rc, np.int64),
                                                    A.pair_share(me, sc, rc))
        matrix, rows, share = kept
        return self._run("all_to_all_v", algorithm, matrix, x, out, shape, async_op=async_op,
                         timeout=timeout, fp_count=0, dig=A.digest(x.shape[1:]), rows=rows,
                         share=share, keep=self._keep_by_value(raw, t))

    def permute(self, x, pairs, out=None, algorithm=None, async_op=False, timeout=None):
        raw = (type(algorithm), algorithm, async_op, type(timeout), timeout)
        t = None
        if type(pairs) is list:  # (a list of the same pairs as now: see _permute)
            t = _int_pairs(pairs)
            c = self._by_value("permute", x, out, raw, t)
        else:  # (the same tuple of pairs)
            c = self._repeat("permute", x, out, raw, pairs)
        if c is not None:
            return self._go(c, x, out)
        return self._permute(x, pairs, out, algorithm, async_op, raw, t, timeout=timeout)

    @_collective("permute")
    def _permute(self, x, pairs, out, algorithm, async_op, raw, t, timeout=None):
        given = pairs
        x = V.array(x)
        pairs = V.pairs(pairs, self.size)
        out = V.out_array(out, x.shape, x.dtype)
        # kept, and later matched by identity, for a tuple of tuples of the integers
        # just validated, which no program can change in place; a list of pairs can
        # be: kept under the one tuple of its value, which the next call's list must
        # hold (permute) as plain ints
        keep = None
        if type(given) is tuple and all(type(q) is tuple for q in given):
            keep = (raw, given)
        elif type(given) is list:
            keep = self._keep_by_value(raw, t)
        return self._run("permute", algorithm, int(x.size), x, out, x.shape, extra=pairs,
                         async_op=async_op, timeout=timeout, dig=A.digest(pairs or [[-1, -1]]),
                         keep=keep)

    def broadcast(self, x, root=0, out=None, algorithm=None, async_op=False, timeout=None):
        raw = (type(root), root, type(algorithm), algorithm, async_op, type(timeout),
               timeout)
        c = self._repeat("broadcast", x, out, raw)
        if c is not None:
            return self._go(c, x, out)
        return self._broadcast(x, root, out, algorithm, async_op, raw, timeout=timeout)

    @_collective("broadcast")
    def _broadcast(self, x, root, out, algorithm, async_op, raw, timeout=None):
        x = V.array(x)
        root = V.rank(root, self.size, "root")
        out = V.out_array(out, x.shape, x.dtype)
        return self._run("broadcast", algorithm, int(x.size), x, out, x.shape, extra=root,
                         async_op=async_op, timeout=timeout, dig=A.digest(x.shape),
                         keep=(raw, None))

    @_collective("barrier")
    def barrier(self, async_op=False, timeout=None):
        """Wait until every member has called. ``async_op``: a Handle at once, done
        once every member has called (MPI_Ibarrier); else None."""
        # with the argument agreement on, the agreement is the barrier: no rounds of
        # empty messages after it (algorithms/direct.barrier)
        agreed = 1 if self.size > 1 and _checking() else None
        h = self._run("barrier", None, 0, _EMPTY_BYTES, None, (0,), extra=agreed,
                      async_op=async_op, timeout=timeout)
        return h if async_op else None

    # --- rooted collectives and prefix reductions (algorithms/rooted.py) ----------------
    @_collective("reduce")
    def reduce(self, x, root=0, op="sum", out=None, async_op=False, timeout=None):
        """``op`` over the members' ``x``, on ``root`` only: returns the result there
        (``out`` when given) and None on the other members."""
        x = V.array(x)
        op = V.reduce_op(op)
        root = V.rank(root, self.size, "root")
        mine = self.rank == root
        out = V.out_array(out, x.shape, x.dtype) if mine else None
        res = self._run("reduce", None, int(x.size), x, out, x.shape if mine else (0,), op,
                        extra=root, async_op=async_op, timeout=timeout,
                        dig=A.digest(x.shape))
        return res if mine or async_op else None

    @_collective("gather")
    def gather(self, x, root=0, counts=None, out=None, async_op=False, timeout=None):
        """The members' ``x`` concatenated along axis 0 in rank order, on ``root``
        only (None elsewhere). ``counts``: rows per member, the same list on every
        member (default: all alike)."""
        x = V.array(x)
        r = V.rows(x)
        root = V.rank(root, self.size, "root")
        counts = (r,) * self.size if counts is None else V.counts(counts, self.size)
        if r != counts[self.rank]:
            raise InvalidArgumentError(
                f"counts: counts[{self.rank}] = {counts[self.rank]} rows but x has {r} rows")
        mine = self.rank == root
        shape = (sum(counts),) + x.shape[1:]
        out = V.out_array(out, shape, x.dtype) if mine else None
        re = V.row_elems(x)
        res = self._run("gather", None, tuple(c * re for c in counts), x, out,
                        shape if mine else (0,), extra=root, async_op=async_op,
                        timeout=timeout, fp_count=sum(counts) * re,
                        dig=A.digest(counts, x.shape[1:]))
        return res if mine or async_op else None

    @_collective("scatter")
    def scatter(self, x, out, root=0, counts=None, async_op=False, timeout=None):
        """Block i of the root's ``x`` (axis 0, ``counts[i]`` rows; default equal
        blocks) into member i's ``out``. ``x`` is read on the root only (None
        elsewhere); ``out`` is required on every member."""
        out = V.array(out, "out")
        if not out.flags.writeable:
            raise InvalidArgumentError("out: expected a writeable array, got a read-only one")
        r = V.rows(out, "out")
        root = V.rank(root, self.size, "root")
        counts = (r,) * self.size if counts is None else V.counts(counts, self.size)
        if r != counts[self.rank]:
            raise InvalidArgumentError(
                f"counts: counts[{self.rank}] = {counts[self.rank]} rows but out has {r} rows")
        re = V.row_elems(out)
        if self.rank == root:
            x = V.array(x)
            want = (sum(counts),) + out.shape[1:]
            if tuple(x.shape) != want or x.dtype != out.dtype:
                raise arg_error("x", f"shape {want} and dtype {out.dtype} on the root",
                                f"shape {tuple(x.shape)} and dtype {x.dtype}")
        else:
            x = np.empty((0,) + out.shape[1:], out.dtype)
        return self._run("scatter", None, tuple(c * re for c in counts), x, out, out.shape,
                         extra=root, async_op=async_op, timeout=timeout,
                         fp_count=sum(counts) * re, dig=A.digest(counts, out.shape[1:]))

    @_collective("scan")
    def scan(self, x, op="sum", out=None, async_op=False, timeout=None):
        """Inclusive prefix reduction: member i gets ``op`` over members 0..i."""
        return self._scan("scan", x, op, out, async_op, timeout)

    @_collective("exscan")
    def exscan(self, x, op="sum", out=None, async_op=False, timeout=None):
        """Exclusive prefix reduction: member i gets ``op`` over members 0..i-1;
        member 0's result is left as it was (``out``, or uninitialised)."""
        return self._scan("exscan", x, op, out, async_op, timeout)

    def _scan(self, which, x, op, out, async_op, timeout):
        x = V.array(x)
        op = V.reduce_op(op)
        if op == "avg":
            raise arg_error("op", "one of sum, prod, max, min", op)
        out = V.out_array(out, x.shape, x.dtype)
        return self._run(which, None, int(x.size), x, out, x.shape, op, async_op=async_op,
                         timeout=timeout, dig=A.digest(x.shape))

    def refuse(self, op: str, err: BaseException):
        """Raise ``err`` here after telling the other members that this rank refused
        its call of ``op``, so they fail in their agreement too, before any data
        moves (for front-ends that check arguments this module cannot see)."""
        self._ensure_usable()
        self._tell_group_rejected(op, None, err)
        err.agreed = True  # (told: a wrapper around the caller does not tell again)
        raise err

    # --- point to point ---------------------------------------------------------------
    def _p2p_deadline(self, timeout):
        seconds = _timeout_seconds(timeout)
        return seconds, (None if seconds is None else time.monotonic() + seconds)

    def _p2p_xid(self, sender: int, n: int) -> int:
        """The transfer number of message ``n`` from member ``sender`` to one
        receiver; its pieces' keys are (communicator, call 0, transfer, piece), and
        collectives' calls start at 1."""
        return sender + self.size * n

    def _receive_args(self, out, src):
        """recv's and sendrecv's ``out`` and ``src``, checked; (out, src, flat,
        staging): ``out`` as bytes when contiguous (else None) and where the
        bytes land (``out`` itself, or a buffer copied into it at the end)."""
        out = V.array(out, "out")
        src = V.rank(src, self.size, "src")
        if not out.flags.writeable:
            raise InvalidArgumentError("out: expected a writeable array, got a read-only array")
        flat = out.reshape(-1).view(np.uint8) if out.flags.c_contiguous else None
        return out, src, flat, (flat if flat is not None else np.empty(out.nbytes, np.uint8))

    def _recv_timeout(self, n: int, src: int, seconds) -> CollectiveTimeoutError:
        path = self.topology.route(self._ranks[src], self.world_rank)
        prev = path[-2] if len(path) > 1 else src
        link = self.topology.link_between_ranks(prev, self.world_rank).kind
        return CollectiveTimeoutError(
            f"recv (message {n} from rank {src}) timed out after {seconds:g} s waiting "
            f"for rank {prev} over {link}")

    @staticmethod
    def _received(src: int, sent, out, flat, staging) -> None:
        """Finish a receive: raise naming ``out`` when the message had another size,
        else fill a non-contiguous ``out`` from ``staging``."""
        if sent != out.nbytes:
            raise InvalidArgumentError(
                f"out: rank {src} sent {sent} bytes but out holds {out.nbytes} "
                f"({out.shape} {out.dtype})")
        if flat is None:
            out[...] = staging.view(out.dtype).reshape(out.shape)

    def send(self, x, dst, timeout=None) -> None:
        """Send ``x`` to ``dst``; returns once its bytes have left ``x``: copied into
        the next rank's landing slots or into a private copy its receiver reads,
        read by a receiver that already waits for it (more than a slot, one copy),
        or handed to MPI."""
        if type(dst) is int:
            k = self._p2p_kept.get((id(x), 0, dst, -1))
            if k is not None and self._p2p_again(k, x, dst, None, -1, timeout):
                return
        self._ensure_usable()
        x = V.array(x)
        dst = V.rank(dst, self.size, "dst")
        seconds, deadline = self._p2p_deadline(timeout)
        eng = self._engine
        if eng.native and self._p2p_compiled(x, dst, None, None, None, None, seconds,
                                             deadline, timeout):
            return
        n = self._p2p_sent.get(dst, 0)
        self._p2p_sent[dst] = n + 1
        payload = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
        to = self._ranks[dst]
        per = eng.piece_for(self.world_rank, to)
        waiting: list = []

        def posted():
            if not waiting:
                for p, (o, ln) in enumerate(pieces(payload.size, per)):
                    w = eng.send((self._id, 0, self._p2p_xid(self.rank, n), p), to, payload[o:o + ln],
                                 payload.size)
                    if w is not None:
                        waiting.append(w)
                waiting.append(None)
            return all(w is None or w.sent for w in waiting)

        def expired():
            return self._send_timeout(n, dst, seconds)
        try:
            with eng.held():  # every piece posted at once (room at the first hop):
                sent = posted()  # done, without a pass of the drive loop
            if not sent:
                eng.drive(posted, deadline, expired)
        except CollectiveTimeoutError as e:
            with eng.held():
                for w in waiting:
                    if w is not None:
                        w.detach()
            self._fail(e)
            raise

    def _send_timeout(self, n: int, dst: int, seconds) -> CollectiveTimeoutError:
        to = self._ranks[dst]
        first = self.topology.route(self.world_rank, to)[1:2]
        hop = first[0] if first else dst
        link = self.topology.link_between_ranks(self.world_rank, hop).kind
        return CollectiveTimeoutError(
            f"send (message {n} to rank {dst}) timed out after {seconds:g} s waiting for "
            f"rank {hop} to take it over {link}")

    def recv(self, out, src, timeout=None):
        """Receive the next message from ``src`` into ``out`` (exactly its size)."""
        if type(src) is int:
            k = self._p2p_kept.get((0, id(out), -1, src))
            if k is not None and self._p2p_again(k, None, None, out, src, timeout):
                return out
        self._ensure_usable()
        out, src, flat, staging = self._receive_args(out, src)
        seconds, deadline = self._p2p_deadline(timeout)
        if self._p2p_compiled(None, None, out, src, flat, staging, seconds, deadline,
                              timeout):
            return out
        n = self._p2p_recv.get(src, 0)
        eng = self._engine
        per = eng.piece_for(self._ranks[src], self.world_rank)
        tag = (self._id, 0, self._p2p_xid(src, n))
        state = {"total": None, "next": 0, "todo": None}

        def arrived():
            # each piece is copied out as soon as it is here: a landing slot is never
            # held while later pieces of the same message wait for room
            while state["todo"] is None or state["todo"]:
                if state["todo"] is None:
                    a = eng.take(tag + (0,))
                    if a is None:
                        return False
                    state["total"] = a.total
                    state["todo"] = list(range(len(pieces(a.total, per))))
                    got = {0: a}
                else:
                    got = {}
                for p in state["todo"]:
                    if p not in got:
                        a = eng.take(tag + (p,))
                        if a is None:
                            continue
                        got[p] = a
                for p, a in got.items():
                    if state["total"] == out.nbytes:
                        o = p * per
                        staging[o:o + a.data.nbytes] = a.data
                    a.release()
                    state["todo"].remove(p)
                if state["todo"]:
                    return False
            return True

        try:
            eng.drive(arrived, deadline, lambda: self._recv_timeout(n, src, seconds))
        except CollectiveTimeoutError as e:
            self._fail(e)
            raise
        self._p2p_recv[src] = n + 1
        self._received(src, state["total"], out, flat, staging)
        return out

    def arrived(self, src, count=1) -> bool:
        """Whether the next ``count`` messages from ``src`` have begun to arrive
        here (the first piece of each), without waiting or taking them: a recv of
        them then waits only for bytes already on their way (a front-end's
        non-blocking probe: MPI_Iprobe, a receive request's Test)."""
        self._ensure_usable()
        src = V.rank(src, self.size, "src")
        count = V.integer(count, "count", lo=1)
        eng = self._engine
        eng.try_progress()  # (arrivals over MPI are filed by a pass of progress)
        with eng.held():
            return self._begun(src, count)

    def _begun(self, src, count) -> bool:
        """Whether the first piece of each of the next ``count`` messages from
        ``src`` is here (the engine's lock held)."""
        n = self._p2p_recv.get(src, 0)
        return all(self._engine.has((self._id, 0, self._p2p_xid(src, n + k), 0))
                   for k in range(count))

    def any_arrived(self, count=1, wait=False, timeout=None, first=0):
        """A member whose next ``count`` messages have begun to arrive here (the
        first piece of each), without taking them, or None (``arrived`` over every
        member at once: a front-end's MPI_Iprobe from MPI_ANY_SOURCE). Members are
        looked at from ``first`` on, in turn (a caller moving ``first`` on serves
        every sender in turn). ``wait``: wait for one (a receive from any source),
        asleep on the doorbell until an arrival rings it; CollectiveTimeoutError
        past ``timeout`` seconds (None: NEURON_MPI_TIMEOUT; 0 or less: none), the
        communicator still usable."""
        self._ensure_usable()
        count = V.integer(count, "count", lo=1)
        first = V.rank(first, self.size, "first")
        eng = self._engine
        order = list(range(first, self.size)) + list(range(first))
        found: list = []

        def here():
            for src in order:
                if self._begun(src, count):
                    found.append(src)
                    return True
            return False

        if not wait:
            eng.try_progress()  # (arrivals over MPI are filed by a pass of progress)
            with eng.held():
                return found[0] if here() else None
        if self._soon(here):
            return found[0]
        seconds, deadline = self._p2p_deadline(timeout)
        eng.drive(here, deadline, lambda: CollectiveTimeoutError(
            f"any_arrived: no message came from any of the {self.size} ranks in "
            f"{seconds:g} s"))
        return found[0]

    def _soon(self, here) -> bool:
        """Whether ``here()`` (called with the engine's lock held) is true after a
        pass of progress, or becomes so while this thread yields the CPU up to
        NEURON_MPI_SHM_SPIN times, as a compiled run waits before it sleeps: a
        message that comes meanwhile (a ping-pong's reply) costs no wake-up. (Over
        MPI, nothing arrives without progress: the drive loop's to make.)"""
        eng = self._engine
        eng.try_progress()  # (arrivals over MPI are filed by a pass of progress)
        with eng.held():
            if here():
                return True
        if eng.mpi is None and eng.shm is not None:
            for _ in range(eng.shm.spin):
                os.sched_yield()
                with eng.held():
                    if here():
                        return True
        return False

    def incoming(self, src, timeout=None) -> int:
        """The size in bytes of the next message from ``src``, without taking it,
        once its first piece is here (waiting for it until ``timeout`` seconds,
        None: NEURON_MPI_TIMEOUT, as ``recv``): for a front-end whose receive learns
        the size from the message (a ``recv`` of exactly that size takes it)."""
        self._ensure_usable()
        src = V.rank(src, self.size, "src")
        eng = self._engine
        n = self._p2p_recv.get(src, 0)
        key = (self._id, 0, self._p2p_xid(src, n), 0)
        got: list = []

        def here():
            total = eng.total_of(key)
            if total is None:
                return False
            got.append(total)
            return True

        if self._soon(here):
            return got[0]
        seconds, deadline = self._p2p_deadline(timeout)
        try:
            eng.drive(here, deadline, lambda: self._recv_timeout(n, src, seconds))
        except CollectiveTimeoutError as e:
            self._fail(e)
            raise
        return got[0]

    def sendrecv(self, x, dst, out, src, timeout=None):
        """Send ``x`` to ``dst`` and receive the next message from ``src`` into ``out``
        (exactly its size) together, as MPI_Sendrecv; returns ``out``. Matches plain
        send/recv on the other side. Within a shared-memory domain it runs as one
        compiled round: a large piece is read by ``dst`` straight from ``x``, so ``x``
        must not change until the call returns, and messages from ``src`` are read
        straight into ``out`` (one copy each way)."""
        if type(dst) is int and type(src) is int:
            k = self._p2p_kept.get((id(x), id(out), dst, src))
            if k is not None and self._p2p_again(k, x, dst, out, src, timeout):
                return out
        self._ensure_usable()
        x = V.array(x)
        dst = V.rank(dst, self.size, "dst")
        out, src, flat, staging = self._receive_args(out, src)
        seconds, deadline = self._p2p_deadline(timeout)
        if not self._p2p_compiled(x, dst, out, src, flat, staging, seconds, deadline,
                                  timeout):
            try:  # a peer across domains, or no shared memory: send, then receive
                self.send(x, dst, seconds or 0)
                self.recv(out, src, 0 if deadline is None else
                          max(deadline - time.monotonic(), 1e-3))
            except CollectiveTimeoutError as e:
                raise CollectiveTimeoutError(
                    f"sendrecv (to rank {dst}, from rank {src}) timed out after {seconds:g} s: "
                    f"{e}") from e
        return out

    def _p2p_again(self, k, x, dst, out, src, timeout):
        """Run kept point-to-point call ``k`` again when this call repeats it: the
        same arrays (by identity, with the shape, strides, dtype and writability
        they had: still C-contiguous, apart and writeable), the same timeout
        argument and per-call environment, a usable communicator; True. Else None,
        having done nothing: the call is checked and looked up as a new one."""
        if out is not None and (k.out() is not out or (
                out.shape, out.strides, out.dtype, out.flags.writeable) != k.ometa) or \
                x is not None and (
                k.x() is not x or (x.shape, x.strides, x.dtype,
                                   x.flags.writeable) != k.xmeta) or \
                self._failed is not None or k.timeout != (type(timeout), timeout) or \
                env.per_call_key() != k.env:
            return None
        seconds = k.seconds
        deadline = None if seconds is None else time.monotonic() + seconds
        flat = _EMPTY_BYTES if out is None else \
            out.view(_U8) if out.ndim == 1 else out.reshape(-1).view(_U8)
        if x is None:
            payload, ns = _EMPTY_BYTES, 0
        else:
            payload = x.view(_U8) if x.ndim == 1 else x.reshape(-1).view(_U8)
            sent = self._p2p_sent
            ns = sent[dst]
            sent[dst] = ns + 1
        nr = 0 if out is None else self._p2p_recv[src]
        sxid, rxid = self.rank + self.size * ns, src + self.size * nr  # (_p2p_xid's)
        retag_native(k.plan.native, sxid, rxid)  # (the steps' numbers: only if needed below)
        k.state.fill(0)
        k.xs[5] = 1  # (sleep on any ring, as _p2p_compiled)
        args = k.head + (payload, flat) + k.tail
        post = k.plan.post
        if post >= 0:  # (as _p2p_compiled)
            self._engine.shm.post_receive(post, self._id, rxid)
        try:
            status = self._engine.run_alone(args, deadline)
            if status == native.DONE:
                if out is not None:
                    self._p2p_recv[src] = nr + 1
                return True
            retag_sendrecv(k.plan, sxid, rxid)  # (the Python path reads the steps' numbers)
            self._p2p_finish(x, dst, out, src, flat, flat, seconds, deadline, k.plan, payload,
                             args, status, ns, nr)
            return True
        finally:
            if post >= 0:
                self._engine.shm.unpost_receive(post)

    def _p2p_keep(self, x, dst, out, src, timeout, seconds, plan, sc, head) -> None:
        """Keep a compiled point-to-point call to repeat (``_p2p_again``) once its
        key comes a second time: plain C-contiguous arrays, apart (checked by the
        caller), peers given as plain ints."""
        if out is not None and (type(out) is not np.ndarray or type(src) is not int) or \
                x is not None and (type(x) is not np.ndarray or type(dst) is not int or
                                   not x.flags.c_contiguous):
            return
        key = (0, id(out), -1, src) if x is None else (id(x), 0, dst, -1) if out is None \
            else (id(x), id(out), dst, src)
        seen = self._p2p_seen
        if key not in seen:
            if len(seen) >= SEEN:
                seen.clear()
            seen.add(key)
            return
        kept = self._p2p_kept
        if len(kept) >= KEPT:
            kept.clear()
        kept[key] = _P2P(self._id, x, out, timeout, seconds, plan, sc, head)

    def _p2p_compiled(self, x, dst, out, src, flat, staging, seconds, deadline,
                      timeout=None) -> bool:
        """recv (``x`` None), send (``out`` None) or sendrecv as one compiled round:
        False, having done nothing, where that cannot run (a peer outside this
        shared-memory domain; a send of more than a slot's bytes whose receiver
        is not waiting for it: Python's, from a private copy). A send of at most a
        slot copies its pieces into their slots; a larger one whose receiver waits
        in a large receive for it (ShmTransport.receiving) leaves them in ``x`` and
        returns once they are read (one copy instead of two)."""
        eng = self._engine
        if not eng.native:
            return False
        nsend = -1 if x is None else x.nbytes
        nrecv = -1 if out is None else out.nbytes
        ns = self._p2p_sent.get(dst, 0)
        nr = 0 if out is None else self._p2p_recv.get(src, 0)
        sxid = self._p2p_xid(self.rank, ns)
        rxid = 0 if out is None else self._p2p_xid(src, nr)
        read = False
        if out is None and nsend > eng.shm.S:
            shm, to = eng.shm, self._ranks[dst]
            if not (shm.reads() and shm.reaches(to)) or to == eng.rank:
                return False  # (to itself: no receive can be under way)
            if not shm.receiving(to, self._id, sxid):
                # give a receiver about to receive (the reply of a ping-pong) as long
                # to show it as the private copy it spares would take
                end = time.monotonic() + min(nsend / POST_WAIT_RATE, POST_WAIT_MAX)
                if not shm.await_receive(to, self._id, sxid, eng.bell,
                                         end if deadline is None else min(end, deadline)):
                    return False
            read = True
        key = ("p2p", dst, nsend, src, nrecv) if not read else ("p2p-read", dst, nsend)
        kept = self._plans.get(key)
        if kept is None:
            plan = sendrecv_plan(eng, None if x is None else self._ranks[dst], sxid, nsend,
                                 None if out is None else self._ranks[src], rxid, nrecv,
                                 may_read=read)
            sc = head = None
            if plan.native is not None:
                sc = Scratch(plan.native.max_flags, 0, np.uint8)
                head = native_head(eng.shm, plan.native, sc.xs, sc.flags)
            if len(self._plans) > 64:
                self._plans.clear()
            self._plans[key] = plan, sc, head
        else:
            plan, sc, head = kept
            retag_sendrecv(plan, sxid, rxid)
        if plan.native is None:
            return False
        payload = _EMPTY_BYTES if x is None else (
            x.reshape(-1).view(np.uint8) if type(x) is np.ndarray and x.flags.c_contiguous
            else np.ascontiguousarray(x).reshape(-1).view(np.uint8))
        apart = True
        if payload.size and out is not None and np.may_share_memory(payload, staging) or \
                not payload.flags.writeable:
            # the same memory both ways: send what it held (read-only: the compiled
            # run takes writeable arrays only, as Execution._bytes)
            payload = payload.copy()
            apart = False
        if x is not None:
            self._p2p_sent[dst] = ns + 1
        # alone in flight: one compiled run on this thread, no Execution (as
        # _run_alone); sleeping on any ring (xs[5]), as the peer may send another size
        xs, flags, pend = sc.zeroed()
        xs[5] = 1
        args = native_args(eng.shm, plan.native, xs, flags, payload,
                           _EMPTY_BYTES if out is None else staging, sc.tmp8, self._id,
                           0, 0, NO_BOARD, pend, head)
        post = plan.post
        if post >= 0:  # (a large receive: its sender may leave the message in place)
            eng.shm.post_receive(post, self._id, rxid)
        try:
            status = eng.run_alone(args, deadline)
            if status == native.DONE:
                if out is not None:
                    self._p2p_recv[src] = nr + 1
                    self._received(src, out.nbytes, out, flat, staging)
                if apart and (out is None or flat is not None) and not read:
                    self._p2p_keep(x, dst, out, src, timeout, seconds, plan, sc, head)
                return True
            return self._p2p_finish(x, dst, out, src, flat, staging, seconds, deadline,
                                    plan, payload, args, status, ns, nr)
        finally:
            if post >= 0:
                eng.shm.unpost_receive(post)

    def _p2p_finish(self, x, dst, out, src, flat, staging, seconds, deadline, plan, payload,
                    args, status, ns, nr) -> bool:
        """_p2p_compiled's path when its lone run did not end done (or could not run):
        an Execution driven to the end. Apart so that a call done alone builds none of
        its closure's cells."""
        eng = self._engine
        op = "recv" if x is None else "send" if out is None else "sendrecv"
        ex = SendRecvExecution(eng, plan, make_buffers(
            payload, _EMPTY_BYTES if out is None else staging, 0, np.uint8), self._id, op)
        if status is not None:
            ex.adopt(args, status)  # go on from where the compiled run stopped

        def expired():
            _, missing = ex.waiting_for()
            if x is None:
                return self._recv_timeout(nr, src, seconds)
            if out is None:
                return self._send_timeout(ns, dst, seconds)
            if missing:
                what = f"message {nr} from rank {src}"
            elif ex.unread():
                what = f"rank {dst} to read message {ns} from this rank's buffer"
            else:
                what = f"room at rank {dst} for message {ns}"
            return CollectiveTimeoutError(
                f"sendrecv (to rank {dst}, from rank {src}) timed out after {seconds:g} s "
                f"waiting for {what}")
        try:
            eng.drive(lambda: ex.done, deadline, expired, start=ex)
        except Exception as e:  # a timeout, a failed read: nobody may run it further
            eng.cancel(ex, e)
            self._fail(e)
            raise
        if ex.error is not None:
            self._fail(ex.error)
            raise ex.error
        if out is None:
            return True
        self._p2p_recv[src] = nr + 1
        self._received(src, out.nbytes if ex.mismatch is None else ex.mismatch, out, flat,
                       staging)
        return True

    # --- groups -----------------------------------------------------------------------
    def split(self, replica_groups, timeout=None):
        """This rank's communicator among ``replica_groups`` (lists of this
        communicator's ranks); None if the rank is in no group. Collective: every
        rank must call it with the same groups."""
        self._ensure_usable()
        try:
            gs = V.replica_groups(replica_groups, self.size)
            world_groups = [[self._ranks[r] for r in g] for g in gs]
            for wg in world_groups:
                G.check_group(self.topology, wg, self.strict)
        except (InvalidArgumentError, TopologyError) as e:
            self._tell_group_rejected("split", timeout, e)
            raise
        mine = next((i for i, g in enumerate(gs) if self.rank in g), None)
        if _checking() and self.size > 1:
            self._seq += 1
            flat = [len(gs)] + [v for g in gs for v in [len(g)] + g]
            try:
                self._exchange(A.fingerprint("split", self._seq, dig=A.digest(flat)),
                               "split", timeout)
            except InvalidArgumentError:
                raise  # (a member refused its groups: the communicator goes on)
            except NeuronMPIError as e:
                self._fail(e)  # timed out or disagreed: as a collective call would
                raise
        self._nsplit += 1
        if mine is None:
            return None
        return Communicator(self._engine, self.topology, world_groups[mine],
                            _child_id(self._id, self._nsplit, mine), self.strict,
                            self._recorder)

    def group(self, ranks, timeout=None):
        """The communicator of ``ranks`` (this communicator's ranks, in group
        order), called by those members only: no call on the other ranks, unlike
        ``split``. The members agree among themselves on the group before it is
        returned. The instance's group rules are checked as ``init`` does (strict)."""
        self._ensure_usable()
        gs = V.replica_groups([ranks], self.size, "ranks")[0]
        if self.rank not in gs:
            raise InvalidArgumentError(
                f"ranks: rank {self.rank} called group() but is not in {gs}; only the "
                "members call it")
        wg = [self._ranks[r] for r in gs]
        G.check_group(self.topology, wg, self.strict)  # the same verdict on every member
        key = tuple(gs)
        n = self._ngroup.get(key, 0) + 1
        self._ngroup[key] = n
        h = hashlib.blake2b(f"{self._id}/group/{n}/{key}".encode(), digest_size=8).digest()
        child = Communicator(self._engine, self.topology, wg,
                             int.from_bytes(h, "little") & ((1 << 62) - 1), self.strict,
                             self._recorder)
        if _checking() and child.size > 1:
            child._seq += 1
            child._exchange(A.fingerprint("split", child._seq, dig=A.digest(gs)), "split",
                            timeout)
        return child

    def wait_mpi(self, requests) -> None:
        """Wait for the user's own mpi4py requests while neuron_mpi work (pieces to
        forward, async calls) goes on. With the engine's agent running (always on
        shared memory; across hosts it needs MPI_THREAD_MULTIPLE) that is a plain
        MPI wait, which every rank leaves as promptly as MPI's own; otherwise this
        thread polls the requests and sleeps between polls."""
        reqs = list(requests)
        eng = self._engine
        if eng.agent.is_alive() and (eng.mpi is None or eng.threaded):
            MPI.Request.Waitall(reqs)
            return
        pause = 1e-4
        while not MPI.Request.Testall(reqs):
            time.sleep(pause)
            pause = min(pause * 2, 0.005)

    def link_stats(self) -> list[dict]:
        """What this rank sent since init: one entry per (next hop, link kind),
        including the links a shared-memory copy crossed on this rank's behalf."""
        return self._engine.link_stats()


_ENGINES: list = []


def _skip_drain_on_uncaught_exception(engine) -> None:
    """An uncaught exception or a non-zero exit ends the job (``python -m mpi4py``
    aborts after the atexit handlers): do not first wait at the exit drain for ranks
    that will never come."""
    import sys

    _ENGINES.append(engine)
    if _ENGINES[1:]:
        return  # hooks already installed

    def close_all():
        for e in _ENGINES:
            e.closed = True

    previous = sys.excepthook

    def hook(*exc_info):
        close_all()
        previous(*exc_info)

    sys.excepthook = hook
    # `python -m mpi4py` records a non-zero exit (sys.exit(1), an exception) through
    # MPI._set_abort_status and aborts after the atexit handlers
    set_status = getattr(MPI, "_set_abort_status", None)
    if set_status is not None:
        def set_abort_status(status):
            if status:
                close_all()
            return set_status(status)

        try:
            MPI._set_abort_status = set_abort_status
        except (AttributeError, TypeError):
            pass


def init(instance=None, lnc=None, nodes=None, comm=None, strict=True) -> Communicator:
    """Lay the ranks of ``comm`` (default MPI.COMM_WORLD) on the topology and return
    the world communicator. Collective over ``comm``."""
    world = comm if comm is not None else MPI.COMM_WORLD
    topo = make_topology(instance, lnc, nodes, ranks=world.Get_size())
    G.check_group(topo, range(topo.size), strict, "world")
    engine = make_engine(world, topo)
    atexit.register(engine.close)
    _tracing.attach(engine.rank, topo)
    _tracing.start_from_env()
    _skip_drain_on_uncaught_exception(engine)
    return Communicator(engine, topo, range(topo.size), 1, strict,
                        FlightRecorder(engine.rank))
