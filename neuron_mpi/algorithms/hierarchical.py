"""hierarchical: the inter-node composition (internode-collective-comm.rst,
"Hierarchical Algorithm"). All-reduce = intra-node reduce-scatter, inter-node
all-reduce among the ranks sharing a local index, intra-node all-gather;
all-gather runs inter-node first; reduce-scatter intra-node first. Both stages run
rings here; below 1 MiB the runtime's sub-algorithms are meshes (hiermesh.py). The
in-node reducing rounds send each chunk in two slices, as the in-node Ring does
(intranode-collective-comm.rst, "Ring ReduceScatter"). They run on one ring, not on
the node's two edge-disjoint cycles as the flat Ring does: the only published rows
of this algorithm (2 x 32 trn1 ranks, nccom-test.rst 2023) at >= 32 MiB would be
priced 20-27% fast on two cycles, and are within -3%..+10% on one (docs/model.md).

Default for groups on several nodes with the same local indices and more than one
rank per node ("Communication Groups - Multiple Ranks per Node") from 1 MiB, except
trn1's flat ring for large buffers (ring.py)."""
from __future__ import annotations

from . import levels
from .registry import Algorithm
from .ring import SLICES

# The doc enables the flat ring "only on Trn1 for large message size cases" and
# gives no threshold: we pick 56 MiB, where the intra-node summary moves to the
# ring family (KangaRing "> 56MB").
FLAT_RING_FROM = 56 << 20


def applies(op, view):
    if not view.node_symmetric:
        return (f"needs members on at least 2 nodes with the same local indices on each; "
                f"this group of {view.size} is not")
    return None


def prefer(op, view, nbytes):
    if len(view.by_node[0]) < 2:
        return None  # one rank per node: the flat inter-node algorithms
    if view.topo.spec.family == "trn1" and nbytes is not None and nbytes > FLAT_RING_FROM:
        return None  # trn1's flat ring
    return ("several ranks per node on several nodes (internode-collective-comm.rst; "
            "default since collectives 2.12.22)")


ALGORITHM = Algorithm(
    name="hierarchical", summary="intra-node reduce-scatter, inter-node ring, intra-node "
    "all-gather",
    ops=("all_reduce", "reduce_scatter", "all_gather"),
    build=lambda op, view, sizes, avg=False, extra=None: levels.build(
        view, op, sizes, avg, "hierarchical", view.by_node, False, SLICES),
    applies=applies, prefer=prefer, priority=10)
