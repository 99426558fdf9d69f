"""An mpi4py-compatible module whose communicators are neuron_mpi Communicators.

``from neuron_mpi import mpi as MPI`` (or ``from neuron_mpi.mpi import MPI``) in new
code, or ``python -m neuron_mpi.mpi
prog.py [args]`` (as ``python -m mpi4py prog.py``) for an unmodified mpi4py program,
whose ``from mpi4py import MPI`` then gives this module. ``COMM_WORLD`` and
``COMM_SELF`` are emulated communicators (``neuron_mpi.init()``; NEURON_MPI_INSTANCE
etc. choose the topology, NEURON_MPI_STRICT=0 accepts groups the instance would refuse,
e.g. 5 ranks); constants, datatypes, ops and everything else come from
the real mpi4py.

The buffer API (upper-case methods) maps to Communicator calls: docs/api.md,
"Front-ends", has the table. Buffers are anything with the buffer protocol or
DLPack (numpy, array.array, ...), as ``buf``, ``(buf, datatype)``,
``(buf, count, datatype)`` or, for the -v forms, ``(buf, counts, displs, datatype)``
/ ``(buf, (counts, displs), datatype)``; a count in a block collective's gathered
or scattered buffer is per process, as in mpi4py; derived datatypes and MPI.BOTTOM
travel packed (neuron_mpi.mpi.datatypes). Data moves as bytes; reductions run in
the datatype, through the Neuron kernels for the types and ops they carry, else
(complex products, long double, bool; LAND, MAXLOC, a user's Op.Create) as an
all-gather followed by the reduction in rank order on every rank.

The lower-case, pickle-based methods (``bcast``, ``allreduce``, ``send``, ``recv``,
...) carry any picklable object: pickled with mpi4py's serializer (``MPI.pickle``),
their bytes move as a buffer's (neuron_mpi.mpi.objects).

What is not emulated raises NotImplementedError naming it (RMA windows, files, a
user's op over a derived datatype, ...); nothing falls through to the real MPI's
communicators.
"""
from __future__ import annotations

from mpi4py import MPI as _MPI

from .comm import Cartcomm, Comm, Distgraphcomm, Graphcomm, Intracomm  # noqa: F401
from .message import Message  # noqa: F401
from .requests import NotEmulatedError, Prequest, Request  # noqa: F401
from .unmodelled import File, Win  # noqa: F401

_EMULATED = ("COMM_WORLD", "COMM_SELF", "Comm", "Intracomm", "Cartcomm", "Graphcomm",
             "Distgraphcomm", "Request", "Prequest", "Message", "Win", "File",
             "MPI", "NotEmulatedError")
_STATE: dict = {}


def _world() -> Comm:
    if "world" not in _STATE:
        from .. import comm as C
        from .. import env
        from .attrs import seed_predefined
        w = C.init(strict=env.strict_groups())
        _STATE["world"] = Comm(w, "MPI_COMM_WORLD")
        seed_predefined(_STATE["world"])
        _STATE["self"] = Comm(w.group([w.rank]), "MPI_COMM_SELF")
    return _STATE["world"]


def install() -> None:
    """Make ``from mpi4py import MPI`` give this module from now on (neuron_mpi's own
    modules keep the real one: they are imported first)."""
    import sys

    import mpi4py

    # every neuron_mpi module that uses MPI binds the real one now
    from .. import comm as _comm  # noqa: F401
    from .. import engine as _engine  # noqa: F401
    from ..transport import mpi as _transport_mpi  # noqa: F401
    sys.modules["mpi4py.MPI"] = sys.modules[__name__]
    mpi4py.MPI = sys.modules[__name__]


def __getattr__(name):
    if name == "MPI":  # ``from neuron_mpi.mpi import MPI``, as ``from mpi4py import MPI``
        import sys

        return sys.modules[__name__]
    if name == "COMM_WORLD":
        return _world()
    if name == "COMM_SELF":
        _world()
        return _STATE["self"]
    return getattr(_MPI, name)


def __dir__():
    return sorted(set(dir(_MPI)) | set(_EMULATED))



