"""Hamiltonian cycles of a chip graph, and sets of edge-disjoint ones.

A deterministic depth-first search (neighbours in ascending order, fewest onward
choices first): the same graph always gives the same cycles. Graphs here are small
(at most 64 chips), and the search has a step budget so it can never run away.
"""
from __future__ import annotations

import functools


def _edges(cycle):
    return {frozenset((cycle[i], cycle[(i + 1) % len(cycle)])) for i in range(len(cycle))}


def hamiltonian_cycles(adj: dict[int, list[int]], banned=frozenset(), budget=200_000):
    """Yield Hamiltonian cycles (tuples starting at the smallest node) of ``adj``
    avoiding the undirected edges in ``banned``."""
    nodes = sorted(adj)
    n = len(nodes)
    if n < 3:
        return
    start = nodes[0]
    nbrs = {v: [w for w in adj[v] if frozenset((v, w)) not in banned] for v in nodes}
    if any(len(nbrs[v]) < 2 for v in nodes):
        return
    path = [start]
    seen = {start}
    steps = [0]

    def onward(v):
        return sum(1 for w in nbrs[v] if w not in seen)

    def dfs():
        steps[0] += 1
        if steps[0] > budget:
            return
        v = path[-1]
        if len(path) == n:
            if start in nbrs[v]:
                yield tuple(path)
            return
        cands = [w for w in nbrs[v] if w not in seen]
        cands.sort(key=lambda w: (onward(w), w))
        for w in cands:
            seen.add(w)
            path.append(w)
            yield from dfs()
            path.pop()
            seen.discard(w)

    seen_cycles = set()
    for cyc in dfs():
        key = frozenset(_edges(cyc))
        if key in seen_cycles:  # the same cycle walked the other way
            continue
        seen_cycles.add(key)
        yield cyc


def edge_disjoint_hamiltonian_cycles(adj: dict[int, list[int]], want: int = 2):
    """Up to ``want`` pairwise edge-disjoint Hamiltonian cycles (at least one if any
    exists). Tries first cycles in search order until the rest can be completed."""
    key = tuple((v, tuple(sorted(adj[v]))) for v in sorted(adj))
    return [list(c) for c in _cached(key, want)]


@functools.lru_cache(maxsize=64)
def _cached(key, want):
    adj = {v: list(ns) for v, ns in key}
    best: list = []

    def extend(chosen, banned, tries):
        nonlocal best
        if len(chosen) > len(best):
            best = list(chosen)
        if len(chosen) == want:
            return True
        for i, cyc in enumerate(hamiltonian_cycles(adj, banned)):
            if i >= tries:
                break
            if extend(chosen + [cyc], banned | _edges(cyc), tries):
                return True
        return False

    extend([], frozenset(), tries=400)
    return tuple(tuple(c) for c in best)


def layered_cycles(layer_cycles, layers: int, layer_size: int):
    """Edge-disjoint Hamiltonian cycles of ``layers`` stacked copies of a layer graph
    joined by Z links (chip = layer * layer_size + local), from edge-disjoint
    Hamiltonian cycles of one layer.

    Each layer cycle becomes a boustrophedon: walk layer 0 along the cycle, climb a
    Z link, walk layer 1 backwards, and so on, closing with a Z link from the last
    layer to layer 0 (needs an even layer count). The second cycle is rotated so the
    Z links it climbs are on other chips than the first's, keeping them disjoint.
    """
    if layers < 2 or layers % 2:
        return []
    out = []
    used_turns: set[int] = set()
    for cyc in layer_cycles:
        cyc = list(cyc)
        n = len(cyc)
        for shift in range(n):
            rot = cyc[shift:] + cyc[:shift]
            if rot[0] not in used_turns and rot[-1] not in used_turns:
                break
        else:
            continue
        used_turns |= {rot[0], rot[-1]}
        order = []
        for layer in range(layers):
            seq = rot if layer % 2 == 0 else rot[::-1]
            order.extend(layer * layer_size + c for c in seq)
        out.append(order)
    return out
