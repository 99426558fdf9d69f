"""``python -m neuron_mpi.mpi prog.py [args]`` (or ``-m module``, ``-c cmd``): run an
unmodified mpi4py program on the emulated communicators, as ``python -m mpi4py``
does on the real ones (mpi4py's own runner, so an uncaught exception on one rank
aborts the job instead of hanging it)."""
from __future__ import annotations

from . import install

install()

from mpi4py.run import main  # noqa: E402

main()
