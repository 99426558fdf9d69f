"""Schedules: what an algorithm produces, what the router, executor, replay and the
time model consume.

A schedule is a list of steps over the members of a group (group indices 0..n-1).
A step is either a round of transfers (``Round``) or a list of local operations
(``Locals``). Every member holds three flat buffers addressed in elements: "in"
(the caller's input, never written), "out" (the result) and "tmp" (scratch of
``tmp_elems`` elements).

Round semantics (the contract every consumer keeps): every transfer reads its source
region as it is at the start of the round; then the deliveries are applied in the
order the transfers are listed: ``copy`` writes the region, ``reduce`` combines
the arriving data into it (dst = op(dst, data)).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

IN, OUT, TMP = "in", "out", "tmp"


class Xfer(NamedTuple):
    """One transfer (immutable). A NamedTuple rather than a frozen dataclass: a
    1024-rank schedule has half a million of them and this builds twice as fast.

    ``fold``: on the hardware this data moves by no DMA of its own: it is read in
    place, on its source's chip, as one more operand of a reduction of the same
    round (KangaRing's reduce-scatter, where a primary's DMA reads the received
    partial sum, its own chunk and its secondary's chunk and writes once:
    intranode-collective-comm.rst, "KangaRing ReduceScatter"). The emulator moves
    it like any transfer (and its ledger charges the links); the time model prices
    it as that one extra read, with no hops (docs/model.md)."""

    src: int
    dst: int
    src_buf: str
    src_off: int
    count: int
    dst_buf: str
    dst_off: int
    reduce: bool = False
    fold: bool = False


@dataclass(frozen=True)
class Local:
    """One rank's local step: copy/reduce a region, or divide it (avg).

    ``fold``: the reduction of a folded transfer's data (``Xfer.fold``): on the
    hardware it happens inside the round's reducing DMA, so the time model charges
    it nothing here (the executor runs it like any local step)."""

    rank: int
    kind: str  # "copy" | "reduce" | "divide"
    src_buf: str
    src_off: int
    count: int
    dst_buf: str
    dst_off: int
    divisor: int = 1
    fold: bool = False


@dataclass
class Round:
    """Transfers that run together. ``slices``: the algorithm sends each chunk in
    that many slices so the reduction of one overlaps the transfer of the next
    (the runtime's ring and KangaRing send two; intranode-collective-comm.rst,
    "Ring ReduceScatter"). The data moved is the same; the time model may use it."""

    xfers: list[Xfer] = field(default_factory=list)
    slices: int = 1


@dataclass
class Locals:
    ops: list[Local] = field(default_factory=list)


@dataclass
class Schedule:
    op: str  # collective name
    algorithm: str
    size: int  # members of the group
    in_elems: list[int]  # per member
    out_elems: list[int]
    tmp_elems: list[int]
    steps: list = field(default_factory=list)

    @property
    def rounds(self) -> list[Round]:
        return [s for s in self.steps if isinstance(s, Round)]

    def n_xfers(self) -> int:
        return sum(len(s.xfers) for s in self.rounds)


def split(total: int, parts: int) -> list[tuple[int, int]]:
    """``total`` elements in ``parts`` contiguous pieces, the first ``total % parts``
    one element longer: [(offset, length), ...]."""
    q, r = divmod(total, parts)
    out, off = [], 0
    for i in range(parts):
        n = q + (i < r)
        out.append((off, n))
        off += n
    return out


def offsets(counts) -> list[int]:
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


def merge_parallel(*phases: list[list[Xfer]]) -> list[list[Xfer]]:
    """Run several independent lists of rounds side by side: round i of the result
    holds round i of each input (in the order given)."""
    n = max((len(p) for p in phases), default=0)
    return [[x for p in phases if i < len(p) for x in p[i]] for i in range(n)]


@dataclass(frozen=True)
class CallRecord:
    """What one collective call ran: its schedule op, the algorithm and the schedule
    (group indices), and the element size. ``Communicator.last_call`` keeps the
    last one; the time model prices it (``neuron_mpi.model.price_record``)."""

    op: str
    algorithm: str
    schedule: Schedule
    itemsize: int
