"""neuron_mpi: AWS Neuron collective communication, emulated over MPI."""
from __future__ import annotations

from .errors import (AlgorithmError, CollectiveMismatchError, CollectiveTimeoutError,
                     CommunicatorFailedError, InvalidArgumentError, NeuronMPIError,
                     TopologyError, UnsupportedGroupError)
from .topology import Link, Placement, Topology, topology
from .comm import AVG, MAX, MIN, PROD, SUM, Communicator, Handle, init

__version__ = "0.1.0"

__all__ = [
    "AlgorithmError", "CollectiveMismatchError", "CollectiveTimeoutError",
    "CommunicatorFailedError", "InvalidArgumentError", "NeuronMPIError",
    "TopologyError", "UnsupportedGroupError", "Link", "Placement", "Topology",
    "topology", "__version__", "init", "Communicator", "Handle",
    "SUM", "PROD", "MAX", "MIN", "AVG",
]
