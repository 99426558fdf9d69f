#!/usr/bin/env bash
# The whole test suite, from a fresh clone, with only Python 3.10+ on the machine:
# makes .venv, installs torch (CPU) and neuron-mpi with its self-contained MPI, test
# and torch extras,
# warms numba's on-disk cache once, then runs pytest (which launches the MPI
# suites itself, each under a timeout).
#
# With no arguments the tests run as two pytest sessions at once: the tests that
# launch MPI jobs and other programs, and beside them the in-process ones
# (schedules, replay, kernels, model: one core's worth, which the first launches
# leave idle) followed by the MPI suites of 1 to 3 ranks. Its report comes after
# the first's; the exit status is non-zero when either failed. Arguments (files,
# -k, ...) run one session with them instead, as plain pytest would.
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
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi

# the in-process files (no mpiexec, no launcher); test_determinism's one MPI job
# runs with the launches
INPROC=(test_algorithms test_determinism test_elide test_env test_groups test_kernels
        test_layout test_model test_reliability_unit test_rooted_schedules
        test_schedules test_tagged test_topology test_transport test_vocab)
MPI_IN_INPROC=tests/test_determinism.py::test_mpi_every_rank_and_run_same_bits_as_replay
# the MPI suites of 1 to 3 ranks leave the 2 cores mostly idle (20-35% busy: their
# ranks wait out the deadlines of the timeout tests), so they run at the end of the
# in-process session instead, beside the launches
SMALL_MPI=("tests/test_mpi_suites.py::test_mpi_suite[trn2-1]"
           "tests/test_mpi_suites.py::test_mpi_suite[trn2-2]"
           "tests/test_mpi_suites.py::test_mpi_suite[trn2-3-nonstrict]")
# the launching files in this order: first those whose launches wait more than
# they compute (about half the 2 cores idle), beside which the in-process session
# finds room; then the MPI suites, which keep both cores busy; then every other
# file (the fault matrix, whose bounds are timed, after the in-process session)
EARLY=(test_bench test_cli test_install test_launcher test_picture test_trace)
inproc=() launches=() small=()
for f in "${INPROC[@]}"; do
  inproc+=("tests/$f.py")
done
for t in "${SMALL_MPI[@]}"; do
  small+=(--deselect "$t")
done
for f in "${EARLY[@]}"; do
  launches+=("tests/$f.py")
done
launches+=(tests/test_mpi_suites.py)
for f in tests/test_*.py; do
  case " ${inproc[*]} ${launches[*]} " in
    *" $f "*) ;;
    *) launches+=("$f") ;;
  esac
done
log=$(mktemp -t neuron_mpi_inproc.XXXXXX)
trap 'rm -f "$log"' EXIT
.venv/bin/python -m pytest -p no:cacheprovider --basetemp="$PWD/.pytest_inproc" \
  --deselect "$MPI_IN_INPROC" "${inproc[@]}" "${SMALL_MPI[@]}" > "$log" 2>&1 &
inproc_pid=$!
set +e
.venv/bin/python -m pytest "${small[@]}" "${launches[@]}" "$MPI_IN_INPROC"
launched=$?
wait "$inproc_pid"
in_process=$?
set -e
echo
echo "=== the in-process tests (run beside the launches above) ==="
cat "$log"
echo "=== launches: exit $launched; in-process: exit $in_process ==="
[ "$launched" -eq 0 ] && [ "$in_process" -eq 0 ]
