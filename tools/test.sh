#!/usr/bin/env bash
# The whole test suite, from a fresh clone, with only Python 3.10+ on the machine:
# makes .venv, installs torch (CPU) and neuron-mpi with its self-contained MPI, test
# and torch extras,
# warms numba's on-disk cache once, then runs pytest (which launches the MPI
# suites itself, each under a timeout). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first, pinned: the pin takes the CPU build; an unpinned or range install
# resolves to the multi-GB CUDA build
.venv/bin/python -m pip install -q --disable-pip-version-check 'torch==2.13.0'
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[mpi,test,torch]'
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
.venv/bin/python -c "import neuron_mpi.kernels as k; k.warm()"
exec .venv/bin/python -m pytest "$@"
