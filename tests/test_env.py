"""neuron_mpi.env: every variable the package reads, parsed in one module; a malformed
value raises an error naming the variable."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from neuron_mpi import env
from neuron_mpi.errors import InvalidArgumentError, TopologyError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "neuron_mpi"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for k in list(env.VARIABLES) + list(env.LAUNCHER_RANK) + list(env.LAUNCHER_MARKS) + [
            "NUMBA_CACHE_DIR", "XDG_CACHE_HOME"]:
        monkeypatch.delenv(k, raising=False)


# (reader, variable, its default, a valid value and what it reads as, a malformed value,
#  the error class)
CASES = [
    (env.instance, "NEURON_MPI_INSTANCE", None, ("trn1.32xlarge", "trn1.32xlarge"), None,
     None),
    (env.lnc, "NEURON_LOGICAL_NC_CONFIG", None, ("1", 1), "two", TopologyError),
    (env.nodes, "NEURON_MPI_NODES", None, (" 4 ", 4), "many", TopologyError),
    (env.algorithm, "NEURON_MPI_ALGO", None, ("mesh", "mesh"), None, None),
    (env.timeout_seconds, "NEURON_MPI_TIMEOUT", 60.0, ("7.5", 7.5), "never",
     InvalidArgumentError),
    (env.checking, "NEURON_MPI_CHECK", True, ("off", False), "maybe", InvalidArgumentError),
    (env.strict_groups, "NEURON_MPI_STRICT", True, ("0", False), "2", InvalidArgumentError),
    (env.transport, "NEURON_MPI_TRANSPORT", "auto", ("MPI", "mpi"), "tcp",
     InvalidArgumentError),
    (env.shm_domain, "NEURON_MPI_SHM", "host", ("node", "node"), "chip",
     InvalidArgumentError),
    (env.shm_slots, "NEURON_MPI_SHM_SLOTS", 8, ("16", 16), "0", InvalidArgumentError),
    (env.shm_slot_kib, "NEURON_MPI_SHM_SLOT_KIB", 256, ("64", 64), "1.5",
     InvalidArgumentError),
    (env.shm_read_kib, "NEURON_MPI_SHM_READ_KIB", 64, ("0", 0), "-1", InvalidArgumentError),
    (env.shm_read_piece_kib, "NEURON_MPI_SHM_READ_PIECE_KIB", 4096, ("1024", 1024), "0",
     InvalidArgumentError),
    (env.shm_spin, "NEURON_MPI_SHM_SPIN", 64, ("0", 0), "-3", InvalidArgumentError),
    (env.trace_dir, "NEURON_MPI_TRACE", None, ("/tmp/t", "/tmp/t"), None, None),
    (env.recorder_dir, "NEURON_MPI_TRACE_DIR", None, ("/tmp/r", "/tmp/r"), None, None),
    (env.recorder_depth, "NEURON_MPI_TRACE_DEPTH", 256, ("32", 32), "deep",
     InvalidArgumentError),
    (env.bench_corrupt, "NEURON_MPI_BENCH_CORRUPT", False, ("1", True), "yes please",
     InvalidArgumentError),
    (env.aot, "NEURON_MPI_AOT", True, ("0", False), "maybe", InvalidArgumentError),
]
IDS = [c[1] for c in CASES]


def test_every_variable_has_a_case():
    assert sorted(IDS) == sorted(env.VARIABLES)


@pytest.mark.parametrize("reader,name,default,valid,bad,error", CASES, ids=IDS)
def test_default(monkeypatch, reader, name, default, valid, bad, error):
    assert reader() == default
    monkeypatch.setenv(name, "  ")  # empty counts as unset
    assert reader() == default


@pytest.mark.parametrize("reader,name,default,valid,bad,error", CASES, ids=IDS)
def test_valid_value(monkeypatch, reader, name, default, valid, bad, error):
    monkeypatch.setenv(name, valid[0])
    assert reader() == valid[1]


@pytest.mark.parametrize("reader,name,default,valid,bad,error",
                         [c for c in CASES if c[4] is not None],
                         ids=[c[1] for c in CASES if c[4] is not None])
def test_malformed_value_names_the_variable(monkeypatch, reader, name, default, valid, bad,
                                            error):
    monkeypatch.setenv(name, bad)
    with pytest.raises(error) as info:
        reader()
    assert str(info.value).startswith(f"{name}: expected ")
    assert repr(bad) in str(info.value)


def test_timeout_argument_wins(monkeypatch):
    monkeypatch.setenv("NEURON_MPI_TIMEOUT", "7.5")
    assert env.timeout_seconds(2) == 2.0
    assert env.timeout_seconds(0) is None
    with pytest.raises(InvalidArgumentError, match="^timeout: expected seconds"):
        env.timeout_seconds("soon")


def test_values_are_read_at_every_call_whatever_holds_the_environment(monkeypatch):
    """The readers look names up in os.environ's own dict (a faster path), so a
    value set, changed or removed after import is seen at the next call, non-ASCII
    values decode as os.environ gives them, and an os.environ replaced by another
    mapping is still what is read."""
    import os

    monkeypatch.setenv("NEURON_MPI_TRACE", "/tmp/één")
    assert env.trace_dir() == "/tmp/één"
    monkeypatch.setenv("NEURON_MPI_TRACE", "/tmp/other")
    assert env.trace_dir() == "/tmp/other"
    monkeypatch.delenv("NEURON_MPI_TRACE")
    assert env.trace_dir() is None
    monkeypatch.setattr(os, "environ", {"NEURON_MPI_ALGO": "ring"})
    assert env.algorithm() == "ring"
    assert env.trace_dir() is None


def test_per_call_settings_follow_the_environment_at_every_call(monkeypatch):
    """env.per_call (what every collective reads) keeps its parsing per set of raw
    values: a change is seen at the next call, a bad value raises at every call, in
    the readers' order, and a timeout argument wins over a bad NEURON_MPI_TIMEOUT."""
    import os

    for name in ("NEURON_MPI_ALGO", "NEURON_MPI_TIMEOUT", "NEURON_MPI_CHECK"):
        monkeypatch.delenv(name, raising=False)
    assert env.per_call() == (None, env.DEFAULT_TIMEOUT, True)
    monkeypatch.setenv("NEURON_MPI_ALGO", "ring")
    monkeypatch.setenv("NEURON_MPI_TIMEOUT", "0")
    assert env.per_call() == ("ring", None, True)
    assert env.per_call(3) == ("ring", 3.0, True)
    monkeypatch.setenv("NEURON_MPI_CHECK", "off")
    assert env.per_call() == ("ring", None, False)
    monkeypatch.setenv("NEURON_MPI_TIMEOUT", "never")
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="^NEURON_MPI_TIMEOUT: expected"):
            env.per_call()
    assert env.per_call(2) == ("ring", 2.0, False)
    monkeypatch.setenv("NEURON_MPI_CHECK", "maybe")
    with pytest.raises(InvalidArgumentError, match="^NEURON_MPI_TIMEOUT: expected"):
        env.per_call()
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="^NEURON_MPI_CHECK: expected"):
            env.per_call(1)
    with pytest.raises(InvalidArgumentError, match="^timeout: expected seconds"):
        env.per_call("soon")
    monkeypatch.setattr(os, "environ", {"NEURON_MPI_ALGO": "mesh"})
    assert env.per_call() == ("mesh", env.DEFAULT_TIMEOUT, True)


def test_topology_reads_the_environment(monkeypatch):
    from neuron_mpi.topology import resolve

    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn1.32xlarge")
    monkeypatch.setenv("NEURON_MPI_NODES", "2")
    assert resolve() == ("trn1.32xlarge", 1, 2)
    assert resolve("trn2.48xlarge", 1, 1) == ("trn2.48xlarge", 1, 1)


def test_flight_recorder_depth(monkeypatch):
    from neuron_mpi.recorder import FlightRecorder

    monkeypatch.setenv("NEURON_MPI_TRACE_DEPTH", "3")
    assert FlightRecorder(0).entries.maxlen == 3
    monkeypatch.setenv("NEURON_MPI_TRACE_DEPTH", "-1")
    with pytest.raises(InvalidArgumentError, match="^NEURON_MPI_TRACE_DEPTH: expected a "
                                                   "positive integer, got '-1'"):
        FlightRecorder(0)


def test_launcher_variables(monkeypatch):
    assert env.launcher_rank() is None and not env.under_mpi_launcher()
    monkeypatch.setenv("PMI_RANK", "x")  # not a rank: ignored
    monkeypatch.setenv("PMIX_RANK", "5")
    assert env.launcher_rank() == 5 and env.under_mpi_launcher()
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert env.launcher_rank() == 3


def test_launch_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert env.default_numba_cache() == str(tmp_path / "neuron_mpi" / "numba")
    assert env.numba_cache_dir() is None
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/tmp/nc")
    monkeypatch.setenv("NEURON_MPI_ALGO", "ring")
    assert {"NUMBA_CACHE_DIR", "NEURON_MPI_ALGO"} <= set(env.forwarded())
    children = env.for_children({"NEURON_MPI_NODES": "1"})
    assert children["NEURON_MPI_NODES"] == "1" and children["NEURON_MPI_ALGO"] == "ring"
    assert env.unset(("NEURON_MPI_ALGO", "NEURON_MPI_NODES")) == ["NEURON_MPI_NODES"]
    monkeypatch.setenv("NEURON_MPI_NODES", "7")
    env.set_defaults({"NEURON_MPI_NODES": 2})  # set already: kept
    assert env.nodes() == 7


# --- it stays one module ------------------------------------------------------------------
_READS = re.compile(r"\bos\.environ\b|\bgetenv\b|\bputenv\b|\bfrom os import\b.*\benviron\b")


def test_only_env_reads_the_environment():
    """No module of the package but env.py touches os.environ / getenv: a new setting
    gets a reader in env.py (with its error and docs) instead."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "env.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _READS.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "read the environment through neuron_mpi.env:\n" + "\n".join(
        offenders)


def test_every_variable_is_documented_once():
    """docs/api.md's table of variables has a row for each variable env.py reads, and
    no other."""
    text = (ROOT / "docs" / "api.md").read_text()
    rows = re.findall(r"^\| `(NEURON_[A-Z_]+)`", text, re.M)
    assert sorted(rows) == sorted(env.VARIABLES)
