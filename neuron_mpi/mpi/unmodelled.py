"""mpi4py's RMA windows and MPI-IO files, which the facade does not make.

``MPI.Win`` and ``MPI.File`` under the facade are subclasses of mpi4py's own (so
keyvals, error handlers, ``isinstance`` and subclasses of them work as there)
whose constructors (``Win.Create``, ``Allocate``, ``Allocate_shared``,
``Create_dynamic``, ``File.Open``) raise NotEmulatedError, a NotImplementedError:
the facade's communicators have no MPI handle to give them, and one-sided
communication and parallel I/O are outside what the emulator models (Neuron's
collectives and point to point). A program that tries them and falls back, as
mpi4py's own tests and ``mpi4py.util.sync`` do, goes on; before, they failed with
mpi4py's TypeError about the communicator's type.
"""
from __future__ import annotations

from mpi4py import MPI as _MPI

from .requests import NotEmulatedError


def _not_made(kind: str, name: str, what: str):
    def make(cls, *args, **kwargs):
        raise NotEmulatedError(f"{kind}.{name}: {what} are not emulated by neuron_mpi.mpi "
                               "(docs/api.md, 'Front-ends', lists what is)")
    make.__name__ = name
    return classmethod(make)


class Win(_MPI.Win):
    """mpi4py's MPI.Win; its windows are not made (neuron_mpi.mpi.unmodelled)."""

    Create = _not_made("Win", "Create", "RMA windows")
    Allocate = _not_made("Win", "Allocate", "RMA windows")
    Allocate_shared = _not_made("Win", "Allocate_shared", "RMA windows")
    Create_dynamic = _not_made("Win", "Create_dynamic", "RMA windows")


class File(_MPI.File):
    """mpi4py's MPI.File; its files are not opened (neuron_mpi.mpi.unmodelled)."""

    Open = _not_made("File", "Open", "MPI-IO files")
