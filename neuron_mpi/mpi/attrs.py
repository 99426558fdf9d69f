"""Attribute caching on the facade's communicators, as mpi4py's over Open MPI:
``Comm.Create_keyval(copy_fn, delete_fn, nopython)``, ``Set_attr``, ``Get_attr``,
``Delete_attr``, ``Comm.Free_keyval``.

A keyval is one of the real MPI's (so keyvals never collide with mpi4py's own);
the values live here, per emulated communicator, shared by every handle of it. A
Dup copies each attribute through its keyval's ``copy_fn`` (None or False: not
copied; True: the same object; a function ``(comm, keyval, value)``: what it
returns, not copied when it returns NotImplemented); Free, Delete_attr and a
Set_attr over a value call ``delete_fn(comm, keyval, value)``. A callback that
raises prints its traceback on stderr; Dup and Delete_attr then raise
``MPI.Exception(MPI.ERR_OTHER)``, as mpi4py's do (the attribute deleted all the
same), while Set_attr keeps the new value and Free frees, as over Open MPI.
``nopython=True`` keyvals hold ints (C pointers in MPI: 64 bits, a negative one
read back modulo 2**64).

The predefined attributes are on COMM_WORLD and its duplicates (LASTUSEDCODE on
COMM_WORLD alone), as Open MPI keeps them: ``MPI.TAG_UB`` is the facade's largest
tag (tagged.TAG_UB); ``IO``, ``WTIME_IS_GLOBAL``, ``UNIVERSE_SIZE``, ``APPNUM`` and
``LASTUSEDCODE`` are the real COMM_WORLD's. Other communicators (COMM_SELF,
Split's) have none. Setting or deleting a predefined one, and asking for a keyval
never created, raise ``MPI.Exception(MPI.ERR_OTHER)``, ``MPI.KEYVAL_INVALID``
``ERR_KEYVAL``, as over Open MPI; a freed keyval reads None.
"""
from __future__ import annotations

import sys
import traceback
import weakref

from mpi4py import MPI as _MPI

#: keyval -> (copy_fn, delete_fn, nopython), for the keyvals not freed
_KEYVALS: dict = {}
_FREED: set = set()  # (keyvals freed: Get_attr says None, as over Open MPI)
#: an emulated Communicator -> {keyval: (value, (copy_fn, delete_fn, nopython))}
_ATTRS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PREDEFINED = ("TAG_UB", "IO", "WTIME_IS_GLOBAL", "UNIVERSE_SIZE", "APPNUM", "LASTUSEDCODE")
_KEPT = (True, None, True)  # (a predefined attribute: copied by Dup, as Open MPI does)
_WORLD_ONLY = (None, None, True)  # (LASTUSEDCODE: not copied, as over Open MPI)
_REAL = object()  # (a predefined attribute's value: the real COMM_WORLD's now)


_PREDEFINED_KEYVALS = frozenset(getattr(_MPI, n) for n in _PREDEFINED if hasattr(_MPI, n))


def seed_predefined(comm) -> None:
    """Give ``comm`` (the facade's COMM_WORLD) the predefined attributes."""
    from ..tagged import TAG_UB

    attrs = _ATTRS.setdefault(comm.communicator, {})
    for name in _PREDEFINED:
        keyval = getattr(_MPI, name, None)
        if keyval is None or keyval == _MPI.KEYVAL_INVALID:
            continue
        if name == "TAG_UB":
            attrs[keyval] = (TAG_UB, _KEPT)
        elif _MPI.COMM_WORLD.Get_attr(keyval) is not None:
            # (read at each Get_attr: LASTUSEDCODE moves; it is COMM_WORLD's alone)
            attrs[keyval] = (_REAL, _WORLD_ONLY if name == "LASTUSEDCODE" else _KEPT)


def _pointer(v) -> int:
    """A nopython attribute's value, as mpi4py takes a C pointer from it: an int
    (TypeError otherwise), of 64 bits (OverflowError), a negative one read back
    modulo 2**64."""
    if not isinstance(v, int):
        raise TypeError(f"attrval: expected an int for a nopython keyval, got "
                        f"{type(v).__name__}")
    if not -(1 << 63) <= v < (1 << 64):
        raise OverflowError(f"attrval: {v} does not fit a C pointer")
    return v & ((1 << 64) - 1)


def _call(fn, comm, keyval, value):
    """A user's callback; its exception printed, then MPI.Exception(ERR_OTHER)."""
    try:
        return fn(comm, keyval, value)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        raise _MPI.Exception(_MPI.ERR_OTHER) from e


def _quietly(fn, *args) -> None:
    """``fn(*args)``, a callback whose MPI.Exception (its traceback already printed
    by _call) goes no further: Set_attr over a value, Free."""
    try:
        fn(*args)
    except _MPI.Exception:
        pass


class Attributes:
    """The attribute methods of the facade's communicators (mixed into Comm)."""

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython=False) -> int:
        keyval = _MPI.Comm.Create_keyval()  # (a real keyval: unique, freed by MPI)
        copy_fn = None if copy_fn is False else copy_fn
        delete_fn = None if delete_fn is False or delete_fn is True else delete_fn
        for name, fn in (("copy_fn", copy_fn), ("delete_fn", delete_fn)):
            if fn is not None and fn is not True and not callable(fn):
                raise TypeError(f"{name}: expected a function, None or a bool, got "
                                f"{type(fn).__name__}")
        _KEYVALS[keyval] = (copy_fn, delete_fn, bool(nopython))
        return keyval

    @classmethod
    def Free_keyval(cls, keyval) -> int:
        """MPI.KEYVAL_INVALID; attributes set with it stay until deleted."""
        keyval = int(keyval)
        got = _MPI.Comm.Free_keyval(keyval)
        if _KEYVALS.pop(keyval, None) is not None:
            _FREED.add(keyval)
        return got

    def _attrs(self) -> dict:
        self._live()
        return _ATTRS.setdefault(self._c, {})

    def Get_attr(self, keyval):
        """The value set with ``keyval``, or None."""
        attrs = self._attrs()
        keyval = int(keyval)
        if keyval in attrs:
            value = attrs[keyval][0]
            return _MPI.COMM_WORLD.Get_attr(keyval) if value is _REAL else value
        if keyval == _MPI.KEYVAL_INVALID:
            raise _MPI.Exception(_MPI.ERR_KEYVAL)
        if keyval not in _KEYVALS and keyval not in _FREED and \
                keyval not in _PREDEFINED_KEYVALS:
            raise _MPI.Exception(_MPI.ERR_OTHER)
        return None

    def Set_attr(self, keyval, attrval) -> None:
        attrs = self._attrs()
        keyval = int(keyval)
        state = _KEYVALS.get(keyval)
        if state is None:  # (a predefined keyval, or one never created or freed)
            raise _MPI.Exception(_MPI.ERR_OTHER)
        if state[2]:
            attrval = _pointer(attrval)
        old = attrs.pop(keyval, None)  # (set again: the last set, for Free's order)
        attrs[keyval] = (attrval, state)
        if old is not None and old[1][1] is not None:  # (the old value's delete_fn: if
            # it raises, its traceback is printed and the new value stays, as over
            # Open MPI)
            _quietly(_call, old[1][1], self, keyval, old[0])

    def Delete_attr(self, keyval) -> None:
        attrs = self._attrs()
        keyval = int(keyval)
        if keyval not in attrs or keyval in _PREDEFINED_KEYVALS:
            raise _MPI.Exception(_MPI.ERR_OTHER)
        self._delete(keyval, attrs)

    def _delete(self, keyval, attrs) -> None:
        """Drop the attribute, then call its delete_fn (an attribute whose delete_fn
        raised is gone all the same, as over Open MPI)."""
        value, (_, delete_fn, _) = attrs.pop(keyval)
        if delete_fn is not None:
            _call(delete_fn, self, keyval, value)

    def _copy_attrs(self, new) -> None:
        """Dup's copy of this communicator's attributes onto ``new``."""
        mine = _ATTRS.get(self._c)
        if not mine:
            return
        theirs = _ATTRS.setdefault(new._c, {})
        for keyval, (value, state) in sorted(mine.items()):  # (in keyval order, as MPI)
            copy_fn = state[0]
            if copy_fn is None:
                continue
            if copy_fn is not True:
                value = _call(copy_fn, self, keyval, value)
                if value is NotImplemented:
                    continue
            theirs[keyval] = (value, state)

    def _delete_attrs(self) -> None:
        """Free's deletion of every attribute, the last set first. A delete_fn that
        raises has its traceback printed and the others still run: the
        communicator is freed all the same, as over Open MPI."""
        attrs = _ATTRS.get(self._c)
        for keyval in reversed(list(attrs or ())):
            _quietly(self._delete, keyval, attrs)
