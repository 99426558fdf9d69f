"""The benchmarked operations and the buffers a byte size means for each (pure).

Shared by the time model and the benchmark so that both price and run the same
shapes. Size conventions follow nccom-test / nccl-tests: the size of a row is the
all-reduce buffer, the all-gather *output*, the reduce-scatter *input*, one rank's
all-to-all send buffer, the send/recv and permute buffer. Sizes are rounded down to
whole elements (and whole blocks per rank), never below one element per block.

The v forms use deliberately uneven counts (weights 1, 2, 3 repeating):
  all_gather_v / reduce_scatter_v: member g's block is q * (1 + g % 3) elements;
  alltoallv: member i sends q * (1 + ((j - i) mod r) % 3) elements to member j, so
  every rank sends and receives the same total (its row and column sums agree).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgumentError

#: bench op name -> (schedule op, bus factor kind, reduces)
_TABLE = {
    "all_reduce": ("all_reduce", "allreduce", True),
    "all_gather": ("all_gather", "collective", False),
    "reduce_scatter": ("reduce_scatter", "collective", True),
    "alltoall": ("all_to_all", "collective", False),
    "permute": ("permute", "p2p", False),
    "sendrecv": ("permute", "p2p", False),
    "all_gather_v": ("all_gather_v", "collective", False),
    "reduce_scatter_v": ("reduce_scatter_v", "collective", True),
    "alltoallv": ("all_to_all_v", "collective", False),
}
OPS = tuple(_TABLE)
#: the v forms (uneven counts)
V_OPS = tuple(op for op in OPS if _TABLE[op][0].endswith("_v"))

#: nccom-test's short spellings
NCCOM_ALIASES = {"allr": "all_reduce", "allg": "all_gather", "redsct": "reduce_scatter",
                 "allgv": "all_gather_v"}
#: every other spelling accepted: nccom-test's, then nccl-tests' and our API's
ALIASES = {
    **NCCOM_ALIASES,
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall", "a2a": "alltoall",
    "all_to_all_v": "alltoallv", "alltoall_v": "alltoallv",
    "allgatherv": "all_gather_v", "allgather_v": "all_gather_v",
    "all_gatherv": "all_gather_v",
    "reducescatterv": "reduce_scatter_v", "reducescatter_v": "reduce_scatter_v",
    "send_recv": "sendrecv",
}

V_WEIGHTS = (1, 2, 3)


def canonical_op(name: str) -> str:
    """A bench op name from any accepted spelling; ValueError otherwise."""
    key = str(name).strip().lower().replace("-", "_")
    if key in _TABLE:
        return key
    if key in ALIASES:
        return ALIASES[key]
    raise ValueError(f"unknown operation {name!r}; expected one of: "
                     + ", ".join(OPS) + " (aliases: " + ", ".join(NCCOM_ALIASES)
                     + ", all_to_all, ...)")


def ops_help() -> str:
    """The OP argument's help: every op, with nccom-test's short spelling after a |."""
    return ", ".join("|".join([op] + [a for a, o in NCCOM_ALIASES.items() if o == op])
                     for op in OPS)


def schedule_op(op: str) -> str:
    return _TABLE[canonical_op(op)][0]


def reduces(op: str) -> bool:
    return _TABLE[canonical_op(op)][2]


def bus_factor(op: str, r: int) -> float:
    """nccom-test's busbw factor: 2(r-1)/r all-reduce; (r-1)/r all-gather,
    reduce-scatter, all-to-all (and their v forms); 1 send/recv and permute."""
    kind = _TABLE[canonical_op(op)][1]
    if kind == "p2p":
        return 1.0
    if r <= 1:
        return 0.0
    return (2.0 if kind == "allreduce" else 1.0) * (r - 1) / r


@dataclass(frozen=True)
class Workload:
    """What one row of a benchmark moves, in elements (member g = group index g)."""

    op: str  # bench op name
    sched_op: str  # the schedule's op name (select.schedule_for)
    r: int  # members
    itemsize: int
    size: int  # bytes, the row's size(B)
    sizes: object  # schedule_for's ``sizes`` argument
    extra: object = None  # permute pairs
    counts: tuple = ()  # per-member blocks (gather/scatter forms)
    matrix: tuple = ()  # all-to-all(v) counts, matrix[i][j]: i sends to j
    count: int = 0  # all-reduce / permute / sendrecv buffer elements

    @property
    def elems(self) -> int:
        """count(elems): the row's size in elements."""
        return self.size // self.itemsize

    def in_elems(self, g: int) -> int:
        if self.op in ("all_gather", "all_gather_v"):
            return self.counts[g]
        if self.op in ("reduce_scatter", "reduce_scatter_v"):
            return sum(self.counts)
        if self.matrix:
            return sum(self.matrix[g])
        return self.count

    def out_elems(self, g: int) -> int:
        if self.op in ("all_gather", "all_gather_v"):
            return sum(self.counts)
        if self.op in ("reduce_scatter", "reduce_scatter_v"):
            return self.counts[g]
        if self.matrix:
            return sum(row[g] for row in self.matrix)
        return self.count


def ring_pairs(order) -> tuple[tuple[int, int], ...]:
    """Each member sends to the next one on ``order`` (a ring of group indices)."""
    n = len(order)
    return tuple((order[k], order[(k + 1) % n]) for k in range(n))


def workload(op: str, nbytes: int, r: int, itemsize: int, ring=None) -> Workload:
    """The buffers of ``op`` for a row of ``nbytes`` on ``r`` members.

    ``ring``: the group's first ring (group indices), for permute's pairs (each
    member sends to its ring successor: the directly connected pattern the hardware
    supports); default 0..r-1."""
    op = canonical_op(op)
    sched_op = schedule_op(op)
    if r < 1:
        raise ValueError(f"ranks: expected at least 1, got {r}")
    elems = max(1, int(nbytes) // itemsize)
    if op in ("all_reduce",):
        return Workload(op, sched_op, r, itemsize, elems * itemsize, elems, count=elems)
    if op in ("permute", "sendrecv"):
        order = list(ring) if (op == "permute" and ring is not None) else list(range(r))
        pairs = ring_pairs(order)
        return Workload(op, sched_op, r, itemsize, elems * itemsize, elems, extra=pairs,
                        count=elems)
    if op in ("all_gather", "reduce_scatter"):
        b = max(1, elems // r)
        counts = (b,) * r
        return Workload(op, sched_op, r, itemsize, b * r * itemsize, counts, counts=counts)
    if op == "alltoall":
        b = max(1, elems // r)
        matrix = tuple((b,) * r for _ in range(r))
        return Workload(op, sched_op, r, itemsize, b * r * itemsize, matrix, matrix=matrix)
    if op in ("all_gather_v", "reduce_scatter_v"):
        w = [V_WEIGHTS[g % len(V_WEIGHTS)] for g in range(r)]
        q = max(1, elems // sum(w))
        counts = tuple(q * x for x in w)
        return Workload(op, sched_op, r, itemsize, sum(counts) * itemsize, counts,
                        counts=counts)
    if op == "alltoallv":
        w = [V_WEIGHTS[d % len(V_WEIGHTS)] for d in range(r)]
        q = max(1, elems // sum(w))
        matrix = tuple(tuple(q * w[(j - i) % r] for j in range(r)) for i in range(r))
        return Workload(op, sched_op, r, itemsize, q * sum(w) * itemsize, matrix,
                        matrix=matrix)
    raise AssertionError(op)


def workload_pairs(op: str, nbytes: int, r: int, itemsize: int, pairs) -> Workload:
    """permute / sendrecv with explicit (src, dst) pairs of group indices."""
    op = canonical_op(op)
    elems = max(1, int(nbytes) // itemsize)
    return Workload(op, schedule_op(op), r, itemsize, elems * itemsize, elems,
                    extra=tuple(tuple(p) for p in pairs), count=elems)


def _counts(name, values, n):
    """``n`` element counts (integers >= 0), checked as the communicator checks them."""
    from ..validate import counts

    return counts(values, n, name)


def workload_counts(op: str, r: int, itemsize: int, send_counts) -> Workload:
    """The v forms with the caller's counts (nccom-test's --variable-size-op-metadata).

    alltoallv: ``send_counts`` is one list of r counts that every rank uses (rank i
    sends send_counts[j] elements to j, as one metadata entry does in nccom-test) or
    r lists, one per rank. all_gather_v / reduce_scatter_v: one count for every
    member, or r counts."""
    op = canonical_op(op)
    if isinstance(send_counts, (str, bytes)) or not isinstance(send_counts, (int, list, tuple)):
        raise InvalidArgumentError(f"send_counts: expected a list of element counts, got "
                                   f"{send_counts!r}")
    sc = list(send_counts) if not isinstance(send_counts, int) else [send_counts]
    if op == "alltoallv":
        if sc and all(isinstance(x, (list, tuple)) for x in sc):
            if len(sc) != r:
                raise ValueError(f"send_counts: expected {r} lists (one per rank), got "
                                 f"{len(sc)}")
            matrix = tuple(_counts(f"send_counts[{i}]", row, r) for i, row in enumerate(sc))
        else:
            row = _counts("send_counts", sc, r)
            matrix = tuple(row for _ in range(r))
        return Workload(op, "all_to_all_v", r, itemsize, sum(matrix[0]) * itemsize, matrix,
                        matrix=matrix)
    if op in ("all_gather_v", "reduce_scatter_v"):
        counts = _counts("send_counts", sc * r if len(sc) == 1 else sc, r)
        if not sum(counts):
            raise ValueError("send_counts: at least one count must be > 0")
        return Workload(op, schedule_op(op), r, itemsize, sum(counts) * itemsize, counts,
                        counts=counts)
    raise ValueError(f"send_counts: only for alltoallv, all_gather_v, reduce_scatter_v, "
                     f"not {op}")
