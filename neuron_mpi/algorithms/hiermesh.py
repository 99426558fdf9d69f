"""hier-mesh: the hierarchical composition with mesh stages
(internode-collective-comm.rst, "Hierarchical Algorithm": the runtime picks a
sub-algorithm per stage, "small groups + sizes can go to intra-node Mesh +
inter-node Mesh"). All-reduce = in-node mesh reduce-scatter, inter-node mesh
all-reduce among the ranks sharing a local index, in-node mesh all-gather;
all-gather runs inter-node first, reduce-scatter in-node first, as in
``hierarchical`` (whose stages are rings). Six rounds for an all-reduce over two
trn1.32xlarge nodes, where the ring stages take 64.

Default for the groups ``hierarchical`` takes, below 1 MiB: the in-node summary's
Mesh bound ("< 1MB", intranode-collective-comm.rst), which mesh.py uses on one node."""
from __future__ import annotations

from . import hierarchical, levels
from .rdh import MESH_BELOW
from .registry import Algorithm


def prefer(op, view, nbytes):
    if len(view.by_node[0]) < 2 or nbytes is None or nbytes >= MESH_BELOW:
        return None
    return ("several ranks per node on several nodes, buffer < 1 MiB: hierarchical with "
            "mesh stages (internode-collective-comm.rst: 'intra-node Mesh + inter-node "
            "Mesh' for small sizes; intranode summary: Mesh '< 1MB')")


ALGORITHM = Algorithm(
    name="hier-mesh", summary="hierarchical with mesh stages: intra-node mesh "
    "reduce-scatter, inter-node mesh, intra-node mesh all-gather",
    ops=("all_reduce", "reduce_scatter", "all_gather"),
    build=lambda op, view, sizes, avg=False, extra=None: levels.build_mesh(
        view, op, sizes, avg, "hier-mesh", view.by_node),
    applies=hierarchical.applies, prefer=prefer, priority=9)
