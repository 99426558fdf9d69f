"""Replica-group rules of the real hardware, as a strict check.

Facts (NEURON_FACTS.md, "Group sizes"; seeds 000/001):
  trn1.32xlarge / trn1n.32xlarge: 1, 2, 8, 16 or 32 ranks in a node, a group of N
    consecutive cores starting at a core id that is a multiple of N.
    Runtime text: "Unsupported topology. Supported number of Neuron Cores is 1, 2, 8,
    16 or a multiple of 32."
  trn1.2xlarge: 1 or 2.
  inf2: 1, or any even number of ranks occupying consecutive chips (whole chips,
    consecutive), up to the instance (24 on inf2.48xlarge).
  trn2: powers of two up to a node (1 ... 64 at LNC=2, 1 ... 128 at LNC=1; 256 or
    512 on the UltraServer).
Across nodes (every family with EFA): the symmetry rule of the inter-node docs:
every node holds the same number of members at the same local indices, and that
per-node set must itself be a valid group. A full node per node is "a multiple of
32" on trn1 and "a multiple of 64" on trn2; one rank per node at the same local
index (data parallel across nodes) is accepted too.

strict=False skips all of this and accepts any group.
"""
from __future__ import annotations

from .errors import UnsupportedGroupError


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _single_node_sizes(topo) -> str:
    fam = topo.spec.family
    rpn = min(topo.ranks_per_node, topo.size)
    if fam == "trn1" and topo.spec.chips > 1:
        return "1, 2, 8, 16 or a multiple of 32"
    if fam == "trn1" or topo.spec.chips == 1:
        return "1 or 2" if rpn >= 2 else "1"
    if fam == "inf2":
        return f"1 or an even number up to {topo.ranks_per_node} on consecutive devices"
    sizes = [1 << k for k in range(topo.ranks_per_node.bit_length()) if 1 << k <= topo.ranks_per_node]
    return ", ".join(map(str, sizes[:-1])) + f" or a multiple of {sizes[-1]}"


def _fail(topo, group, why: str):
    raise UnsupportedGroupError(
        f"replica_groups: Unsupported topology. Supported number of Neuron Cores is "
        f"{_single_node_sizes(topo)} on {topo.instance} (LNC={topo.lnc}); group "
        f"{_short(group)} of {len(group)} ranks: {why}")


def _short(group) -> str:
    g = list(group)
    return str(g) if len(g) <= 8 else f"[{g[0]}, {g[1]}, ..., {g[-1]}]"


def _check_local(topo, local: list[int], group) -> None:
    """local: sorted local (in-node) indices of the members on one node."""
    n = len(local)
    fam = topo.spec.family
    contiguous = local == list(range(local[0], local[0] + n))
    if fam == "trn1":
        allowed = (1, 2) if topo.spec.chips == 1 else (1, 2, 8, 16, 32)
        if n not in allowed:
            _fail(topo, group, f"{n} ranks per node is not a supported size")
        if contiguous and local[0] % n:
            _fail(topo, group, f"a group of {n} must start at a core id that is a "
                               f"multiple of {n}, it starts at {local[0]}")
    elif fam == "inf2":
        if n == 1:
            return
        if n % 2:
            _fail(topo, group, "inf2 supports only even group sizes")
        if not contiguous or local[0] % topo.ranks_per_chip:
            _fail(topo, group, "the ranks must occupy consecutive Neuron devices")
    else:  # trn2
        if not _power_of_two(n) or n > topo.ranks_per_node:
            _fail(topo, group, f"{n} ranks per node is not a power of two up to "
                               f"{topo.ranks_per_node}")


def check_group(topo, group, strict: bool = True) -> None:
    """Raise UnsupportedGroupError if the hardware refuses this group of world ranks."""
    group = list(group)
    if not strict or len(group) <= 1:
        return
    per_node: dict[int, list[int]] = {}
    for r in group:
        p = topo.placement(r)
        per_node.setdefault(p.node, []).append(r - p.node * topo.ranks_per_node)
    locs = [sorted(v) for v in per_node.values()]
    if len(locs) > 1 and any(lc != locs[0] for lc in locs):
        _fail(topo, group, "every node must hold the same number of members at the same "
                           "local indices (inter-node symmetry rule)")
    _check_local(topo, locs[0], group)
