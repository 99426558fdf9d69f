"""neuron_mpi.launch: the ``neuron-mpirun`` launcher (see launch/mpirun.py)."""
