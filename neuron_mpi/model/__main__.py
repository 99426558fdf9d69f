"""``python -m neuron_mpi.model``: the model's command line (neuron-mpi-model)."""
import sys

from .cli import main

sys.exit(main())
