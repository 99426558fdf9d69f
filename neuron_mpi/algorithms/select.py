"""Which algorithm runs an operation on a group, and the schedule cache.

Everything here is read from the registry (registry.py; one file per algorithm):
the default is the first algorithm, in priority order, that applies to the group
and whose ``prefer`` rule (the runtime's, with its source) takes the call; the
fallbacks (ring, direct) always take it. docs/algorithms.md has the table.

``algorithm=`` or NEURON_MPI_ALGO forces one; a forced ``algorithm=`` that does not
apply raises AlgorithmError naming it and why; NEURON_MPI_ALGO is a preference that
falls back to the default where it does not apply, but an unknown name is an error.
"""
from __future__ import annotations

import functools

from .. import env
from ..errors import AlgorithmError
from . import registry
from .registry import OPS

ALGORITHMS = registry.names()  # index = fingerprint code (agree.py)
_APPLIES = {op: registry.applies_to(op) for op in OPS}


def explain(op: str, view, nbytes: int | None = None) -> tuple[str, str]:
    """(default algorithm, the rule that picked it, with its source)."""
    return _explain(op, view, nbytes)


@functools.lru_cache(maxsize=1024)
def _explain(op: str, view, nbytes: int | None) -> tuple[str, str]:
    # the registry's rules depend on nothing else, and every call asks
    for algo in registry.algorithms():
        if algo.reason(op, view) is None:
            why = algo.prefer(op, view, nbytes)
            if why:
                return algo.name, why
    raise AssertionError(f"no algorithm takes {op}")  # ring/direct always do


def default_algorithm(op: str, view, nbytes: int | None = None) -> str:
    """nbytes: the collective's buffer size (all-gather: its output), as nccom-test
    counts it."""
    return explain(op, view, nbytes)[0]


def choose(op: str, view, algorithm=None, nbytes: int | None = None) -> str:
    """The algorithm to run: forced (argument, else NEURON_MPI_ALGO) or default."""
    forced = algorithm if algorithm is not None else env.algorithm()
    if forced is None:
        return _explain(op, view, nbytes)[0]
    source = "algorithm" if algorithm is not None else "NEURON_MPI_ALGO"
    algo = registry.get(forced) if isinstance(forced, str) else None  # (may be unhashable)
    if algo is None:
        raise AlgorithmError(f"{source}: unknown algorithm {forced!r}; known: "
                             + ", ".join(ALGORITHMS))
    if op not in algo.ops:
        if algorithm is None:  # env var: a global preference, fall back quietly
            return default_algorithm(op, view, nbytes)
        raise AlgorithmError(f"{source}: {forced!r} does not apply to {op}; it takes "
                             + ", ".join(_APPLIES[op]))
    why = algo.reason(op, view)
    if why is not None:
        raise AlgorithmError(f"{source}: {forced!r} {why}")
    return forced


@functools.lru_cache(maxsize=32)
def schedule_for(view, op: str, algorithm: str, sizes, avg: bool = False, extra=None):
    """Build (once) the schedule of ``op`` with ``algorithm``.

    sizes: all_reduce/permute/broadcast: element count; *_scatter*/all_gather*:
    per-member element counts; all_to_all*: the count matrix (tuple of tuples).
    extra: permute pairs (tuple) or broadcast root.
    """
    return registry.get(algorithm).build(op, view, sizes, avg, extra)
