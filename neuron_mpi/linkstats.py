"""Merged ``link_stats()`` files: what every rank sent over every emulated link.

``neuron-mpi-bench ... --link-stats FILE`` gathers each rank's ``link_stats()`` (the
bytes and messages it sent to each next hop since init, shared-memory copies
charged to every link they crossed) to rank 0, which writes::

    {"schema": "neuron-mpi-link-stats/1", "command": [...],
     "topology": {"instance", "lnc", "nodes", "ranks"},
     "links": [{"src", "dst", "link", "bytes", "messages"}, ...]}

``neuron-mpi topo --heat FILE --png out.png`` draws it (neuron_mpi.picture).
"""
from __future__ import annotations

import json
import os

from .errors import InvalidArgumentError

SCHEMA = "neuron-mpi-link-stats/1"


def topology_key(topo) -> dict:
    return {"instance": topo.instance, "lnc": topo.lnc, "nodes": topo.nodes,
            "ranks": topo.size}


def gather(comm, mpi_comm) -> list[dict] | None:
    """Every rank's ``comm.link_stats()`` on rank 0 of ``mpi_comm`` (None elsewhere).
    Collective over ``mpi_comm``."""
    mine = comm.link_stats()
    parts = mpi_comm.gather(mine, root=0)
    if parts is None:
        return None
    return [e for part in parts for e in part]


def write(path, topo, entries, command=None) -> None:
    path = os.fspath(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    doc = {"schema": SCHEMA, "command": list(command or []), "topology": topology_key(topo),
           "links": sorted(entries, key=lambda e: (e["src"], e["dst"]))}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def load(path) -> dict:
    """A merged link-stats file, checked; InvalidArgumentError naming --heat."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise InvalidArgumentError(f"--heat: cannot read {path!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(f"--heat: {path!r} is not JSON ({e.msg})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InvalidArgumentError(f"--heat: {path!r} is not a merged link-stats file "
                                   "(write one with neuron-mpi-bench --link-stats FILE)")
    t = doc.get("topology") or {}
    if not all(k in t for k in ("instance", "lnc", "nodes", "ranks")):
        raise InvalidArgumentError(f"--heat: {path!r} does not name its topology")
    return doc


def chip_traffic(topo, entries) -> dict[tuple[int, int], int]:
    """Bytes per directed chip pair (ga, gb) (ga == gb: the chip's intra-chip copies).
    An entry joining chips that are not linked is an error (it cannot happen in a
    run on this topology)."""
    out: dict[tuple[int, int], int] = {}
    for e in entries:
        src, dst = int(e["src"]), int(e["dst"])
        if not (0 <= src < topo.size and 0 <= dst < topo.size):
            raise InvalidArgumentError(f"--heat: rank {src} or {dst} is outside the "
                                       f"{topo.size} ranks of the file's topology")
        ga, gb = topo.global_chip(src), topo.global_chip(dst)
        if topo.link_between_chips(ga, gb) is None:
            raise InvalidArgumentError(f"--heat: ranks {src} and {dst} are not on linked "
                                       "chips")
        out[(ga, gb)] = out.get((ga, gb), 0) + int(e["bytes"])
    return out
