"""Requests of the mpi4py facade: in flight, done at the call, received at
Wait, persistent; the Wait*/Test* of a list over them."""
from __future__ import annotations

from mpi4py import MPI as _MPI

from ..errors import InvalidArgumentError


#: (source, tag, bytes) of a receive from MPI.PROC_NULL, for its status
NULL_RECV = (_MPI.PROC_NULL, _MPI.ANY_TAG, 0)


def recv_tag(tag) -> int:
    """A receive's tag: tagged.ANY for MPI.ANY_TAG, else a send's tag, checked."""
    from ..tagged import ANY

    return ANY if tag == _MPI.ANY_TAG else mpi_tag(tag)


def mpi_tag(tag) -> int:
    """A send's tag, checked as mpi4py over Open MPI checks it: OverflowError
    outside a C int (mpi4py's conversion), MPIError (MPI.Exception ERR_TAG, and the
    ValueError naming ``tag``) outside [0, MPI.TAG_UB]; other objects as
    tagged.send_tag refuses them."""
    from ..tagged import TAG_UB, send_tag

    if hasattr(tag, "__index__") and not isinstance(tag, bool):
        v = tag.__index__()
        if not -2 ** 31 <= v < 2 ** 31:
            raise OverflowError(f"tag: {v} does not fit a C int")
        if not 0 <= v <= TAG_UB:
            raise MPIError(f"tag: expected an integer in [0, {TAG_UB}], got {v}", _MPI.ERR_TAG)
    return send_tag(tag)


def recv_source(source, size: int) -> int:
    """A receive's or probe's source, checked: MPI.ANY_SOURCE, MPI.PROC_NULL or a
    rank of a communicator of ``size`` (else InvalidArgumentError naming
    ``source``, MPI_ERR_RANK), before anything waits for it."""
    if isinstance(source, (str, bytes)):
        raise TypeError(f"source: expected an integer, got {type(source).__name__}")
    try:
        rank = int(source)  # (a bool, a float, a NumPy number: as mpi4py takes them)
    except (TypeError, ValueError):
        raise TypeError(f"source: expected an integer, got {type(source).__name__}") from None
    if rank in (_MPI.ANY_SOURCE, _MPI.PROC_NULL):
        return rank
    if not 0 <= rank < size:
        raise InvalidArgumentError(
            f"source: expected a rank in [0, {size}), MPI.ANY_SOURCE or MPI.PROC_NULL, "
            f"got {source!r} (MPI_ERR_RANK)")
    return rank


def set_status(status, source, tag, nbytes: int) -> None:
    """Fill an mpi4py MPI.Status (if one was given) for a message received."""
    if status is not None:
        status.Set_source(source)
        status.Set_tag(tag)
        status.Set_elements(_MPI.BYTE, nbytes)
        status.Set_cancelled(False)


def empty_status(status) -> None:
    """MPI's empty status (a request null or inactive, a send): any source, any
    tag, no error, no elements."""
    if status is not None:
        status.Set_source(_MPI.ANY_SOURCE)
        status.Set_tag(_MPI.ANY_TAG)
        status.Set_error(_MPI.SUCCESS)
        status.Set_elements(_MPI.BYTE, 0)
        status.Set_cancelled(False)


def _is_active(r) -> bool:
    """An active request of ours (MPI.REQUEST_NULL, which lists may hold, is not)."""
    return getattr(r, "_active", False)


def _statuses(statuses, n: int) -> list:
    """The statuses of a list of ``n`` requests, as mpi4py takes them: None for
    none, a list grown to ``n`` new Status objects, a tuple as far as it goes."""
    if statuses is None:
        return [None] * n
    if isinstance(statuses, list):
        while len(statuses) < n:
            statuses.append(_MPI.Status())
        return statuses
    got = list(statuses)[:n]
    return got + [None] * (n - len(got))


def _first_done(requests, active) -> int:
    """The index of the first of the ``active`` requests to be done: they are
    polled (never made to wait for one of them while another could finish first),
    sleeping 20 us doubling to 1 ms between rounds; past NEURON_MPI_TIMEOUT the
    first is waited for, which raises its own timeout."""
    import time

    from ..tagged import deadline

    end = deadline()
    pause = 20e-6
    while True:
        for k in active:
            if requests[k]._ready():
                return k
        if end is not None and time.monotonic() >= end:
            return active[0]
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)


class Request:
    """A request of an I-call. The non-blocking collectives (Iallreduce, Ireduce,
    Ireduce_scatter_block, Ireduce_scatter, Iscan, Iexscan, Ibcast, Iallgather,
    Iallgatherv, Ialltoall, Ialltoallv, Ialltoallw, Igather, Igatherv, Iscatter,
    Iscatterv, the Ineighbor_* forms; reductions on the datatypes and with the
    ops the kernels carry) are in flight: the rank's agent moves them while the
    program computes, ``Test`` says whether they are done without blocking, ``Wait``
    finishes them (raising their error; the -v forms place the result in
    ``recvbuf`` then). The other I-calls complete at the call (the Request is
    done); a receive is made at Wait, or at a Test that finds its message here
    (Test never waits for one); a send has left at the call (a synchronous one,
    Issend, is done once a receive has matched it). The buffers
    of a request in flight are the call's until it completes, as in MPI. A
    request is active from its call until a Wait or a Test completes it; then it
    is MPI.REQUEST_NULL (false), as is ``MPI.Request()``, and the Wait*/Test* of
    a list pass over it. The lower-case methods return what mpi4py's do: the
    object a lower-case receive (Comm.irecv) took, None in the place of any other
    request's."""

    def __init__(self):
        self._run = None  # what completes it (a receive made, a result placed)
        self._handle = None  # a neuron_mpi Handle in flight (its wait() is ``_run``)
        self._info = None  # a receive's (source, tag, bytes), for its Status
        self._poll = None  # a receive not yet made: whether its message is here
        self._cancel = None  # a posted receive: cancel it if nothing matched it yet
        self._cancelled = False
        self._detached = None  # Free calls it and drops ``_run`` (a send, a receive)
        self._load = None  # a lower-case receive: its object, from the bytes it took
        self._active = False
        self._null = True  # equal to MPI.REQUEST_NULL, false
        self._collective = False  # a persistent collective's (persistent.py)

    @classmethod
    def _new(cls, run=None, handle=None):
        """An active request (an I-call's)."""
        r = cls()
        r._run, r._handle = run, handle
        r._active, r._null = True, False
        return r

    def __bool__(self) -> bool:
        return not self._null

    def __eq__(self, other):
        if isinstance(other, Request):
            return other is self or self._null and other._null
        if isinstance(other, _MPI.Request):  # (MPI.REQUEST_NULL, as mpi4py compares)
            return self._null and other == _MPI.REQUEST_NULL
        return NotImplemented

    __hash__ = object.__hash__

    def __reduce__(self):
        if not self._null:  # (as mpi4py's: only a null request is pickled)
            raise ValueError(f"cannot pickle an active request ({type(self).__name__})")
        return Request, ()

    def _ready(self) -> bool:
        """Done, or done by Wait at once (a receive whose message is here): Test
        may complete it."""
        if self._run is not None and self._poll is not None:
            return self._poll()
        h = self._handle
        return h is None or h.test()

    def _finish(self) -> None:
        """Run what completes the operation (once), the request still active."""
        if self._run is not None:
            run, self._run, self._handle = self._run, None, None
            run()

    def _status(self, status) -> None:
        if self._cancelled:
            empty_status(status)
            if status is not None:
                status.Set_cancelled(True)
        elif self._info is not None:
            set_status(status, *self._info)
        else:
            empty_status(status)

    def _complete(self, status):
        """Complete it if active; the object a lower-case receive took (None for
        any other request, or one inactive)."""
        if not self._active:
            empty_status(status)
            return None
        self._active = False
        self._null = not isinstance(self, Prequest)  # (a persistent one stays, inactive)
        self._finish()
        self._status(status)
        load, self._load = self._load, None
        return None if load is None or self._cancelled else load()

    def Wait(self, status=None):
        self._complete(status)
        return True

    def wait(self, status=None):
        return self._complete(status)

    def Test(self, status=None):
        if self._active and not self._ready():
            return False
        self._complete(status)
        return True

    def test(self, status=None):
        if self._active and not self._ready():
            return False, None
        return True, self._complete(status)

    def Get_status(self, status=None) -> bool:
        """Whether the request is done, without completing it
        (MPI_Request_get_status; a receive whose message is here is made)."""
        if not self._active:
            empty_status(status)
            return True
        if not self._ready():
            return False
        self._finish()
        self._status(status)
        return True

    get_status = Get_status

    def Cancel(self):
        """MPI_Cancel: a posted receive that no message has matched yet is
        cancelled (it takes nothing; its Wait or Test completes it at once, with
        ``Status.Is_cancelled()`` True). Anything else is not: a send (its bytes
        have left), a receive whose message is here, a collective; they complete
        as usual."""
        self._refuse_active_collective("Cancel")
        if self._active and self._run is not None and self._cancel is not None \
                and self._cancel():
            self._run = self._poll = None
            self._cancelled = True

    cancel = Cancel

    def _refuse_active_collective(self, what) -> None:
        """MPI.Exception(ERR_REQUEST) for an active persistent collective, as mpi4py's
        over Open MPI: neither cancelled nor freed before it completes."""
        if self._active and self._collective:
            raise MPIError(f"request: {what} of an active persistent collective (Wait "
                           "or Test it first)", _MPI.ERR_REQUEST)

    def Free(self):
        """Drop the request. A receive goes on without it: made into its buffer
        once a message is matched to it (now, or when one comes; the buffer is the
        receive's until then, as in MPI). A synchronous send is dropped at once
        (its bytes have left). A collective in flight completes first."""
        self._refuse_active_collective("Free")
        if self._detached and self._run is not None:
            self._detached()
            self._run = None
        self._finish()
        self._active = False
        self._null = True

    free = Free

    @staticmethod
    def Waitall(requests, statuses=None):
        Request.waitall(requests, statuses)
        return True

    @staticmethod
    def waitall(requests, statuses=None):
        requests = list(requests)
        statuses = _statuses(statuses, len(requests))
        return [r._complete(st) if isinstance(r, Request) else empty_status(st)
                for r, st in zip(requests, statuses)]

    @staticmethod
    def Testall(requests, statuses=None):
        """True, every request completed, once all are done; else False and none
        is completed (as MPI_Testall)."""
        return Request.testall(requests, statuses)[0]

    @staticmethod
    def testall(requests, statuses=None):
        requests = list(requests)
        if not all(r._ready() for r in requests if _is_active(r)):
            return False, None
        return True, Request.waitall(requests, statuses)

    @staticmethod
    def Get_status_all(requests, statuses=None) -> bool:
        """Whether every request is done, completing none."""
        requests = list(requests)
        active = [r for r in requests if _is_active(r)]
        if not all(r._ready() for r in active):
            return False
        for r, st in zip(requests, _statuses(statuses, len(requests))):
            if isinstance(r, Request):
                r.Get_status(st)
            else:
                empty_status(st)
        return True

    get_status_all = Get_status_all

    @staticmethod
    def Waitany(requests, status=None):
        """The index of a request completed now (one already done first), or
        MPI.UNDEFINED when none is active."""
        return Request.waitany(requests, status)[0]

    @staticmethod
    def waitany(requests, status=None):
        requests = list(requests)
        active = [k for k, r in enumerate(requests) if _is_active(r)]
        if not active:
            empty_status(status)
            return _MPI.UNDEFINED, None
        i = _first_done(requests, active)
        return i, requests[i]._complete(status)

    @staticmethod
    def Testany(requests, status=None):
        """(index, True) for a request done and completed now; (MPI.UNDEFINED,
        False) when none of the active ones is done; (MPI.UNDEFINED, True) when
        none is active."""
        return Request.testany(requests, status)[:2]

    @staticmethod
    def testany(requests, status=None):
        requests = list(requests)
        i, flag = Request._any(requests, status)
        obj = requests[i]._complete(status) if i != _MPI.UNDEFINED else None
        return i, flag, obj

    @staticmethod
    def Get_status_any(requests, status=None):
        """Testany completing none."""
        requests = list(requests)
        i, flag = Request._any(requests, status)
        if i != _MPI.UNDEFINED:
            requests[i].Get_status(status)
        return i, flag

    get_status_any = Get_status_any

    @staticmethod
    def _any(requests, status):
        active = [k for k, r in enumerate(requests) if _is_active(r)]
        if not active:
            empty_status(status)
            return _MPI.UNDEFINED, True
        i = next((k for k in active if requests[k]._ready()), None)
        return (_MPI.UNDEFINED, False) if i is None else (i, True)

    @staticmethod
    def Waitsome(requests, statuses=None):
        """The indices of the requests completed now, at least one (those done,
        else the first active one waited for); None when none is active."""
        return Request._some(list(requests), statuses, True)[0]

    @staticmethod
    def waitsome(requests, statuses=None):
        """(indices, the objects their receives took), as Waitsome."""
        return Request._some(list(requests), statuses, True)

    @staticmethod
    def Testsome(requests, statuses=None):
        """The indices of the requests done and completed now (maybe none); None
        when none is active."""
        return Request._some(list(requests), statuses, False)[0]

    @staticmethod
    def testsome(requests, statuses=None):
        return Request._some(list(requests), statuses, False)

    @staticmethod
    def Get_status_some(requests, statuses=None):
        """The indices of the requests done (completing none); None when none is
        active."""
        return Request._some(list(requests), statuses, False, complete=False)[0]

    get_status_some = Get_status_some

    @staticmethod
    def _some(requests, statuses, wait, complete=True):
        """(indices, objects) of the requests done (completed when ``complete``;
        at least one when ``wait``); (None, None) when none is active."""
        active = [k for k, r in enumerate(requests) if _is_active(r)]
        if not active:
            return None, None
        done = [k for k in active if requests[k]._ready()]
        if not done and wait:
            done = [_first_done(requests, active)]
        objs = [requests[k]._complete(st) if complete else requests[k].Get_status(st) and None
                for k, st in zip(done, _statuses(statuses, len(done)))]
        return done, objs

    @staticmethod
    def Startall(requests):
        """Start each persistent request (Prequest) of the list."""
        for r in requests:
            r.Start()

    startall = Startall

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Prequest)


class Prequest(Request):
    """A persistent request (Comm.Send_init, Comm.Recv_init): inactive until
    ``Start``, which makes the send (it leaves at once, with the buffer's bytes
    at that moment) or posts the receive (made at Wait/Test, in posting order);
    a Wait or Test completes it and it may be started again; MPI.REQUEST_NULL
    once freed."""

    def __init__(self, start):
        super().__init__()
        self._start = start
        self._null = False

    def Start(self):
        if self._null:
            raise MPIError("request: this persistent request was freed", _MPI.ERR_REQUEST)
        if self._active:
            raise MPIError(
                "request: this persistent request is active (Start it again after "
                "Wait or Test completes it)", _MPI.ERR_REQUEST)
        self._info = self._poll = self._cancel = None
        self._cancelled, self._detached = False, None
        self._run = self._start(self)
        self._active = True

    start = Start


class MPIError(InvalidArgumentError, _MPI.Exception):
    """An error the facade reports as mpi4py would, ``MPI.Exception`` of an MPI error
    class (``Get_error_class()``, ``int(e)``), that is also the ValueError naming
    the argument (InvalidArgumentError) that neuron_mpi raises for bad input."""

    def __init__(self, message: str, error_class: int):
        InvalidArgumentError.__init__(self, message)
        self.error_class_code = int(error_class)

    def __int__(self) -> int:
        return self.error_class_code

    def __str__(self) -> str:
        return str(self.args[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r}, {self.error_class_code})"

    __hash__ = _MPI.Exception.__hash__


class NotEmulatedError(NotImplementedError, AttributeError):
    """An mpi4py method this module does not emulate: a NotImplementedError that
    names it, and an AttributeError, so ``hasattr`` says False."""


def not_emulated(obj, name, real):
    """A missing attribute: NotEmulatedError when mpi4py's class ``real`` has it,
    else the usual AttributeError."""
    kind = type(obj).__name__
    if not name.startswith("_") and hasattr(real, name):
        raise NotEmulatedError(f"{kind}.{name}: not emulated by neuron_mpi.mpi "
                               "(docs/api.md, 'Front-ends', lists what is)")
    raise AttributeError(f"{kind!r} object has no attribute {name!r}")


def posted_request(start) -> Request:
    """The active Request of a receive posted by ``start`` (Comm._posted)."""
    req = Request._new()
    req._run = start(req)
    return req


def done() -> Request:
    """The request of an I-call done at the call (active until completed)."""
    return Request._new()


def started(h, then=None) -> Request:
    """The Request of an I-call: in flight when the call returned a Handle.
    ``then``: what Wait does with the call's result (place it in recvbuf)."""
    from ..comm import Handle

    if not isinstance(h, Handle):  # (done at the call: its result placed now)
        if then is not None:
            then(h)
        return done()
    return Request._new(h.wait if then is None else lambda: then(h.wait()), h)
