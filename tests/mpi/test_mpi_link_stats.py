"""Run last in every launch: the link ledger shows only neighbour traffic.

Every entry of ``link_stats()`` (everything this rank sent since init, by next
hop) must join two ranks whose chips are linked, with the entry's link kind being
that link's kind: so every MPI message crossed exactly one emulated link, whatever
the collective, algorithm or group the earlier tests ran.
"""
from __future__ import annotations

import numpy as np
import pytest

from mpi_helpers import DTYPES, assert_same, seed_of, table

pytestmark = pytest.mark.mpi


def test_far_traffic_is_forwarded(comm):
    """Mirror pairs (rank i <-> n-1-i) are far apart on the topology: permute and
    point-to-point between them must go hop by hop."""
    n, me = comm.size, comm.rank
    t = table(seed_of("mirror", n), n, 16, DTYPES["fp32"])
    got = comm.permute(t[me], [(i, n - 1 - i) for i in range(n)])
    assert_same(got, t[n - 1 - me], "mirror permute")
    comm.send(t[me], n - 1 - me)
    assert_same(comm.recv(np.empty(16, DTYPES["fp32"]), n - 1 - me), t[n - 1 - me], "recv")
    comm.barrier()


def test_point_to_point_is_charged(comm):
    """A send is counted on the link of its first hop, with its bytes (the control
    plane's traffic is not, so nothing else moves between the two readings)."""
    n, me = comm.size, comm.rank
    partner = me ^ 1
    if partner >= n:  # odd world: the last rank has no partner
        comm.barrier()
        return
    topo = comm.topology
    hop = topo.route(comm.world_rank, comm.ranks[partner])[1]
    kind = topo.link_between_ranks(comm.world_rank, hop).kind

    def sent():
        return sum(e["bytes"] for e in comm.link_stats() if e["dst"] == hop and
                   e["link"] == kind)
    x = np.arange(1024, dtype=np.float32) + me
    before = sent()
    comm.send(x, partner)
    got = comm.recv(np.empty(1024, np.float32), partner)
    after = sent()
    comm.barrier()
    assert_same(got, np.arange(1024, dtype=np.float32) + partner, "recv from partner")
    assert after - before == x.nbytes, (before, after, hop, kind)


def test_link_stats_only_neighbours(comm):
    topo = comm.topology
    me = comm.world_rank
    stats = comm.link_stats()
    if comm.size > 1:
        assert stats, "no traffic recorded at all"
    problems = []
    for e in stats:
        src, dst = e["src"], e["dst"]
        if src != me:
            problems.append(f"entry with src {src} on rank {me}: {e}")
        link = topo.link_between_ranks(src, dst)
        if link is None:
            problems.append(f"ranks {src} and {dst} are not linked, yet {e['messages']} "
                            f"messages ({e['bytes']} bytes) went from one to the other")
        elif e["link"] != link.kind:
            problems.append(f"{src}->{dst} recorded as {e['link']!r}, the link is "
                            f"{link.kind!r}")
        if src == dst:
            problems.append(f"a message to itself recorded as traffic: {e}")
        if e["messages"] < 1 or e["bytes"] < 0:
            problems.append(f"odd counts: {e}")
    assert not problems, "\n".join(problems)


def test_link_stats_grow_only_on_links_used(comm):
    """One more all_reduce: entries only grow, and the new traffic is neighbour
    traffic too."""
    before = {(e["dst"], e["link"]): (e["bytes"], e["messages"]) for e in comm.link_stats()}
    x = np.ones(4 * comm.size + 1, np.float32)
    assert_same(comm.all_reduce(x), np.full_like(x, comm.size), "all_reduce of ones")
    after = {(e["dst"], e["link"]): (e["bytes"], e["messages"]) for e in comm.link_stats()}
    for key, (b, m) in before.items():
        assert key in after and after[key][0] >= b and after[key][1] >= m, key
    for (dst, kind) in after:
        link = comm.topology.link_between_ranks(comm.world_rank, dst)
        assert link is not None and link.kind == kind, (dst, kind)
    if comm.size > 1:
        assert sum(m for _, m in after.values()) > sum(m for _, m in before.values())
