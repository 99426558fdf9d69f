"""GroupView: what algorithms need to know of a group's place on the topology.

Pure: built from a Topology and the group's world ranks (group index i is world
rank ``ranks[i]``). Rings are lists of group indices by ring position.
"""
from __future__ import annotations

import functools

from ..topology import Topology


class GroupView:
    def __init__(self, topo: Topology, ranks):
        self.topo = topo
        self.ranks = tuple(ranks)
        self.size = len(self.ranks)
        self.index = {r: i for i, r in enumerate(self.ranks)}

    @functools.cached_property
    def is_world(self) -> bool:
        return self.ranks == tuple(range(self.topo.size))

    @functools.cached_property
    def _node_ring_pos(self) -> dict[int, int]:
        """Position of each in-node rank index on the node's first ring."""
        one = self.topo if self.topo.nodes == 1 else Topology(
            self.topo.instance, self.topo.lnc, 1)
        return {r: i for i, r in enumerate(one.rings[0])} if one.rings else {}

    def _ring_key(self, g: int):
        r = self.ranks[g]
        p = self.topo.placement(r)
        local = r - p.node * self.topo.ranks_per_node
        return (p.node, self._node_ring_pos.get(local, local))

    @functools.cached_property
    def rings(self) -> list[list[int]]:
        """Rings over the members: every topology ring for the whole world (two on a
        full torus), else one ring visiting members in the first ring's order."""
        if self.is_world and self.topo.rings:
            return [[self.index[r] for r in ring] for ring in self.topo.rings]
        return [sorted(range(self.size), key=self._ring_key)]

    def _locals_by(self, key) -> list[list[int]]:
        groups: dict = {}
        for g in sorted(range(self.size), key=self._ring_key):
            groups.setdefault(key(self.topo.placement(self.ranks[g])), []).append(g)
        return list(groups.values())

    @functools.cached_property
    def by_node(self) -> list[list[int]]:
        """Members per node (nodes in order), each in ring order."""
        return sorted(self._locals_by(lambda p: p.node),
                      key=lambda lg: self.topo.placement(self.ranks[lg[0]]).node)

    @functools.cached_property
    def by_chip(self) -> list[list[int]]:
        """Members per chip, chips in first-ring order, members in ring order."""
        return self._locals_by(lambda p: (p.node, p.chip))

    def symmetric(self, local_groups) -> bool:
        """Two levels apply: at least 2 local groups, all of one size >= 1, and on
        nodes the same local indices on every node."""
        if len(local_groups) < 2 or len({len(lg) for lg in local_groups}) != 1:
            return False
        return True

    @functools.cached_property
    def node_symmetric(self) -> bool:
        lgs = self.by_node
        if not self.symmetric(lgs):
            return False
        rpn = self.topo.ranks_per_node
        first = [self.ranks[g] % rpn for g in lgs[0]]
        return all([self.ranks[g] % rpn for g in lg] == first for lg in lgs)

    @functools.cached_property
    def chip_symmetric(self) -> bool:
        lgs = self.by_chip
        return self.symmetric(lgs) and len(lgs[0]) >= 2

    @functools.cached_property
    def one_per_node(self) -> bool:
        """One member on each of at least 2 nodes, at the same local index."""
        return self.node_symmetric and len(self.by_node[0]) == 1

    @functools.cached_property
    def rdh_ok(self) -> bool:
        """Recursive halving/doubling applies: one node with the same number of members
        on a power-of-two number of chips (at least 2), or one member per node on a
        power-of-two number of nodes (internode-collective-comm.rst, RDH: N = 2^p)."""
        lgs = self.by_chip
        chips = len(lgs)
        if self.one_per_node:
            return chips & (chips - 1) == 0
        return (len(self.by_node) == 1 and chips >= 2 and chips & (chips - 1) == 0
                and len({len(lg) for lg in lgs}) == 1)

    @functools.cached_property
    def whole_chips(self) -> bool:
        """Every chip the group touches has all of its ranks in the group."""
        return all(len(lg) == len(self.topo.ranks_on_chip(
            self.topo.global_chip(self.ranks[lg[0]]))) for lg in self.by_chip)
