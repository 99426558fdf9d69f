"""neuron_mpi: AWS Neuron collective communication, emulated over MPI."""
from __future__ import annotations

from .errors import (AlgorithmError, CollectiveMismatchError, CollectiveTimeoutError,
                     CommunicatorFailedError, InvalidArgumentError, NeuronMPIError,
                     TopologyError, UnsupportedGroupError)
from .layout import check_layout
from .topology import Link, Placement, Topology, topology
from .tracing import trace
from .vocab import AVG, MAX, MIN, PROD, SUM


def __getattr__(name):
    # the MPI half loads on first use, so `neuron-mpi topo`, the model and the
    # launcher never start MPI
    if name in ("init", "Communicator", "Handle"):
        from . import comm
        return getattr(comm, name)
    raise AttributeError(f"module 'neuron_mpi' has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "AlgorithmError", "CollectiveMismatchError", "CollectiveTimeoutError",
    "CommunicatorFailedError", "InvalidArgumentError", "NeuronMPIError",
    "TopologyError", "UnsupportedGroupError", "Link", "Placement", "Topology",
    "topology", "trace", "check_layout", "__version__", "init", "Communicator", "Handle",
    "SUM", "PROD", "MAX", "MIN", "AVG",
]
