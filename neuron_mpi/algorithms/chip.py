"""chip: the intra-chip stage around inter-chip rings. Reduce-scatter among the
ranks of each chip, a ring all-reduce among the ranks that share a core index (one
ring per index, around the chip cycle), all-gather inside each chip. Not a runtime
default (the runtime's two-level intra-node algorithm is RDH); kept to be forced."""
from __future__ import annotations

from . import levels
from .registry import Algorithm


def applies(op, view):
    if not view.chip_symmetric:
        return (f"needs members on at least 2 chips with the same number (at least 2) on "
                f"each chip; this group of {view.size} is not")
    return None


ALGORITHM = Algorithm(
    name="chip", summary="intra-chip reduce-scatter, rings across chips, intra-chip "
    "all-gather",
    ops=("all_reduce", "reduce_scatter", "all_gather"),
    build=lambda op, view, sizes, avg=False, extra=None: levels.build(
        view, op, sizes, avg, "chip", view.by_chip, False),
    applies=applies, priority=80)
