"""Which algorithm runs an operation on a group, and the schedule cache.

Defaults (docs/algorithms.md):
  all_reduce, all_gather, reduce_scatter (and the -v forms):
      members on several nodes, the same local indices on each -> "hierarchical"
      (intra-node reduce-scatter, inter-node ring among ranks sharing a local index
      over EFA, intra-node all-gather; all-gather inter-node first; reduce-scatter
      intra-node first; -v forms use "ring");
      otherwise -> "ring" (both edge-disjoint Hamiltonian cycles of a full torus,
      half the buffer on each; one ring elsewhere).
  all_to_all, all_to_all_v, permute, barrier -> "direct" (routed point-to-point).
  broadcast -> "ring" (a pipelined chain along the ring from the root).
``algorithm=`` or NEURON_MPI_ALGO forces one; a forced algorithm that does not apply
raises AlgorithmError naming it.
"""
from __future__ import annotations

import functools
import os

from ..errors import AlgorithmError
from . import build

ALGORITHMS = ("ring", "mesh", "chip", "hierarchical", "direct")

_APPLIES = {
    "all_reduce": ("ring", "mesh", "chip", "hierarchical"),
    "reduce_scatter": ("ring", "mesh", "chip", "hierarchical"),
    "all_gather": ("ring", "mesh", "chip", "hierarchical"),
    "reduce_scatter_v": ("ring", "mesh"),
    "all_gather_v": ("ring", "mesh"),
    "all_to_all": ("direct",),
    "all_to_all_v": ("direct",),
    "permute": ("direct",),
    "broadcast": ("ring", "direct"),
    "barrier": ("direct",),
}
OPS = tuple(_APPLIES)


def default_algorithm(op: str, view) -> str:
    if op in ("all_reduce", "all_gather", "reduce_scatter") and view.node_symmetric:
        return "hierarchical"
    return _APPLIES[op][0]


def choose(op: str, view, algorithm=None) -> str:
    """The algorithm to run: forced (argument, else NEURON_MPI_ALGO) or default."""
    forced = algorithm if algorithm is not None else (os.environ.get("NEURON_MPI_ALGO") or None)
    if forced is None:
        return default_algorithm(op, view)
    source = "algorithm" if algorithm is not None else "NEURON_MPI_ALGO"
    if forced not in ALGORITHMS:
        raise AlgorithmError(f"{source}: unknown algorithm {forced!r}; known: "
                             + ", ".join(ALGORITHMS))
    if forced not in _APPLIES[op]:
        if algorithm is None:  # env var: a global preference, fall back quietly
            return default_algorithm(op, view)
        raise AlgorithmError(f"{source}: {forced!r} does not apply to {op}; it takes "
                             + ", ".join(_APPLIES[op]))
    if forced == "hierarchical" and not view.node_symmetric:
        raise AlgorithmError(
            f"{source}: 'hierarchical' needs members on at least 2 nodes with the same "
            f"local indices on each; this group of {view.size} is not")
    if forced == "chip" and not view.chip_symmetric:
        raise AlgorithmError(
            f"{source}: 'chip' needs members on at least 2 chips with the same number "
            f"(at least 2) on each chip; this group of {view.size} is not")
    return forced


@functools.lru_cache(maxsize=256)
def schedule_for(view, op: str, algorithm: str, sizes, avg: bool = False, extra=None):
    """Build (once) the schedule of ``op`` with ``algorithm``.

    sizes: all_reduce/permute/broadcast: element count; *_scatter*/all_gather*:
    per-member element counts; all_to_all*: the count matrix (tuple of tuples).
    extra: permute pairs (tuple) or broadcast root.
    """
    if op == "all_reduce":
        return build.all_reduce(view, sizes, algorithm, avg)
    if op in ("reduce_scatter", "reduce_scatter_v"):
        return build.reduce_scatter(view, list(sizes), algorithm, avg, op=op)
    if op in ("all_gather", "all_gather_v"):
        return build.all_gather(view, list(sizes), algorithm, op=op)
    if op in ("all_to_all", "all_to_all_v"):
        return build.all_to_all(view, [list(r) for r in sizes], algorithm, op=op)
    if op == "permute":
        return build.permute(view, sizes, list(extra), algorithm)
    if op == "broadcast":
        return build.broadcast(view, sizes, extra, algorithm)
    if op == "barrier":
        return build.barrier(view, algorithm)
    raise AssertionError(op)
