"""Point to point of the mpi4py facade's communicators (mixed into Comm): MPI's
matching by tag in the order sent, over headed messages (neuron_mpi.tagged);
blocking, non-blocking, synchronous and persistent sends and receives, probes and
matched probes (neuron_mpi.mpi.message)."""
from __future__ import annotations

from mpi4py import MPI as _MPI

from ..tagged import ANY, deadline
from .datatypes import landing, outgoing
from .message import Message
from .requests import (NULL_RECV, Prequest, Request, done, empty_status, mpi_tag,
                       posted_request, recv_source, recv_tag, set_status)


class PointToPoint:
    """The point-to-point methods of the facade's communicators."""

    def Send(self, buf, dest, tag=0) -> None:
        self._send(buf, dest, tag)

    def _send(self, buf, dest, tag, sync=False) -> int:
        """Send (``sync``: synchronously; the message's number, 0 when there is
        nothing to wait for)."""
        return self._send_bytes(lambda: outgoing(buf, "buf"), dest, tag, sync)

    def _send_bytes(self, data, dest, tag, sync=False) -> int:
        """Send the bytes ``data()`` gives (not called for MPI.PROC_NULL), as _send."""
        tag = mpi_tag(tag)
        if dest == _MPI.PROC_NULL:
            return 0
        return self._t.send(data(), dest, tag, sync)

    Bsend = Rsend = Send

    def Ssend(self, buf, dest, tag=0) -> None:
        """A synchronous send: returns once a receive at ``dest`` has taken the
        message (its bytes left at the call)."""
        self._sent_synced(self._send(buf, dest, tag, True), dest)

    def _sent_synced(self, number, dest) -> None:
        """Wait until a receive at ``dest`` has taken synchronous send ``number`` (0:
        nothing to wait for)."""
        if number:
            self._t.wait_acked(dest, number)

    def Recv(self, buf, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None) -> None:
        source = recv_source(source, self._c.size)
        tag = recv_tag(tag)  # (checked from MPI.PROC_NULL too, as MPI does)
        if source == _MPI.PROC_NULL:
            return set_status(status, *NULL_RECV)
        self._receive(landing(buf, "buf"), source, tag, status)

    def _receive(self, into, source, tag, status) -> int:
        """A blocking receive into ``into`` (landing's: bytes, what unpacks them),
        from a rank or MPI.ANY_SOURCE; the bytes it took."""
        out, settle = into
        if source == _MPI.ANY_SOURCE:
            got = self._t.recv_any(out, tag, deadline())
        else:
            got = (source,) + self._t.recv(out, source, tag)
        if settle is not None:
            settle(got[2])
        set_status(status, *got)
        return got[2]

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=_MPI.ANY_SOURCE,
                 recvtag=_MPI.ANY_TAG, status=None) -> None:
        """The send, then the receive: a send returns once its bytes have left
        ``sendbuf`` (into the receiver's landing slots or a copy), so two ranks
        exchanging cannot wait for each other."""
        self._sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status, "recvbuf")

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=_MPI.ANY_SOURCE,
                         recvtag=_MPI.ANY_TAG, status=None) -> None:
        """Send ``buf``, then receive into it (a send returns once its bytes have
        left the buffer, so the receive cannot overwrite them)."""
        self._sendrecv(buf, dest, sendtag, buf, source, recvtag, status, "buf")

    def _sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status, name):
        source = recv_source(source, self._c.size)
        into = None if source == _MPI.PROC_NULL else landing(recvbuf, name)
        recvtag = recv_tag(recvtag)
        self.Send(sendbuf, dest, sendtag)
        if into is None:
            return set_status(status, *NULL_RECV)
        self._receive(into, source, recvtag, status)

    def Isend(self, buf, dest, tag=0) -> Request:
        self.Send(buf, dest, tag)
        return done()

    Ibsend = Irsend = Isend

    def Issend(self, buf, dest, tag=0) -> Request:
        """A synchronous send: its bytes leave at the call; the request is done once
        a receive at ``dest`` has taken the message."""
        return self._issued(self._send(buf, dest, tag, True), dest)

    def _issued(self, number, dest) -> Request:
        """The request of synchronous send ``number`` to ``dest``, made."""
        req = Request._new()
        req._run = self._synced(req, number, dest)
        return req

    def _synced(self, req, number, dest):
        """What completes ``req``, a synchronous send's request: waiting for the
        acknowledgement of send ``number`` (None: nothing, a send to PROC_NULL)."""
        if not number:
            return None
        req._poll = lambda: self._t.acked(dest, number)
        # (Free drops it without waiting for the receive)
        req._detached = lambda: self._t.forget(dest, number)
        return lambda: self._t.wait_acked(dest, number)

    def Irecv(self, buf, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG) -> Request:
        """The receive is made at Wait, or at a Test that finds its message here,
        into the message MPI's matching gives it: the receives posted before it
        (from its source or from any) take theirs first, whatever order they are
        waited in; from MPI.ANY_SOURCE, the first to arrive from any rank."""
        return posted_request(self._posted(buf, source, tag))

    def Isendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=_MPI.ANY_SOURCE,
                  recvtag=_MPI.ANY_TAG) -> Request:
        """The send (it leaves at the call), then the receive, posted as Irecv."""
        start = self._posted(recvbuf, source, recvtag, "recvbuf")
        self.Send(sendbuf, dest, sendtag)
        return posted_request(start)

    def Isendrecv_replace(self, buf, dest, sendtag=0, source=_MPI.ANY_SOURCE,
                          recvtag=_MPI.ANY_TAG) -> Request:
        """Send ``buf`` (its bytes leave at the call), then post the receive into it."""
        start = self._posted(buf, source, recvtag)
        self.Send(buf, dest, sendtag)
        return posted_request(start)

    def _posted(self, buf, source, tag, name="buf"):
        """A receive's arguments, checked now; returns ``start(req)``, which posts
        it (in posting order) and returns what makes it at ``req``'s Wait (None:
        nothing to make, a receive from MPI.PROC_NULL)."""
        tag = recv_tag(tag)
        source = recv_source(source, self._c.size)
        if source == _MPI.ANY_SOURCE:
            source = ANY
        if source == _MPI.PROC_NULL:
            def start_null(req):
                req._info = NULL_RECV
            return start_null
        out, settle = landing(buf, name)

        def start(req):
            r = self._t.post(out, source, tag)

            def run():
                req._info = r()
                if settle is not None:
                    settle(req._info[2])
            req._poll = lambda: self._t.ready(r)
            req._cancel = lambda: self._t.cancel(r)
            req._detached = lambda: self._t.detach(r)  # (Free: made once matched)
            return run
        return start

    def Send_init(self, buf, dest, tag=0) -> Prequest:
        """A persistent send: each Start sends the buffer's bytes of that moment."""
        return self._send_init(buf, dest, tag, False)

    Bsend_init = Rsend_init = Send_init

    def Ssend_init(self, buf, dest, tag=0) -> Prequest:
        """A persistent synchronous send: each Start sends the buffer's bytes of
        that moment; its Wait returns once a receive has taken them."""
        return self._send_init(buf, dest, tag, True)

    def _send_init(self, buf, dest, tag, sync) -> Prequest:
        self._live()
        tag = mpi_tag(tag)
        if dest == _MPI.PROC_NULL:
            return Prequest(lambda req: None)
        outgoing(buf, "buf", fill=False)  # (checked now; each Start reads the buffer)

        def start(req):
            number = self._t.send(outgoing(buf, "buf"), dest, tag, sync)
            return self._synced(req, number, dest)  # (None for a plain send)
        return Prequest(start)

    def Recv_init(self, buf, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG) -> Prequest:
        """A persistent receive: each Start posts it (made at Wait/Test, as Irecv;
        from MPI.ANY_SOURCE too)."""
        self._live()
        return Prequest(self._posted(buf, source, tag))

    def Probe(self, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None) -> bool:
        """Wait for a message from ``source`` (a rank or MPI.ANY_SOURCE) with ``tag``
        (any: MPI.ANY_TAG) and fill ``status`` with its source, tag and size,
        leaving it to the receive."""
        tag = recv_tag(tag)
        source = recv_source(source, self._c.size)
        if source == _MPI.PROC_NULL:
            set_status(status, *NULL_RECV)
        elif source == _MPI.ANY_SOURCE:
            set_status(status, *self._t.probe_any(tag, deadline()))
        else:
            set_status(status, source, *self._t.probe(source, tag))
        return True

    def Iprobe(self, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None) -> bool:
        """Whether a message from ``source`` (a rank or MPI.ANY_SOURCE) with ``tag``
        has arrived (never waits); if so ``status`` gets its source, tag and size,
        and it is left to the receive. Messages that receives posted earlier
        (Irecv) will take are not reported."""
        tag = recv_tag(tag)
        source = recv_source(source, self._c.size)
        if source == _MPI.PROC_NULL:
            set_status(status, *NULL_RECV)
            return True
        if source == _MPI.ANY_SOURCE:
            got = self._t.iprobe_any(tag)
        else:
            got = self._t.iprobe(source, tag)
            got = None if got is None else (source,) + got
        if got is None:
            return False
        set_status(status, *got)
        return True

    def Mprobe(self, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None) -> Message:
        """MPI_Mprobe: wait for the message a receive from ``source`` with ``tag``
        would take and keep it for the returned Message (its Recv/Irecv, or
        recv/irecv for an object, alone take it); MPI.MESSAGE_NO_PROC from
        MPI.PROC_NULL."""
        tag = recv_tag(tag)
        source = recv_source(source, self._c.size)
        if source == _MPI.PROC_NULL:
            set_status(status, *NULL_RECV)
            return Message._of(None, None)
        if source == _MPI.ANY_SOURCE:
            m = self._t.mprobe(ANY, tag, deadline())
        else:
            m = self._t.mprobe(source, tag)
        set_status(status, m.src, m.tag, m.data.nbytes)
        return Message._of(self._t, m)

    def Improbe(self, source=_MPI.ANY_SOURCE, tag=_MPI.ANY_TAG, status=None):
        """MPI_Improbe: Mprobe without waiting; None (and the empty status) when no
        such message has arrived."""
        tag = recv_tag(tag)
        source = recv_source(source, self._c.size)
        if source == _MPI.PROC_NULL:
            set_status(status, *NULL_RECV)
            return Message._of(None, None)
        m = self._t.improbe(ANY if source == _MPI.ANY_SOURCE else source, tag)
        if m is None:
            empty_status(status)
            return None
        set_status(status, m.src, m.tag, m.data.nbytes)
        return Message._of(self._t, m)

    probe = Probe
    iprobe = Iprobe
    mprobe = Mprobe
    improbe = Improbe

