"""The Works the "neuron" backend returns: done at the call (``done``), in flight
(``InFlight``: a neuron_mpi Handle the rank's agent moves, its future completed by a
thread of this module when the call ends), and a receive made at its wait
(``Later``)."""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from .. import env


def done(value) -> dist.Work:
    fut = torch.futures.Future()
    fut.set_result(value)
    return _create_work_from_future(fut)


class InFlight(dist.Work):
    """The Work of a call in flight (a neuron_mpi Handle): ``wait()`` finishes it
    and raises its error; ``is_completed()`` asks without blocking; ``result()``
    waits first. ``get_future()`` gives a future that completes by itself when the
    call ends (the completer thread, _complete_futures), so DDP's comm hooks,
    which take it at once and wait for it at the end of backward, overlap too.
    Every call put in flight writes its result in place: ``value`` (what
    result() and the future give) is ready once the handle's wait() returns."""

    def __init__(self, handle, value):
        super().__init__()
        self._h = handle
        self._value = value
        self._lock = threading.Lock()  # (wait() from two threads finishes it once)
        self._over = False
        self._error = None
        self._fut = None
        self.ended = threading.Event()  # set when the call's execution ends
        ex = handle._ex
        ex.on_done = self.ended.set
        if ex.done:  # (ended before on_done was set: _finish reads it after done)
            self.ended.set()

    def _complete(self) -> None:
        with self._lock:
            if not self._over:
                try:
                    self._h.wait()
                except BaseException as e:
                    self._error = e
                self._over = True
                self._h = None
        if self._error is not None:
            raise self._error

    def wait(self, timeout=None):
        self._complete()
        return True

    synchronize = wait

    def is_completed(self):
        if self._over:
            return True
        h = self._h
        return h is None or h.test()

    def is_success(self):
        if not self.is_completed():
            return False
        try:
            self._complete()
        except BaseException:
            return False
        return True

    def exception(self):
        if not self.is_completed():
            return None
        try:
            self._complete()
        except BaseException as e:
            return e
        return None

    def result(self):
        self._complete()
        return self._value

    def get_future(self):
        with self._lock:
            fut = self._fut
            if fut is None:
                fut = self._fut = torch.futures.Future()
                if not self._over:
                    _completer().put(self)
                    return fut
            else:
                return fut
        settle(fut, self._complete, self._value)  # (already finished)
        return fut


class Later(dist.Work):
    """The Work of a receive made at its wait (``make``: neuron_mpi.tagged's
    posted receive), so that a receive posted before the matching send (irecv
    then isend, batch_isend_irecv) cannot wait for it: the send leaves at once.
    ``is_completed()`` makes it when its message is here (``ready``, which never
    waits), so a program polling it sees it complete; ``get_future()`` makes it
    first."""

    def __init__(self, make, value, ready=None):
        super().__init__()
        self._make = make
        self._value = value
        self._ready = ready
        self._over = False
        self._source = None  # a receive from any source: its sender, once made
        self._error = None

    def _end(self) -> None:
        """Make the receive, once; its error is kept (the receive is over)."""
        if not self._over:
            try:
                self._make()
            except BaseException as e:
                self._error = e
            self._over = True

    def wait(self, timeout=None):
        self._end()
        if self._error is not None:
            raise self._error  # (every time)
        return True

    synchronize = wait

    def _source_rank(self) -> int:
        """The sender of a receive from any source (torch's recv with src=None)."""
        self.wait()
        return self._source

    def is_completed(self):
        """True once the receive is over (its error, if any, is wait()'s)."""
        if not self._over and (self._ready is None or self._ready()):
            self._end()
        return self._over

    def result(self):
        self.wait()
        return self._value

    def get_future(self):
        fut = torch.futures.Future()
        settle(fut, self.wait, self._value)
        return fut


def settle(fut, finish, value) -> None:
    """Run ``finish`` (a call's end) and complete ``fut`` with ``value`` or the
    error it raised."""
    try:
        finish()
    except BaseException as e:
        fut.set_exception(e)
    else:
        fut.set_result(value)


_COMPLETER: list = []  # the completer thread's queue, once started


def _completer():
    """The queue of the thread that completes get_future()'s futures (started on
    first use)."""
    if not _COMPLETER:
        import queue

        q = queue.SimpleQueue()
        threading.Thread(target=_complete_futures, args=(q,), name="neuron_mpi-futures",
                         daemon=True).start()
        _COMPLETER.append(q)
    return _COMPLETER[0]


def _complete_futures(q) -> None:
    """Complete the futures of calls in flight, in the order they were asked for,
    each when its call's execution has ended: the agent moves the data, this thread
    only waits (asleep) and then finishes the call (no data moves here, nothing
    waits for the engine), so torch's callbacks on the future never run on the
    agent or under the engine's lock. Past the call's timeout (NEURON_MPI_TIMEOUT)
    the call is waited for as wait() does, which raises its timeout."""
    import time

    while True:
        w = q.get()
        try:
            seconds = env.timeout_seconds()
        except Exception:
            seconds = None
        end = None if seconds is None else time.monotonic() + seconds
        while not w.ended.wait(1.0):
            if end is not None and time.monotonic() >= end:
                break
        settle(w._fut, w._complete, w._value)
