"""The time model's fitted parameters, each with its source (docs/model.md).

Link figures (NeuronLink, EFA, HBM) live in ``neuron_mpi/catalog.py``. What the
catalog cannot give comes from the published nccom-test rows
(``neuron_mpi/model/published.py``, the page aws-neuron/aws-neuron-sdk
tools/neuron-sys-tools/nccom-test.rst) and is kept here, one named figure each:

* ``INTRA_PAIR_GiBps``: how fast one rank's DMA moves data to another rank on the
  same chip (one pair of cores).
* ``FLOORS``: the runtime's fixed cost of one call (launch, semaphores, descriptor
  setup), per runtime generation, instance family, kind of operation and scope
  (one node or several).
* ``STEP_US``: the runtime's cost of one step of a schedule (the handshake that
  lets a step's receiver know its data landed), per generation and family.
  The model: ``time = floor + schedule + steps x step``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..algorithms.registry import NEURON_OPS
from .workload import OPS as BENCH_OPS, schedule_op

GIB = 1024**3 / 1e9  # GiB/s -> GB/s (nccom-test prints GiB/s)


@dataclass(frozen=True)
class Param:
    name: str
    value: float
    unit: str
    source: str


# --- on-chip copies: one DMA per pair of cores ---------------------------------------
INTRA_PAIR_GiBps = {
    # permute of 32 MiB, pairs 0<->1 and 2<->3 (all on one chip at LNC=2):
    # 894.24 us, 37.52 GiB/s per pair (page version a0b8b3e7, 2025-11-03).
    "trn2": Param("intra_pair_trn2", 37.52, "GiB/s",
                  "nccom-test.rst a0b8b3e7 (2025-11): permute -r 8 with pairs "
                  "0<->1, 2<->3, 32 MiB in 894.24 us = 37.52 GiB/s per pair"),
    # 2-rank (one chip) all-reduce, fp32: 256 MiB in 4750 us and 1 GiB in 18930 us;
    # the slope (768 MiB in 14180 us) is what the two pairs move: each rank sends
    # S/2 twice, so one pair moves S in 14180 / 0.75 us per GiB -> 56.8 GiB/s less
    # the reduction the ring's slices leave exposed; 64 GiB/s fits the rows to 2%.
    "trn1": Param("intra_pair_trn1", 64.0, "GiB/s",
                  "nccom-test.rst 4f641e78 (2023-04): allr -r 2, 256 MiB 4750 us, "
                  "1 GiB 18930 us (slope 54 GiB/s of bus bandwidth, with the "
                  "exposed half of the reduction)"),
}
INTRA_PAIR_GiBps["inf2"] = Param("intra_pair_inf2", INTRA_PAIR_GiBps["trn1"].value, "GiB/s",
                                 "no published row; Inferentia2 shares Trainium's "
                                 "NeuronCore-v2 DMA: trn1's figure")
INTRA_LAT_US = Param("intra_latency", 0.5, "us",
                     "assumption (no public figure): one DMA descriptor on one chip")

# --- the runtime: a fixed cost per call and per step --------------------------------
# The page's numbers changed with the runtime: the same 32-rank trn1 all-gather of
# 1 KiB took 151 us on the 2023 page and 6.16 us on the 2025 one. So the runtime
# figures are kept per runtime generation, named by the page versions they come from:
#   "2023": pages 2023-04 .. 2024-12 (SDK 2.10 .. 2.21)
#   "2025": pages 2025-06 .. 2026-02 (SDK 2.24 .. 2.28)
#   "2026": pages from 2026-07 (SDK 2.31, 2.32): the default
RUNTIMES = ("2023", "2025", "2026")
DEFAULT_RUNTIME = "2026"


def runtime_of_date(date: str) -> str:
    """The runtime generation of a page version dated ``date`` (YYYY-MM-DD)."""
    if date < "2025-01":
        return "2023"
    if date < "2026-07":
        return "2025"
    return "2026"


# Kinds: all_reduce, all_gather, all_gather_v, reduce_scatter(_v), all_to_all,
# permute, p2p. Scope: "node" (one instance) or "nodes" (the group spans instances).
# Each figure is a published row less what the model's schedule prices for it
# (hops, bytes and the per-step cost below), so that row comes out exact.
_F = {
    ("2023", "trn1", "all_gather", "node"): (
        0.0, "nccom-test.rst 4f641e78: allg -r 32 (ring), 1 KiB in 151 us is all "
             "per-step cost (31 steps: 46.5 us of hops + 31 x 3.37 us)"),
    ("2023", "trn1", "all_reduce", "node"): (
        50.2, "nccom-test.rst 4f641e78: allr -r 2, flat 58 us from 1 KiB to 64 KiB, less "
              "2 ring steps (1.0 us of hops + 2 x 3.37 us)"),
    ("2023", "trn1", "all_reduce", "nodes"): (
        955.0, "nccom-test.rst 4f641e78: allr -r 64 -N 2 plateau of 1311-1329 us from "
               "128 KiB to 2 MiB (every row >= 32 MiB sits on it), less the 1 MiB "
               "schedule (157 us of hops and bytes + 64 steps x 3.37 us); the rows "
               "below 64 KiB (520-1174 us) take a faster path the model does not have"),
    ("2025", "trn1", "all_gather", "node"): (
        0.1, "nccom-test.rst 6b6ad292: allg -r 32, 1 KiB in 6.16 us, of which the mesh "
             "schedule's hop latencies price 6.06 us"),
    ("2025", "trn2", "all_gather", "node"): (
        8.5, "nccom-test.rst 86a92868: allg -r 8, 1 KiB in 10.0 us, less the mesh "
             "schedule (1.5 us)"),
    ("2025", "trn2", "all_reduce", "node"): (
        296.8, "nccom-test.rst 86a92868: allr -r 16 --show-algorithm, flat 299.7-299.9 "
               "us from 4 B to 8 KiB (mesh), less the mesh schedule at 4 B (3.0 us)"),
    ("2025", "trn2", "all_to_all", "nodes"): (
        939.9, "nccom-test.rst 86a92868: alltoallv -r 2 -N 2, 6 KiB in 955.05 us, less "
               "the schedule (one EFA hop, 15.2 us)"),
    ("2026", "trn2", "all_reduce", "node"): (
        0.0, "nccom-test.rst 43a89626: the 4 x 16-rank all-reduce (ring) of 1 KiB, "
             "101.14 us, is all per-step cost: 30 steps, 45.0 us of hops + 30 x 1.87 us"),
    ("2026", "trn2", "all_gather", "node"): (
        46.0, "nccom-test.rst 43a89626: the 64-rank all-gather (ring) of 1 KiB, mean "
              "258.4 us, less 63 steps (94.5 us of hops + 63 x 1.87 us)"),
    ("2026", "trn2", "all_gather_v", "node"): (
        9.1, "nccom-test.rst 43a89626: allgv -r 4, 2 KiB fp16 in 16.28 us, less the "
             "ring on one chip (1.5 us of hops + 3 x 1.87 us)"),
}
FLOORS = {k: Param("floor_" + "_".join(k), v, "us", s) for k, (v, s) in _F.items()}

_S = {
    ("2023", "trn1"): (3.37, "nccom-test.rst 4f641e78: allg -r 32 (ring, 31 steps) "
                             "1 KiB in 151 us, 104.5 us above the hops: 3.37 us a step"),
    ("2025", "trn1"): (0.0, "nccom-test.rst 6b6ad292: the mesh all-gather rows leave "
                            "0.1 us beside the hop latencies: no per-step cost"),
    ("2025", "trn2"): (0.0, "nccom-test.rst 86a92868: allg -r 8 (mesh) 10.0 us; the "
                            "page has no ring row to separate a step cost"),
    ("2026", "trn2"): (1.87, "nccom-test.rst 43a89626: 16-rank all-reduce (ring, 30 "
                             "steps) of 1 KiB in 101.14 us, 45.0 us of hops: 1.87 us "
                             "a step (the semaphore handshake of a step)"),
}
STEP_US = {k: Param("step_" + "_".join(k), v, "us", s) for k, (v, s) in _S.items()}

#: what a kind borrows when it has no figure of its own (said in docs/model.md)
KIND_FALLBACK = {"reduce_scatter": "all_gather", "all_gather_v": "all_gather",
                 "reduce_scatter_v": "reduce_scatter", "all_to_all": "all_gather",
                 "permute": "all_gather", "p2p": "permute", "all_gather": "all_reduce"}
FAMILY_FALLBACK = {"inf2": "trn1", "trn1": "trn2", "trn2": "trn1"}

#: the figures each operation is priced with: an operation is its own kind unless
#: named here (schedule op names, a CallRecord's op; bench names go by their schedule op)
_KIND = {"all_to_all_v": "all_to_all", "broadcast": "all_gather", "barrier": "all_reduce"}
OP_KIND = {op: _KIND.get(op, op) for op in NEURON_OPS}
OP_KIND.update({op: OP_KIND[schedule_op(op)] for op in BENCH_OPS})
OP_KIND["sendrecv"] = "p2p"  # a bench op that permute's schedule runs


def _runtimes(runtime: str):
    """``runtime`` first, then the older ones newest first, then the newer ones."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime: expected one of {', '.join(RUNTIMES)}, got {runtime!r}")
    i = RUNTIMES.index(runtime)
    return [runtime] + list(reversed(RUNTIMES[:i])) + list(RUNTIMES[i + 1:])


def _families(family):
    return [family] + ([FAMILY_FALLBACK[family]] if family in FAMILY_FALLBACK else [])


def floor(family: str, op: str, multi_node: bool, runtime: str = DEFAULT_RUNTIME) -> Param:
    """The runtime floor of one ``op`` call (bench op name) on ``family``.

    Looks up (runtime, family, kind, scope). A missing entry borrows, in order: the
    other runtime generations (older first), the kind's fallback chain
    (KIND_FALLBACK), the other family; a multi-node group with no multi-node figure
    takes the single-node one plus ``EFA_CALL_US``."""
    kind = OP_KIND[op]
    scopes = ("nodes", "node") if multi_node else ("node",)
    for scope in scopes:
        for fam in _families(family):
            k, seen = kind, set()
            while k is not None and k not in seen:
                seen.add(k)
                for rt in _runtimes(runtime):
                    p = FLOORS.get((rt, fam, k, scope))
                    if p is not None:
                        if multi_node and scope == "node":
                            return Param(p.name + "+efa", p.value + EFA_CALL_US.value, "us",
                                         p.source + "; plus " + EFA_CALL_US.source)
                        return p
                k = KIND_FALLBACK.get(k)
    raise AssertionError((family, op))


def step_cost(family: str, runtime: str = DEFAULT_RUNTIME) -> Param:
    """The runtime's cost of one step (round) of a schedule on ``family``."""
    for fam in _families(family):
        for rt in _runtimes(runtime):
            p = STEP_US.get((rt, fam))
            if p is not None:
                return p
    raise AssertionError(family)


EFA_CALL_US = Param(
    "efa_call", 955.0 - 50.2, "us",
    "the 2023 2-node trn1 all-reduce floor less the 1-node one (955.0 - 50.2 us)")


def all_params() -> list[Param]:
    return ([INTRA_LAT_US] + list(INTRA_PAIR_GiBps.values()) + list(FLOORS.values())
            + list(STEP_US.values()) + [EFA_CALL_US])
