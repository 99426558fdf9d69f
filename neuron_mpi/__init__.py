"""neuron_mpi: AWS Neuron collective communication, emulated over MPI."""
from __future__ import annotations

from .errors import (AlgorithmError, CollectiveMismatchError, CollectiveTimeoutError,
                     CommunicatorFailedError, InvalidArgumentError, NeuronMPIError,
                     TopologyError, UnsupportedGroupError)
from .topology import Link, Placement, Topology, topology

__version__ = "0.1.0"

__all__ = [
    "AlgorithmError", "CollectiveMismatchError", "CollectiveTimeoutError",
    "CommunicatorFailedError", "InvalidArgumentError", "NeuronMPIError",
    "TopologyError", "UnsupportedGroupError", "Link", "Placement", "Topology",
    "topology", "__version__",
]
