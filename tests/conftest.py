"""The plain test run: tests/mpi/ holds pytest-mpi suites that only mean something
under mpiexec; tests/test_mpi_suites.py launches them there. A plain recursive run
of tests/ does not collect them (they would only show as skipped)."""
from pathlib import Path

import pytest

_MPI_DIR = Path(__file__).resolve().parent / "mpi"


def pytest_ignore_collect(collection_path, config):
    if config.getoption("--with-mpi", default=False):
        return None
    if Path(collection_path).resolve() == _MPI_DIR and not any(
            str(a).startswith(str(_MPI_DIR)) or "tests/mpi" in str(a) for a in config.args):
        return True
    return None


@pytest.fixture(autouse=True)
def _unset_module_env(request, monkeypatch):
    """A test module's ``ENV`` (names of environment variables) is unset for each of
    its tests, so that a setting in the developer's shell does not leak into them."""
    for name in getattr(request.module, "ENV", ()):
        monkeypatch.delenv(name, raising=False)
