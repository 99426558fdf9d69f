"""The environment variables neuron_mpi reads, parsed in one place.

No other module of the package reads ``os.environ`` (tests/test_env.py greps the
source so that it stays true). Every reader raises an error naming the variable when
its value is malformed (never a silent default): InvalidArgumentError, or
TopologyError for the three that describe the topology (as a bad ``--lnc`` does).
``VARIABLES`` lists what is read; docs/api.md ("Environment variables") has the
table of them.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import InvalidArgumentError, TopologyError

DEFAULT_TIMEOUT = 60.0
DEFAULT_TRACE_DEPTH = 256
TRANSPORTS = ("auto", "mpi")
SHM_DOMAINS = ("host", "node")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

#: every NEURON_* variable the package reads (the setting's reader in brackets)
VARIABLES = {
    "NEURON_MPI_INSTANCE": "instance()",
    "NEURON_LOGICAL_NC_CONFIG": "lnc()",
    "NEURON_MPI_NODES": "nodes()",
    "NEURON_MPI_ALGO": "algorithm()",
    "NEURON_MPI_TIMEOUT": "timeout_seconds()",
    "NEURON_MPI_CHECK": "checking()",
    "NEURON_MPI_STRICT": "strict_groups()",
    "NEURON_MPI_TRANSPORT": "transport()",
    "NEURON_MPI_SHM": "shm_domain()",
    "NEURON_MPI_SHM_SLOTS": "shm_slots()",
    "NEURON_MPI_SHM_SLOT_KIB": "shm_slot_kib()",
    "NEURON_MPI_SHM_READ_KIB": "shm_read_kib()",
    "NEURON_MPI_SHM_READ_PIECE_KIB": "shm_read_piece_kib()",
    "NEURON_MPI_SHM_SPIN": "shm_spin()",
    "NEURON_MPI_TRACE": "trace_dir()",
    "NEURON_MPI_TRACE_DIR": "recorder_dir()",
    "NEURON_MPI_TRACE_DEPTH": "recorder_depth()",
    "NEURON_MPI_BENCH_CORRUPT": "bench_corrupt()",
    "NEURON_MPI_AOT": "aot()",
}

#: what MPI launchers set: a rank (Open MPI, PMIx, MPICH / Intel MPI) ...
LAUNCHER_RANK = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID")
#: ... and the marks of a launch (Open MPI, MPICH, PMIx, MVAPICH)
LAUNCHER_MARKS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")


# os.environ keeps the process's variables in ``_data``, encoded on POSIX. Looking a
# pre-encoded name up there takes 0.15 us where ``os.environ.get`` of a variable that
# is not set takes 0.7 (it encodes the key and catches a KeyError); every call reads
# three such variables
_ENV_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
_ENCODED: dict[str, bytes] = {}


def _raw(name: str) -> str | None:
    if _ENV_DATA is not None and getattr(os.environ, "_data", None) is _ENV_DATA:
        key = _ENCODED.get(name)
        if key is None:
            key = _ENCODED[name] = os.fsencode(name)
        v = _ENV_DATA.get(key)
        if v is None:
            return None
        v = os.fsdecode(v)
    else:
        v = os.environ.get(name)
    if v is None or not v.strip():
        return None
    return v.strip()


def _choice(name: str, choices, default: str) -> str:
    v = _raw(name)
    if v is None:
        return default
    if v.lower() not in choices:
        raise InvalidArgumentError(f"{name}: expected one of {', '.join(choices)}, got {v!r}")
    return v.lower()


def _flag(name: str, default: bool) -> bool:
    v = _raw(name)
    if v is None:
        return default
    if v.lower() in _TRUE:
        return True
    if v.lower() in _FALSE:
        return False
    raise InvalidArgumentError(f"{name}: expected 0 or 1, got {v!r}")


def _int(name: str, positive: bool, error=InvalidArgumentError) -> int | None:
    v = _raw(name)
    if v is None:
        return None
    try:
        n = int(v)
    except ValueError:
        n = None
    if n is None or (positive and n < 1):
        what = "a positive integer" if positive else "an integer"
        raise error(f"{name}: expected {what}, got {v!r}")
    return n


def _positive_int(name: str, default: int) -> int:
    n = _int(name, True)
    return default if n is None else n


def _nonnegative_int(name: str, default: int) -> int:
    n = _int(name, False)
    if n is not None and n < 0:
        raise InvalidArgumentError(f"{name}: expected an integer >= 0, got {_raw(name)!r}")
    return default if n is None else n


# --- the topology: arguments win over these (topology.resolve) -------------------------
def instance() -> str | None:
    """NEURON_MPI_INSTANCE: the instance type (a catalog name, checked there; default
    trn2.48xlarge). neuron-mpirun sets it for its ranks."""
    return _raw("NEURON_MPI_INSTANCE")


def lnc() -> int | None:
    """NEURON_LOGICAL_NC_CONFIG: physical cores per rank, 1 or 2 (the Neuron runtime's
    own variable; default the instance's LNC). TopologyError when not an integer."""
    return _int("NEURON_LOGICAL_NC_CONFIG", False, TopologyError)


def nodes() -> int | None:
    """NEURON_MPI_NODES: instances joined by EFA (default: what the world size needs).
    TopologyError when not an integer."""
    return _int("NEURON_MPI_NODES", False, TopologyError)


def algorithm() -> str | None:
    """NEURON_MPI_ALGO: a preferred algorithm (algorithms/select.py checks the name and
    falls back to the default where it does not apply); unset: chosen per call."""
    return _raw("NEURON_MPI_ALGO")


# --- calls --------------------------------------------------------------------------
def timeout_seconds(explicit=None) -> float | None:
    """Seconds one call may take: ``explicit`` (a ``timeout=`` argument), else
    NEURON_MPI_TIMEOUT, else DEFAULT_TIMEOUT; None (no deadline) for 0 or less."""
    if explicit is None:
        raw = _raw("NEURON_MPI_TIMEOUT")
        if raw is None:
            explicit = DEFAULT_TIMEOUT
        else:
            try:
                explicit = float(raw)
            except ValueError:
                raise InvalidArgumentError(
                    f"NEURON_MPI_TIMEOUT: expected seconds, got {raw!r}") from None
    if isinstance(explicit, bool) or not isinstance(explicit, (int, float)):
        raise InvalidArgumentError(f"timeout: expected seconds (a number), got {explicit!r}")
    return float(explicit) if explicit > 0 else None


def checking() -> bool:
    """NEURON_MPI_CHECK: the argument agreement before every collective (default 1;
    0, off, no, false turn it off). Read at every call."""
    return _flag("NEURON_MPI_CHECK", True)


_PER_CALL = ("NEURON_MPI_ALGO", "NEURON_MPI_TIMEOUT", "NEURON_MPI_CHECK")
_PER_CALL_KEYS = tuple(os.fsencode(n) for n in _PER_CALL)
_BAD = object()  # a value that does not parse: the reader raises its error again
_per_call: dict = {}  # the three raw values -> (algorithm(), timeout_seconds(), checking())


def per_call_key() -> tuple:
    """The raw values of the variables every collective reads at every call (as
    found, unparsed): what per_call's result depends on besides its argument."""
    d = _ENV_DATA
    if d is not None and getattr(os.environ, "_data", None) is d:
        a, t, c = _PER_CALL_KEYS
        return (d.get(a), d.get(t), d.get(c))
    return tuple(os.environ.get(n) for n in _PER_CALL)


def per_call(timeout=None, key=None) -> tuple:
    """What every collective reads at every call, in one look at the environment:
    ``(algorithm(), timeout_seconds(timeout), checking())``, raising what they
    raise, in that order. The parsing is kept per set of raw values (a small call
    spends more on reading its settings one by one than on its data). ``key``: the
    caller's per_call_key(), when it has just read it."""
    if key is None:
        key = per_call_key()
    got = _per_call.get(key)
    if got is None:
        got = (algorithm(), _parsed(timeout_seconds), _parsed(checking))
        if len(_per_call) > 16:
            _per_call.clear()
        _per_call[key] = got
    algo, seconds, check = got
    if timeout is not None or seconds is _BAD:
        seconds = timeout_seconds(timeout)
    if check is _BAD:
        checking()
    return algo, seconds, check


def _parsed(read):
    try:
        return read()
    except InvalidArgumentError:
        return _BAD


def strict_groups() -> bool:
    """NEURON_MPI_STRICT: whether the front-ends (neuron_mpi.torch, neuron_mpi.mpi)
    hold groups to the instance's rules, as ``init(strict=True)`` (default on); 0
    accepts any group, e.g. 5 ranks (``init(strict=False)``)."""
    return _flag("NEURON_MPI_STRICT", True)


# --- the transport ------------------------------------------------------------------
def transport() -> str:
    """NEURON_MPI_TRANSPORT: "auto" (shared memory between ranks of one domain, MPI
    between domains; the default) or "mpi" (MPI for every hop)."""
    return _choice("NEURON_MPI_TRANSPORT", TRANSPORTS, "auto")


def shm_domain() -> str:
    """NEURON_MPI_SHM: what shares one shared-memory segment: "host" (every rank on
    the machine; the default) or "node" (the ranks of one emulated node, so the hops
    between emulated nodes go over MPI as they would between hosts)."""
    return _choice("NEURON_MPI_SHM", SHM_DOMAINS, "host")


def shm_slots() -> int:
    """NEURON_MPI_SHM_SLOTS: landing slots per channel (default 8)."""
    return _positive_int("NEURON_MPI_SHM_SLOTS", 8)


def shm_slot_kib() -> int:
    """NEURON_MPI_SHM_SLOT_KIB: bytes per landing slot, in KiB (default 256); also
    the piece size large transfers are cut into, on every transport."""
    return _positive_int("NEURON_MPI_SHM_SLOT_KIB", 256)


def shm_read_kib() -> int:
    """NEURON_MPI_SHM_READ_KIB: pieces of at least this many KiB that the receiver
    copies (not reduces) it reads straight from the sender's buffer, one copy
    instead of two through a slot (process_vm_readv); 0: never (default 64)."""
    return _nonnegative_int("NEURON_MPI_SHM_READ_KIB", 64)


def shm_read_piece_kib() -> int:
    """NEURON_MPI_SHM_READ_PIECE_KIB: the piece size, in KiB, of a transfer whose
    receiver copies it (does not reduce it) and shares the sender's domain, where
    every rank of the domain reads pieces from their senders' buffers: such pieces
    take no landing-slot space, so they need not be cut at the slot size (default
    4096; at most the slot size: cut at the slot size)."""
    return _positive_int("NEURON_MPI_SHM_READ_PIECE_KIB", 4096)


def shm_spin() -> int:
    """NEURON_MPI_SHM_SPIN: how many times a waiting compiled run yields the CPU
    (sched_yield) and looks at its doorbell again before it sleeps on it; a piece
    that comes meanwhile costs no futex wake-up; 0: sleep at once (default 64)."""
    return _nonnegative_int("NEURON_MPI_SHM_SPIN", 64)


# --- what is recorded -------------------------------------------------------------------
def trace_dir() -> str | None:
    """NEURON_MPI_TRACE: the folder each rank writes its timeline to
    (neuron_mpi.tracing); unset or empty: no tracing."""
    return _raw("NEURON_MPI_TRACE")


def recorder_dir() -> str | None:
    """NEURON_MPI_TRACE_DIR: the folder each rank dumps its flight recorder to on a
    timeout or error (neuron_mpi.recorder); unset: no dump."""
    return _raw("NEURON_MPI_TRACE_DIR")


def recorder_depth() -> int:
    """NEURON_MPI_TRACE_DEPTH: calls the flight recorder keeps (default 256)."""
    return _positive_int("NEURON_MPI_TRACE_DEPTH", DEFAULT_TRACE_DEPTH)


def bench_corrupt() -> bool:
    """NEURON_MPI_BENCH_CORRUPT: the benchmark flips a byte of rank 0's checked
    result (a test of its -c check; default 0)."""
    return _flag("NEURON_MPI_BENCH_CORRUPT", False)


# --- the launcher's and torch's variables -----------------------------------------------
def aot() -> bool:
    """NEURON_MPI_AOT (default on): load the data plane built ahead of time
    (kernels.aot) when there is one for this source; 0 compiles it with numba."""
    return _flag("NEURON_MPI_AOT", True)


def launcher_rank() -> int | None:
    """This process's rank as the MPI launcher set it (before MPI starts), else None."""
    for k in LAUNCHER_RANK:
        v = _raw(k)
        if v is not None and v.isdigit():
            return int(v)
    return None


def under_mpi_launcher() -> bool:
    """Whether an MPI launcher started this process."""
    return any(k in os.environ for k in LAUNCHER_MARKS)


def unset(names) -> list[str]:
    """The names among ``names`` that the environment does not set."""
    return [k for k in names if k not in os.environ]


def set_defaults(values: dict) -> None:
    """Set each variable that is not set yet (torch's rendezvous, for example)."""
    for k, v in values.items():
        os.environ.setdefault(k, str(v))


def numba_cache_dir() -> str | None:
    """NUMBA_CACHE_DIR: where numba keeps compiled kernels (numba reads it)."""
    return _raw("NUMBA_CACHE_DIR")


def default_numba_cache() -> str:
    """The cache neuron-mpirun gives its ranks when NUMBA_CACHE_DIR is unset:
    $XDG_CACHE_HOME (else ~/.cache)/neuron_mpi/numba."""
    base = _raw("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "neuron_mpi" / "numba")


def forwarded() -> list[str]:
    """The set variables a launch across hosts forwards (mpiexec -x): every NEURON_*
    one and NUMBA_CACHE_DIR."""
    return sorted(k for k in os.environ if k.startswith("NEURON_") or k == "NUMBA_CACHE_DIR")


def python_path() -> str:
    """PYTHONPATH as set ("" when not), for a child that must import what this
    process imports (kernels.aot.build_aside)."""
    return _raw("PYTHONPATH") or ""


def for_children(additions: dict) -> dict:
    """This process's environment with ``additions``: what a launched job gets."""
    return {**os.environ, **additions}
