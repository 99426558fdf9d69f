"""``python -m neuron_mpi``: the neuron-mpi command."""
import sys

from .cli import main

sys.exit(main())
