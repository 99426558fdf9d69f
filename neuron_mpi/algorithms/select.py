"""Which algorithm runs an operation on a group, and the schedule cache.

Defaults (docs/algorithms.md):
  all_reduce, all_gather, reduce_scatter:
      members on several nodes, the same local indices on each -> "hierarchical"
      (intra-node reduce-scatter, inter-node ring among ranks sharing a local index
      over EFA, intra-node all-gather; all-gather inter-node first; reduce-scatter
      intra-node first);
      on one trn2 node, by message size as the Neuron runtime does on Trn2: "mesh"
      below 1 MB, "rdh" from 1 MB to 56 MB (where it applies: a power-of-two number
      of chips with the same number of members each), "ring" above (KangaRing's
      place: both edge-disjoint Hamiltonian cycles of a full torus);
      elsewhere (trn1, inf2, trn2 groups rdh does not fit) -> "ring".
  all_gather_v, reduce_scatter_v -> "ring".
  all_to_all, all_to_all_v, permute, barrier -> "direct" (routed point-to-point).
  broadcast -> "ring" (a pipelined chain along the ring from the root).
``algorithm=`` or NEURON_MPI_ALGO forces one; a forced algorithm that does not apply
raises AlgorithmError naming it.
"""
from __future__ import annotations

import functools
import os

from ..errors import AlgorithmError
from . import build, rooted

ALGORITHMS = ("ring", "mesh", "chip", "rdh", "hierarchical", "direct")
MESH_BELOW = 1 << 20  # bytes: Trn2 runtime selection
RDH_UP_TO = 56 << 20

_APPLIES = {
    "all_reduce": ("ring", "mesh", "chip", "rdh", "hierarchical"),
    "reduce_scatter": ("ring", "mesh", "chip", "rdh", "hierarchical"),
    "all_gather": ("ring", "mesh", "chip", "rdh", "hierarchical"),
    "reduce_scatter_v": ("ring", "mesh"),
    "all_gather_v": ("ring", "mesh"),
    "all_to_all": ("direct",),
    "all_to_all_v": ("direct",),
    "permute": ("direct",),
    "broadcast": ("ring", "direct"),
    "barrier": ("direct",),
}
_APPLIES.update(rooted.APPLIES)  # reduce, gather, scatter, scan, exscan
OPS = tuple(_APPLIES)


def default_algorithm(op: str, view, nbytes: int | None = None) -> str:
    """nbytes: the collective's buffer size (all-gather: its output), as nccom-test
    counts it."""
    if op in ("all_reduce", "all_gather", "reduce_scatter"):
        if view.node_symmetric:
            return "hierarchical"
        if view.topo.spec.family == "trn2" and view.size > 1 and nbytes is not None:
            if nbytes < MESH_BELOW:
                return "mesh"
            if nbytes <= RDH_UP_TO and view.rdh_ok:
                return "rdh"
    return _APPLIES[op][0]


def choose(op: str, view, algorithm=None, nbytes: int | None = None) -> str:
    """The algorithm to run: forced (argument, else NEURON_MPI_ALGO) or default."""
    forced = algorithm if algorithm is not None else (os.environ.get("NEURON_MPI_ALGO") or None)
    if forced is None:
        return default_algorithm(op, view, nbytes)
    source = "algorithm" if algorithm is not None else "NEURON_MPI_ALGO"
    if forced not in ALGORITHMS:
        raise AlgorithmError(f"{source}: unknown algorithm {forced!r}; known: "
                             + ", ".join(ALGORITHMS))
    if forced not in _APPLIES[op]:
        if algorithm is None:  # env var: a global preference, fall back quietly
            return default_algorithm(op, view, nbytes)
        raise AlgorithmError(f"{source}: {forced!r} does not apply to {op}; it takes "
                             + ", ".join(_APPLIES[op]))
    if forced == "hierarchical" and not view.node_symmetric:
        raise AlgorithmError(
            f"{source}: 'hierarchical' needs members on at least 2 nodes with the same "
            f"local indices on each; this group of {view.size} is not")
    if forced == "rdh" and not view.rdh_ok:
        raise AlgorithmError(
            f"{source}: 'rdh' needs members on one node, on a power-of-two number of "
            f"chips (at least 2) with the same number on each; this group of {view.size} "
            "is not")
    if forced == "chip" and not view.chip_symmetric:
        raise AlgorithmError(
            f"{source}: 'chip' needs members on at least 2 chips with the same number "
            f"(at least 2) on each chip; this group of {view.size} is not")
    return forced


@functools.lru_cache(maxsize=32)
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
    if op in rooted.OPS:
        return rooted.build(view, op, sizes, avg, extra)
    raise AssertionError(op)
