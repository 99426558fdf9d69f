"""``python -m neuron_mpi.bench OP [options]`` (run it under neuron-mpirun / mpiexec)."""
import sys

from .cli import main

sys.exit(main())
