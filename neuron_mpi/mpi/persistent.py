"""Persistent collectives of the mpi4py facade (MPI 4.0: ``Comm.Allreduce_init``,
``Topocomm.Neighbor_alltoall_init``, ...).

``X_init(args..., info=MPI.INFO_NULL)`` takes the arguments of the non-blocking
``IX`` and returns an inactive ``MPI.Prequest``. Each ``Start`` makes the ``IX``
call with those arguments, so it reads the buffers as they are at that moment and
the collective is in flight (or done, for the forms the facade completes at the
call) until a Wait or Test completes the request, which may then be started again.
As in MPI, every member starts its persistent collectives in the same order; an
argument error (found at ``Start``, where the buffers are read) fails every member's
``Start`` alike and leaves the request inactive. The info hints are accepted and not
used, as the other info arguments of the facade.

A Neuron collective is planned once and run many times on fixed buffers (it is
compiled into the program); the emulated Communicator keeps the plan of a call that
repeats with the same arguments, so a persistent collective's Starts after the first
reuse it.
"""
from __future__ import annotations

import inspect

from mpi4py import MPI as _MPI

from .requests import MPIError, Prequest

_INFO = inspect.Parameter("info", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)


def persistent(icall):
    """The persistent form ``X_init`` of the non-blocking method ``icall`` (``IX``):
    its parameters and ``info``, returning a Prequest whose Start makes the call."""
    sig = inspect.signature(icall)
    params = list(sig.parameters.values())
    init_sig = sig.replace(parameters=params + [_INFO], return_annotation="Prequest")
    name_i = icall.__name__
    name = name_i[1].upper() + name_i[2:] + "_init"

    def init(self, *args, **kwargs):
        self._live()  # (MPI.Exception(ERR_COMM) on a null or freed communicator)
        bound = init_sig.bind(self, *args, **kwargs)
        info = bound.arguments.pop("info", None)
        if info is not None and not isinstance(info, _MPI.Info):
            raise TypeError(f"info: expected an MPI.Info, got {type(info).__name__}")
        call = dict(bound.arguments)
        del call[params[0].name]  # (self)
        if "root" in call:  # (at init, as mpi4py's over Open MPI: MPI_ERR_ROOT; an
            # int or a NumPy integer, as the I calls and mpi4py take it)
            root, size = call["root"], self.Get_size()
            if not hasattr(root, "__index__") or not 0 <= root.__index__() < size:
                raise MPIError(f"root: expected a rank in [0, {size}), got {root!r}",
                               _MPI.ERR_ROOT)

        def start(req):
            r = getattr(self, name_i)(**call)  # (a subclass's own: its argument checks)
            req._handle = r._handle  # (None once done: Test finds it done)
            return r._run
        req = Prequest(start)
        req._collective = True  # (Cancel and Free of it active: MPI_ERR_REQUEST)
        return req

    init.__name__ = init.__qualname__ = name
    init.__signature__ = init_sig
    init.__doc__ = (f"Persistent {name_i[1:]}: a Prequest whose each Start "
                    f"makes ``{name_i}`` with these arguments (the buffers as "
                    "they are then). neuron_mpi.mpi.persistent.")
    return init


#: the non-blocking collectives of an intracommunicator with a persistent form
COLLECTIVES = ("Ibarrier", "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv",
               "Iallgather", "Iallgatherv", "Ialltoall", "Ialltoallv", "Ialltoallw", "Ireduce",
               "Iallreduce", "Ireduce_scatter_block", "Ireduce_scatter", "Iscan", "Iexscan")
#: those of a topology communicator
NEIGHBOURHOOD = ("Ineighbor_allgather", "Ineighbor_allgatherv", "Ineighbor_alltoall",
                 "Ineighbor_alltoallv", "Ineighbor_alltoallw")


def add_persistent(cls, names) -> None:
    """Give ``cls`` the persistent form of each of its non-blocking methods
    ``names``."""
    for n in names:
        init = persistent(getattr(cls, n))
        setattr(cls, init.__name__, init)
