"""Exceptions raised by neuron_mpi. Every message names the argument at fault."""
from __future__ import annotations


class NeuronMPIError(Exception):
    """Base class of every neuron_mpi error."""


class TopologyError(NeuronMPIError, ValueError):
    """A configuration the catalog or the hardware's rules refuse."""


class InvalidArgumentError(NeuronMPIError, ValueError):
    """A bad argument that a rank can see alone; raised before any data moves."""


class UnsupportedGroupError(TopologyError):
    """A replica group the real hardware refuses (strict mode)."""


class AlgorithmError(InvalidArgumentError):
    """A forced algorithm that does not apply to this operation or group."""


class CollectiveMismatchError(NeuronMPIError, RuntimeError):
    """Ranks of a group called a collective with arguments that disagree."""


class CollectiveTimeoutError(NeuronMPIError, TimeoutError):
    """A collective or point-to-point call ran past its deadline."""


class CommunicatorFailedError(NeuronMPIError, RuntimeError):
    """The communicator failed earlier; the original cause is attached."""


def arg_error(name: str, expected: str, got) -> InvalidArgumentError:
    """An InvalidArgumentError in the house style: argument, expectation, value."""
    return InvalidArgumentError(f"{name}: expected {expected}, got {got!r}")
