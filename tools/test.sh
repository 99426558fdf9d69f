#!/usr/bin/env bash
# The whole test suite, from a fresh clone, with only Python 3.10+ on the machine:
# makes .venv, installs neuron-mpi with its self-contained MPI and test extras,
# warms numba's on-disk cache once, then runs pytest (which launches the MPI
# suites itself, each under a timeout). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[mpi,test]'
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
.venv/bin/python -c "import neuron_mpi.kernels as k; k.warm()"
exec .venv/bin/python -m pytest "$@"
