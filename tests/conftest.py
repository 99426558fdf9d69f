"""The plain test run: tests/mpi/ holds pytest-mpi suites that only mean something
under mpiexec; tests/test_mpi_suites.py launches them there. A plain recursive run
of tests/ does not collect them (they would only show as skipped)."""
from pathlib import Path

_MPI_DIR = Path(__file__).resolve().parent / "mpi"


def pytest_ignore_collect(collection_path, config):
    if config.getoption("--with-mpi", default=False):
        return None
    if Path(collection_path).resolve() == _MPI_DIR and not any(
            str(a).startswith(str(_MPI_DIR)) or "tests/mpi" in str(a) for a in config.args):
        return True
    return None
