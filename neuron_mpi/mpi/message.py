"""Matched probes of the mpi4py facade: ``Comm.Mprobe``/``Improbe`` (and the
lower-case ``mprobe``/``improbe``) keep the message they found for the Message
they return, whose ``Recv``/``Irecv`` (``recv``/``irecv``: its object) alone take
it, so that no other receive, probe or thread gets it in between (MPI_Mprobe,
MPI_Mrecv). A message from MPI.PROC_NULL is MPI.MESSAGE_NO_PROC; a Message
received from is MPI.MESSAGE_NULL (false). They compare equal to mpi4py's own
constants."""
from __future__ import annotations

from mpi4py import MPI as _MPI

from ..errors import InvalidArgumentError
from .datatypes import landing
from .objects import loads
from .requests import NULL_RECV, Request, set_status

_NULL, _NO_PROC = "null", "no proc"


class Message:
    """A matched message (MPI.Message), or MPI.MESSAGE_NULL / MESSAGE_NO_PROC."""

    def __init__(self, message=None):
        self._tagged, self._m = None, None
        self._kind = _NULL
        if isinstance(message, Message):
            self._tagged, self._m, self._kind = message._tagged, message._m, message._kind
        elif message is not None and message == _MPI.MESSAGE_NO_PROC:
            self._kind = _NO_PROC

    @classmethod
    def _of(cls, tagged, m):
        """The Message of ``m``, kept by ``tagged`` (None: MESSAGE_NO_PROC)."""
        msg = cls()
        if m is None:
            msg._kind = _NO_PROC
        else:
            msg._tagged, msg._m, msg._kind = tagged, m, "matched"
        return msg

    def __bool__(self) -> bool:
        return self._kind != _NULL

    def __eq__(self, other):
        if isinstance(other, Message):
            return self._kind == other._kind and self._m is other._m
        if isinstance(other, _MPI.Message):
            return self._kind == (_NULL if other == _MPI.MESSAGE_NULL else
                                  _NO_PROC if other == _MPI.MESSAGE_NO_PROC else None)
        return NotImplemented

    __hash__ = object.__hash__

    def __reduce__(self):
        if self._kind == "matched":
            raise ValueError("cannot pickle a matched message (MPI.Message)")
        return Message, ((_MPI.MESSAGE_NO_PROC if self._kind == _NO_PROC else None),)

    def _take(self, buf):
        """Receive it: into ``buf`` (a buffer spec; (source, tag, size)), or (None)
        as its own bytes ((source, tag, bytes)). The Message is MESSAGE_NULL after,
        also when the receive failed (MPI_ERR_TRUNCATE: the message is gone)."""
        kind, tagged, m = self._kind, self._tagged, self._m
        if kind == _NULL:
            raise InvalidArgumentError("message: MPI.MESSAGE_NULL (already received, or "
                                       "never matched)")
        out, settle = (None, None) if buf is None or kind == _NO_PROC else \
            landing(buf, "buf")
        self._tagged, self._m, self._kind = None, None, _NULL
        if kind == _NO_PROC:
            return NULL_RECV if buf is not None else NULL_RECV[:2] + (b"",)
        got = tagged.mrecv(m, out)
        if settle is not None:
            settle(got[2])
        return got

    def Recv(self, buf, status=None) -> None:
        """MPI_Mrecv: the message into ``buf`` (a longer one: MPI_ERR_TRUNCATE)."""
        set_status(status, *self._take(buf))

    def Irecv(self, buf) -> Request:
        """MPI_Imrecv: the message is here already, so it is received now; the
        Request carries its status (and a receive's error, raised at its Wait)."""
        req = Request._new()
        try:
            req._info = self._take(buf)
        except InvalidArgumentError as e:
            def failed(err=e):
                raise err
            req._run = failed
        return req

    def recv(self, status=None):
        """The object of the message (pickled by a lower-case send)."""
        src, tag, data = self._take(None)
        set_status(status, src, tag, len(data))
        return loads(data)

    def irecv(self) -> Request:
        """``recv`` now; a Request whose ``wait()`` returns the object."""
        req = Request._new()
        src, tag, data = self._take(None)
        req._info = (src, tag, len(data))
        req._load = lambda: loads(data)
        return req

    @staticmethod
    def Probe(comm, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None):
        return comm.Mprobe(source, tag, status)

    @staticmethod
    def Iprobe(comm, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None):
        return comm.Improbe(source, tag, status)

    probe, iprobe = Probe, Iprobe

    def __repr__(self):
        return f"<neuron_mpi.mpi.Message {self._kind}>"
