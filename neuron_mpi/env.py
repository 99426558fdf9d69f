"""The environment variables neuron_mpi reads, parsed in one place.

Every reader raises InvalidArgumentError naming the variable when its value is
malformed (never a silent default).
"""
from __future__ import annotations

import os

from .errors import InvalidArgumentError

DEFAULT_TIMEOUT = 60.0
TRANSPORTS = ("auto", "mpi")
SHM_DOMAINS = ("host", "node")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str) -> str | None:
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


def trace_dir() -> str | None:
    """NEURON_MPI_TRACE: the folder each rank writes its timeline to
    (neuron_mpi.tracing); unset or empty: no tracing."""
    return _raw("NEURON_MPI_TRACE")


def checking() -> bool:
    """NEURON_MPI_CHECK: the argument agreement before every collective (default on)."""
    v = _raw("NEURON_MPI_CHECK")
    return v is None or v.lower() not in _FALSE


def transport() -> str:
    """NEURON_MPI_TRANSPORT: "auto" (shared memory between ranks of one domain, MPI
    between domains; the default) or "mpi" (MPI for every hop)."""
    return _choice("NEURON_MPI_TRANSPORT", TRANSPORTS, "auto")


def shm_domain() -> str:
    """NEURON_MPI_SHM: what shares one shared-memory segment: "host" (every rank on
    the machine; the default) or "node" (the ranks of one emulated node, so the hops
    between emulated nodes go over MPI as they would between hosts)."""
    return _choice("NEURON_MPI_SHM", SHM_DOMAINS, "host")


def _positive_int(name: str, default: int) -> int:
    v = _raw(name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise InvalidArgumentError(f"{name}: expected a positive integer, got {v!r}")
    return n


def shm_slots() -> int:
    """NEURON_MPI_SHM_SLOTS: landing slots per channel (default 8)."""
    return _positive_int("NEURON_MPI_SHM_SLOTS", 8)


def shm_slot_kib() -> int:
    """NEURON_MPI_SHM_SLOT_KIB: bytes per landing slot, in KiB (default 256); also
    the piece size large transfers are cut into, on every transport."""
    return _positive_int("NEURON_MPI_SHM_SLOT_KIB", 256)


def strict_groups() -> bool:
    """NEURON_MPI_STRICT: whether the front-ends (neuron_mpi.torch, neuron_mpi.mpi)
    hold groups to the instance's rules, as ``init(strict=True)`` (default on); 0
    accepts any group, e.g. 5 ranks (``init(strict=False)``)."""
    v = _raw("NEURON_MPI_STRICT")
    if v is None or v.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if v.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise InvalidArgumentError(f"NEURON_MPI_STRICT: expected 0 or 1, got {v!r}")
