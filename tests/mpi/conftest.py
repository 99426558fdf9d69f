"""MPI suites (pytest-mpi): run only under ``mpiexec -n N python -m mpi4py -m pytest
--with-mpi``; tests/test_mpi_suites.py launches them. Without --with-mpi every test
here is skipped (pytest-mpi's ``mpi`` marker) and MPI is never started.

Output: rank 0 prints pytest's normal report. Every other rank is quiet, except
that every failure, on every rank, is written to stderr at once with each line
prefixed ``[rank N]`` (and a timeout's stack dump too).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from _pytest._io import TerminalWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: mpi_helpers

_STATE: dict = {"rank": None, "config": None}


class _PrefixedStderr:
    """A text stream that writes whole lines to stderr, each prefixed."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._pending = ""

    def write(self, s: str) -> int:
        self._pending += s
        *lines, self._pending = self._pending.split("\n")
        if lines:
            sys.__stderr__.write("".join(f"{self.prefix}{ln}\n" for ln in lines))
            sys.__stderr__.flush()
        return len(s)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        sys.__stderr__.flush()

    def isatty(self) -> bool:
        return False


class _QuietRankWriter(TerminalWriter):
    """Terminal writer of ranks != 0: silent, until pytest-timeout announces a
    timeout; from then on everything (the stack dump) goes out prefixed."""

    def __init__(self, rank: int):
        super().__init__(file=_PrefixedStderr(f"[rank {rank}] "))
        self.hasmarkup = False
        self.loud = False

    def sep(self, sepchar, title=None, fullwidth=None, **markup):
        if title == "Timeout":
            self.loud = True
        super().sep(sepchar, title, fullwidth, **markup)

    def write_raw(self, msg, *, flush=False):
        if self.loud:
            super().write_raw(msg, flush=flush)


def _with_mpi(config) -> bool:
    try:
        return bool(config.getoption("--with-mpi"))
    except ValueError:
        return False


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if not _with_mpi(config):
        return
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    _STATE["rank"] = rank
    _STATE["config"] = config
    if rank != 0:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr._tw = _QuietRankWriter(rank)


def pytest_runtest_logreport(report):
    rank = _STATE["rank"]
    if rank is None or not report.failed:
        return
    lines = [f"FAILED {report.nodeid} ({report.when})"]
    lines += (report.longreprtext or "").splitlines()
    text = "".join(f"[rank {rank}] {ln}\n" for ln in lines)
    capman = _STATE["config"].pluginmanager.get_plugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            sys.stderr.write(text)
            sys.stderr.flush()
    else:
        sys.stderr.write(text)
        sys.stderr.flush()


def pytest_terminal_summary(terminalreporter):
    if _STATE["rank"] != 0:
        return
    from mpi4py import MPI
    size = MPI.COMM_WORLD.Get_size()
    inst = os.environ.get("NEURON_MPI_INSTANCE", "default")
    terminalreporter.write_line(f"neuron-mpi MPI suite: {size} ranks, instance {inst}")


# No MPI barrier at the end of the session: a rank blocked in a plain MPI barrier
# stops forwarding neuron_mpi traffic that other ranks may still wait for. The
# library's own exit drain (atexit, before MPI finalizes) keeps forwarding until all
# ranks are done, so every rank has printed its report before one that failed makes
# `python -m mpi4py` abort the job.


# --- fixtures --------------------------------------------------------------------------
def strict_mode() -> bool:
    return os.environ.get("NEURON_MPI_TEST_STRICT", "1") != "0"


@pytest.fixture(scope="session")
def comm():
    """The world communicator, one per launch (collective: every rank asks for it
    at the same test)."""
    import neuron_mpi as nm
    return nm.init(strict=strict_mode())


@pytest.fixture
def executions_made(monkeypatch) -> list:
    """The operations of the Executions built from here on (the routed agreement's
    own left out), in order: a call run alone (compiled, on the calling thread)
    builds none."""
    from neuron_mpi import executor

    made = []
    init = executor.Execution.__init__

    def counting(self, *args, **kwargs):
        op = args[5] if len(args) > 5 else kwargs.get("op")
        if op != "agreement":  # (the routed agreement's own, over MPI)
            made.append(op)
        init(self, *args, **kwargs)

    monkeypatch.setattr(executor.Execution, "__init__", counting)
    return made


@pytest.fixture(scope="session")
def batch() -> bool:
    """Run the dtype variants of one matrix case as async collectives in flight
    together (large worlds, to keep the launch short) rather than one by one."""
    from mpi4py import MPI
    raw = os.environ.get("NEURON_MPI_TEST_BATCH")
    if raw is not None:
        return raw == "1"
    return MPI.COMM_WORLD.Get_size() > 8
