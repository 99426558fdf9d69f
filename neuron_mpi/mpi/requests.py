"""Requests of the mpi4py facade: in flight, done at the call, received at
Wait, persistent; the Wait*/Test* of a list over them."""
from __future__ import annotations

from mpi4py import MPI as _MPI

from ..errors import InvalidArgumentError


def set_status(status, source, tag, nbytes: int) -> None:
    """Fill an mpi4py MPI.Status (if one was given) for a message received."""
    if status is not None:
        status.Set_source(source)
        status.Set_tag(tag)
        status.Set_elements(_MPI.BYTE, nbytes)


def _is_active(r) -> bool:
    """An active request of ours (MPI.REQUEST_NULL, which lists may hold, is not)."""
    return getattr(r, "_active", False)


class Request:
    """A request of an I-call. The non-blocking collectives (Iallreduce, Ireduce,
    Ireduce_scatter_block, Iscan, Iexscan, Ibcast, Iallgather, Iallgatherv,
    Ialltoall, Ialltoallv, Igather, Iscatter; reductions on the datatypes the
    kernels carry) are in flight: the rank's agent moves them while the program
    computes, ``Test`` says whether they are done without blocking, ``Wait``
    finishes them (raising their error; the -v forms place the result in
    ``recvbuf`` then). The other I-calls complete at the call (the Request is
    done); a receive is made at Wait, or at a Test that finds its message here
    (Test never waits for one); a send has left at the call. The buffers
    of a request in flight are the call's until it completes, as in MPI. A
    request is active from its call until a Wait or a Test completes it (then the
    Wait*/Test* of a list pass over it, as MPI's inactive requests)."""

    def __init__(self, run=None, handle=None, info=None):
        self._run = run
        self._handle = handle  # a neuron_mpi Handle in flight (its wait() is ``run``)
        self._info = info  # a receive's (source, tag, bytes), for its Status
        self._poll = None  # a receive not yet made: whether its message is here
        self._active = True
        self._null = False  # completed (or freed): equal to MPI.REQUEST_NULL, false

    def __bool__(self) -> bool:
        return not self._null

    def __eq__(self, other):
        if isinstance(other, Request):
            return other is self
        if isinstance(other, _MPI.Request):  # (MPI.REQUEST_NULL, as mpi4py compares)
            return self._null and other == _MPI.REQUEST_NULL
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = object.__hash__

    def _ready(self) -> bool:
        """Done, or done by Wait at once (a receive whose message is here): Test
        may complete it."""
        if self._run is not None and self._poll is not None:
            return self._poll()
        h = self._handle
        return h is None or h.test()

    def Wait(self, status=None):
        self._active = False
        self._null = not isinstance(self, Prequest)  # (a persistent one stays, inactive)
        if self._run is not None:
            run, self._run, self._handle = self._run, None, None
            run()
        if self._info is not None:
            set_status(status, *self._info)
        return True

    wait = Wait

    def Test(self, status=None):
        if not self._ready():
            return False
        self.Wait(status)
        return True

    test = Test

    def Get_status(self, status=None) -> bool:
        """Whether the request is done, without completing it (MPI_Request_get_status)."""
        done = not self._active or self._ready()
        if done and self._info is not None and self._run is None:
            set_status(status, *self._info)
        return done

    def Free(self):
        """Drop the request; one in flight or a receive not yet made completes
        first (as MPI lets the operation go on, its buffers the call's until
        then; a receive dropped would leave its message to the next one)."""
        if self._run is not None:
            self.Wait()
        self._active = False
        self._null = True

    @staticmethod
    def Waitall(requests, statuses=None):
        requests = list(requests)
        for k, r in enumerate(requests):
            if isinstance(r, Request):
                r.Wait(None if statuses is None else statuses[k])
        return True

    waitall = Waitall

    @staticmethod
    def Testall(requests, statuses=None):
        """True, every request completed, once all are done; else False and none
        is completed (as MPI_Testall)."""
        requests = list(requests)
        if not all(r._ready() for r in requests if _is_active(r)):
            return False
        return Request.Waitall(requests, statuses)

    @staticmethod
    def Waitany(requests, status=None):
        """The index of a request completed now (one already done first), or
        MPI.UNDEFINED when none is active (every one completed by an earlier
        Wait or Test)."""
        requests = list(requests)
        active = [k for k, r in enumerate(requests) if _is_active(r)]
        if not active:
            return _MPI.UNDEFINED
        i = next((k for k in active if requests[k]._ready()), active[0])
        requests[i].Wait(status)
        return i

    @staticmethod
    def Testany(requests, status=None):
        """(index, True) for a request done and completed now; (MPI.UNDEFINED,
        False) when none of the active ones is done; (MPI.UNDEFINED, True) when
        none is active."""
        requests = list(requests)
        active = [k for k, r in enumerate(requests) if _is_active(r)]
        if not active:
            return _MPI.UNDEFINED, True
        i = next((k for k in active if requests[k]._ready()), None)
        if i is None:
            return _MPI.UNDEFINED, False
        requests[i].Wait(status)
        return i, True

    @staticmethod
    def Waitsome(requests, statuses=None):
        """The indices of the requests completed now, at least one (those done,
        else the first active one waited for); None when none is active."""
        return Request._some(list(requests), statuses, True)

    @staticmethod
    def Testsome(requests, statuses=None):
        """The indices of the requests done and completed now (maybe none); None
        when none is active."""
        return Request._some(list(requests), statuses, False)

    @staticmethod
    def _some(requests, statuses, wait):
        active = [k for k, r in enumerate(requests) if _is_active(r)]
        if not active:
            return None
        done = [k for k in active if requests[k]._ready()]
        if not done and wait:
            done = active[:1]
        for j, k in enumerate(done):
            requests[k].Wait(None if statuses is None else statuses[j])
        return done

    @staticmethod
    def Startall(requests):
        """Start each persistent request (Prequest) of the list."""
        for r in requests:
            r.Start()

    def __getattr__(self, name):
        not_emulated(self, name, _MPI.Prequest)


class Prequest(Request):
    """A persistent request (Comm.Send_init, Comm.Recv_init): inactive until
    ``Start``, which makes the send (it leaves at once, with the buffer's bytes
    at that moment) or posts the receive (made at Wait/Test, in posting order);
    a Wait or Test completes it and it may be started again."""

    def __init__(self, start):
        super().__init__()
        self._start = start
        self._active = False

    def Start(self):
        if self._active:
            raise InvalidArgumentError(
                "request: this persistent request is active (Start it again after "
                "Wait or Test completes it)")
        self._info = None
        self._run = self._start(self)
        self._active = True

    start = Start


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


def done() -> Request:
    return Request()


def started(h, then=None) -> Request:
    """The Request of an I-call: in flight when the call returned a Handle.
    ``then``: what Wait does with the call's result (place it in recvbuf)."""
    from ..comm import Handle

    if not isinstance(h, Handle):
        return done()
    return Request(h.wait if then is None else lambda: then(h.wait()), h)
