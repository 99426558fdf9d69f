"""neuron_mpi.launch: the ``neuron-mpirun`` launcher (see neuron_mpi/launch/mpirun.py)."""
