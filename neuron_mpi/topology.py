"""Topology: the catalog entry, LNC and node count turned into ranks, chips and links.

Pure data and pure functions: usable without MPI. Global chip ids are
``node * chips_per_node + chip``; ranks are ``node * ranks_per_node +
chip * ranks_per_chip + core`` (core = the logical core index on its chip).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import catalog as cat
from . import env
from .cycles import edge_disjoint_hamiltonian_cycles, layered_cycles
from .errors import TopologyError


@dataclass(frozen=True)
class Placement:
    """Where one rank lives: node, chip on the node, logical core on the chip."""

    rank: int
    node: int
    chip: int
    core: int
    coords: tuple[int, ...]

    def as_dict(self) -> dict:
        return {"rank": self.rank, "node": self.node, "chip": self.chip,
                "core": self.core, "coords": list(self.coords)}


@dataclass(frozen=True)
class Link:
    """One physical link between two global chips (a == b for intra-chip)."""

    a: int
    b: int
    kind: str
    bandwidth_GBps: float
    latency_us: float

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "kind": self.kind,
                "bandwidth_GBps": round(self.bandwidth_GBps, 3),
                "latency_us": self.latency_us}


class Topology:
    """Ranks laid out on an instance (replicated over ``nodes`` joined by EFA)."""

    def __init__(self, instance: str, lnc: int, nodes: int = 1, ranks: int | None = None):
        spec = cat.instance_spec(instance)
        if lnc not in spec.lnc_values:
            raise TopologyError(
                f"lnc: {instance} supports LNC " + " or ".join(map(str, spec.lnc_values))
                + f", got {lnc!r}")
        if not isinstance(nodes, int) or nodes < 1:
            raise TopologyError(f"nodes: expected a positive integer, got {nodes!r}")
        if nodes > 1 and spec.efa is None:
            raise TopologyError(
                f"nodes: {instance} has no EFA, so it cannot span {nodes} nodes "
                "(use 1 node, or an instance with EFA: trn1.32xlarge, trn1n.32xlarge, "
                "trn2.48xlarge, trn2u.48xlarge, trn2-ultraserver)")
        self.spec = spec
        self.instance = spec.name
        self.lnc = lnc
        self.nodes = nodes
        self.ranks_per_chip = spec.cores_per_chip // lnc
        self.chips_per_node = spec.chips
        self.ranks_per_node = self.ranks_per_chip * self.chips_per_node
        full = nodes * self.ranks_per_node
        if ranks is None:
            ranks = full
        if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1 or ranks > full:
            raise TopologyError(
                f"ranks: {nodes} x {instance} at LNC={lnc} holds 1..{full} ranks, "
                f"got {ranks!r}")
        if nodes > 1 and ranks != full:
            raise TopologyError(
                f"ranks: a job over {nodes} nodes of {instance} must fill every node "
                f"({self.ranks_per_node} ranks each, {full} in all), got {ranks}")
        self.size = ranks
        # a world smaller than a node occupies its first chips, in order
        self.chips_used = -(-min(ranks, self.ranks_per_node) // self.ranks_per_chip)
        self._placements = tuple(self._place(r) for r in range(ranks))

    # --- placement ---------------------------------------------------------------
    def _place(self, rank: int) -> Placement:
        node, local = divmod(rank, self.ranks_per_node)
        chip, core = divmod(local, self.ranks_per_chip)
        return Placement(rank, node, chip, core, self.chip_coords(chip))

    def placement(self, rank: int) -> Placement:
        return self._placements[rank]

    @property
    def placements(self) -> tuple[Placement, ...]:
        return self._placements

    def rank_of(self, node: int, chip: int, core: int) -> int:
        return node * self.ranks_per_node + chip * self.ranks_per_chip + core

    def global_chip(self, rank: int) -> int:
        p = self._placements[rank]
        return p.node * self.chips_per_node + p.chip

    def ranks_on_chip(self, gchip: int) -> list[int]:
        node, chip = divmod(gchip, self.chips_per_node)
        first = self.rank_of(node, chip, 0)
        return [r for r in range(first, first + self.ranks_per_chip) if r < self.size]

    # --- chip grid -----------------------------------------------------------------
    def chip_coords(self, chip: int) -> tuple[int, ...]:
        coords = []
        for d in reversed(self.spec.dims):
            chip, c = divmod(chip, d.size)
            coords.append(c)
        return tuple(reversed(coords))

    def chip_at(self, coords) -> int:
        chip = 0
        for d, c in zip(self.spec.dims, coords):
            chip = chip * d.size + c % d.size
        return chip

    def neighbours(self, chip: int) -> dict[str, tuple[int, ...]]:
        """Chip neighbours per dimension (all chips of the instance, wrap included)."""
        out = {}
        coords = self.chip_coords(chip)
        for i, d in enumerate(self.spec.dims):
            nb = []
            for step in (-1, 1):
                c = coords[i] + step
                if not d.wrap and not 0 <= c < d.size:
                    continue
                other = self.chip_at(coords[:i] + (c % d.size,) + coords[i + 1:])
                if other != chip and other not in nb:
                    nb.append(other)
            out[d.name] = tuple(nb)
        return out

    @functools.cached_property
    def _chip_links(self) -> dict[frozenset, cat.LinkSpec]:
        """Local chip pairs -> link spec, among the chips in use."""
        links = {}
        for chip in range(self.chips_used):
            for dname, nbs in self.neighbours(chip).items():
                spec = next(d.link for d in self.spec.dims if d.name == dname)
                for nb in nbs:
                    if nb < self.chips_used:
                        links[frozenset((chip, nb))] = spec
        return links

    def chip_degree(self, chip: int) -> int:
        return sum(1 for pair in self._chip_links if chip in pair)

    def link_between_chips(self, ga: int, gb: int) -> cat.LinkSpec | None:
        """The link joining two global chips, or None if they are not neighbours."""
        na, ca = divmod(ga, self.chips_per_node)
        nb, cb = divmod(gb, self.chips_per_node)
        if na == nb:
            if ca == cb:
                return self.spec.intra_chip
            return self._chip_links.get(frozenset((ca, cb)))
        if ca == cb:  # rail-aligned EFA: chip c of one node to chip c of another
            return self.spec.efa
        return None

    def link_between_ranks(self, a: int, b: int) -> cat.LinkSpec | None:
        return self.link_between_chips(self.global_chip(a), self.global_chip(b))

    @functools.cached_property
    def links(self) -> tuple[Link, ...]:
        out = []
        for n in range(self.nodes):
            base = n * self.chips_per_node
            if self.ranks_per_chip > 1:
                for c in range(self.chips_used):
                    s = self.spec.intra_chip
                    out.append(Link(base + c, base + c, s.kind, s.bandwidth_GBps, s.latency_us))
            for pair, s in sorted(self._chip_links.items(), key=lambda kv: sorted(kv[0])):
                a, b = sorted(pair)
                out.append(Link(base + a, base + b, s.kind, s.bandwidth_GBps, s.latency_us))
        if self.nodes > 1:
            s = self.spec.efa
            for na in range(self.nodes):
                for nb in range(na + 1, self.nodes):
                    for c in range(self.chips_used):
                        out.append(Link(na * self.chips_per_node + c,
                                        nb * self.chips_per_node + c,
                                        s.kind, s.bandwidth_GBps, s.latency_us))
        return tuple(out)

    # --- rings ---------------------------------------------------------------------
    @functools.cached_property
    def chip_cycles(self) -> tuple[tuple[int, ...], ...]:
        """Edge-disjoint Hamiltonian cycles over the chips in use on one node.

        On a full 4x4 torus there are two (both are used, each carrying half of a
        buffer); on the 4x4x4 UltraServer torus we use two as well. A single chip
        gives one trivial cycle; two chips give the cycle 0 -> 1 -> 0.
        """
        n = self.chips_used
        if n <= 2:
            return (tuple(range(n)),)
        dims = self.spec.dims
        layer = self.chips_per_node // dims[0].size if len(dims) == 3 else n
        if n > layer:  # whole layers of a 3D torus: build from the 2D layer cycles
            flat = Topology(self.instance, self.lnc, 1, ranks=layer * self.ranks_per_chip)
            cycles = layered_cycles(flat.chip_cycles, n // layer, layer) if n % layer == 0 else []
        else:
            adj = {c: sorted(nb for p in self._chip_links if c in p for nb in p if nb != c)
                   for c in range(n)}
            cycles = edge_disjoint_hamiltonian_cycles(adj, want=2)
        if not cycles:
            # no Hamiltonian cycle over the chips in use (e.g. 3 chips of a torus row):
            # one ring in the order of the full instance's cycle; the steps between
            # chips that are not neighbours are routed through chips in use
            full = Topology(self.instance, self.lnc, 1)
            return (tuple(c for c in full.chip_cycles[0] if c < n),)
        return tuple(tuple(c) for c in cycles)

    @functools.cached_property
    def rings(self) -> tuple[tuple[int, ...], ...]:
        """Rank rings: each chip cycle expanded to the ranks on its chips.

        Across nodes, nodes alternate direction so every node-to-node step joins the
        same chip index on both sides (an EFA rail link) when the node count is even.
        """
        rings = []
        for cyc in self.chip_cycles:
            order = []
            for n in range(self.nodes):
                # odd nodes walk the cycle backwards: they start on the chip where
                # the previous node ended (its last chip), so the hop is a rail link
                seq = cyc if n % 2 == 0 else tuple(reversed(cyc))
                for chip in seq:
                    order.extend(self.ranks_on_chip(n * self.chips_per_node + chip))
            rings.append(tuple(order))
        return tuple(rings)

    # --- routing -------------------------------------------------------------------
    def chip_route(self, ga: int, gb: int) -> list[int]:
        """Global chips from ga to gb, one link per step.

        Across nodes the EFA hop comes first (to the same chip index on the
        destination node), then the intra-node route. Inside a node the route is
        dimension ordered (last dimension first, the shorter way round each ring)
        when every chip on it is in use, else a shortest path over the chips in use.
        """
        na, ca = divmod(ga, self.chips_per_node)
        nb, cb = divmod(gb, self.chips_per_node)
        path = [ga]
        if na != nb:
            path.append(nb * self.chips_per_node + ca)
        base = nb * self.chips_per_node
        path.extend(base + c for c in self._local_route(ca, cb)[1:])
        return path

    @functools.lru_cache(maxsize=None)
    def _local_route(self, a: int, b: int) -> tuple[int, ...]:
        if a == b:
            return (a,)
        path = [a]
        cur = list(self.chip_coords(a))
        dst = self.chip_coords(b)
        for i in reversed(range(len(self.spec.dims))):
            d = self.spec.dims[i]
            while cur[i] != dst[i]:
                fwd = (dst[i] - cur[i]) % d.size
                step = 1 if (not d.wrap and dst[i] > cur[i]) or (d.wrap and fwd <= d.size - fwd) else -1
                cur[i] = (cur[i] + step) % d.size
                path.append(self.chip_at(cur))
        if all(c < self.chips_used for c in path):
            return tuple(path)
        return self._bfs_route(a, b)

    def _bfs_route(self, a: int, b: int) -> tuple[int, ...]:
        prev = {a: None}
        frontier = [a]
        while frontier and b not in prev:
            nxt = []
            for c in frontier:
                for p in sorted(self._chip_links, key=sorted):
                    if c in p:
                        (o,) = p - {c}
                        if o not in prev:
                            prev[o] = c
                            nxt.append(o)
            frontier = nxt
        if b not in prev:
            raise TopologyError(f"no route between chips {a} and {b}")
        path = [b]
        while path[-1] != a:
            path.append(prev[path[-1]])
        return tuple(reversed(path))

    def route(self, src: int, dst: int) -> list[int]:
        """Ranks a message from src to dst passes through, one link per step.

        On each intermediate chip the forwarding rank is the one with src's core
        index (modulo the ranks on that chip).
        """
        if src == dst:
            return [src]
        chips = self.chip_route(self.global_chip(src), self.global_chip(dst))
        core = self._placements[src].core
        out = [src]
        for g in chips[1:-1]:
            on_chip = self.ranks_on_chip(g)
            out.append(on_chip[core % len(on_chip)])
        out.append(dst)
        return out

    # --- export --------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "instance": self.instance,
            "lnc": self.lnc,
            "nodes": self.nodes,
            "ranks": [p.as_dict() for p in self._placements],
            "links": [lk.as_dict() for lk in self.links],
            "rings": [list(r) for r in self.rings],
        }

    def __repr__(self) -> str:
        return (f"Topology(instance={self.instance!r}, lnc={self.lnc}, nodes={self.nodes}, "
                f"ranks={self.size})")


def resolve(instance=None, lnc=None, nodes=None) -> tuple[str, int, int | None]:
    """Arguments, else env (NEURON_MPI_INSTANCE, NEURON_LOGICAL_NC_CONFIG,
    NEURON_MPI_NODES), else trn2.48xlarge at its default LNC. nodes may stay None
    (decided by the world size).

    The variables' LNC and nodes belong to the variables' instance: an ``instance``
    argument naming another one (a program asking for trn1.32xlarge under a
    launcher that set up trn2.48xlarge) takes its own defaults instead."""
    env_instance = env.instance()
    if instance is None:
        instance = env_instance
        if instance is None:
            instance = cat.DEFAULT_INSTANCE
        else:
            _from_env("NEURON_MPI_INSTANCE", cat.instance_spec, instance)
    spec = cat.instance_spec(instance)
    if env_instance is not None and env_instance != instance:
        return instance, spec.default_lnc if lnc is None else lnc, nodes
    if lnc is None:
        lnc = env.lnc()
        if lnc is None:
            lnc = spec.default_lnc
        elif lnc not in spec.lnc_values:
            raise TopologyError(f"NEURON_LOGICAL_NC_CONFIG: {spec.name} supports LNC "
                                + " or ".join(map(str, spec.lnc_values)) + f", got {lnc}")
    if nodes is None:
        nodes = env.nodes()
        if nodes is not None and nodes < 1:
            raise TopologyError(f"NEURON_MPI_NODES: expected a positive integer, got {nodes}")
    return instance, lnc, nodes


def _from_env(var, check, value):
    """``check(value)``, its error starting with the variable's name (in place of the
    argument's)."""
    try:
        check(value)
    except TopologyError as e:
        head, sep, rest = str(e).partition(": ")
        raise TopologyError(f"{var}: {rest if sep and ' ' not in head else e}") from None


def topology(instance=None, lnc=None, nodes=None, ranks=None) -> Topology:
    """The public entry point: a Topology from arguments, env or defaults.

    ``ranks`` (a world size) places a world smaller than a node on its first chips,
    or spans as many full nodes as it needs when it is larger.
    """
    instance, lnc, nodes = resolve(instance, lnc, nodes)
    if ranks is not None and nodes is None:
        probe = Topology(instance, lnc, 1)
        per_node = probe.ranks_per_node
        nodes = max(1, -(-ranks // per_node))
    return Topology(instance, lnc, 1 if nodes is None else nodes, ranks)
