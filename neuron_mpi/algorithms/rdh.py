"""rdh: recursive doubling and halving.

intranode-collective-comm.rst, "Recursive Doubling and Halving": the 4x4 torus seen
as a 4-D hypercube. Reduce-scatter = intra-chip reduction (each local rank gets the
chunks of its inter-chip group), then recursive halving among the ranks sharing an
in-chip index; all-gather = recursive doubling, then intra-chip broadcast;
all-reduce = both. Chips are ordered by chip id, so partners i^d differ in one bit
of the chip id: on the 4x4 torus neighbours along one axis (one hop, or two).

internode-collective-comm.rst, RDH: one rank per node on N = 2^p nodes, partners
found by flipping one bit of the node index (the same code: one member per chip).
"""
from __future__ import annotations

from . import levels
from .registry import Algorithm

MESH_BELOW = 1 << 20  # bytes; intranode-collective-comm.rst summary: Mesh "< 1MB"
# intranode-collective-comm.rst summary: RDH "1-56MB" (for the 64 ranks of a
# trn2.48xlarge); the published 16-rank trn2 run (nccom-test.rst, --show-algorithm
# example) uses RDH at 2 MiB and KangaRing at 32 MiB, which a fixed 56 MB bound
# contradicts. Both agree with a bound on the chunk per rank: 56 MiB / 64 = 896 KiB
# (16 ranks: 2 MiB -> 128 KiB per rank, RDH; 32 MiB -> 2 MiB per rank, KangaRing).
RDH_CHUNK_UP_TO = (56 << 20) // 64


def in_rdh_range(view, nbytes) -> bool:
    return nbytes is not None and nbytes >= MESH_BELOW and \
        nbytes <= RDH_CHUNK_UP_TO * view.size


def _levels(view):
    return sorted(view.by_chip, key=lambda lg: view.topo.global_chip(view.ranks[lg[0]]))


def applies(op, view):
    if not view.rdh_ok:
        return (f"needs members on one node, on a power-of-two number of chips (at least "
                f"2) with the same number on each, or one member on each of a power-of-two "
                f"number of nodes; this group of {view.size} is not")
    return None


def prefer(op, view, nbytes):
    if view.topo.spec.family == "trn2" and len(view.by_node) == 1 and in_rdh_range(view, nbytes):
        return ("trn2, 1 MiB <= buffer <= 896 KiB x ranks (intranode-collective-comm.rst "
                "summary; nccom-test.rst 16-rank trn2 run)")
    if view.one_per_node and nbytes is not None and nbytes <= RDH_CHUNK_UP_TO * view.size:
        return ("one rank per node on 2^p nodes, mid-size (internode-collective-comm.rst: "
                "RDH for small-to-medium messages, medium-to-large groups)")
    return None


ALGORITHM = Algorithm(
    name="rdh", summary="recursive halving/doubling over the chip hypercube (or the "
    "nodes), intra-chip stages around it",
    ops=("all_reduce", "reduce_scatter", "all_gather"),
    build=lambda op, view, sizes, avg=False, extra=None: levels.build(
        view, op, sizes, avg, "rdh", _levels(view), True),
    applies=applies, prefer=prefer, priority=30)
