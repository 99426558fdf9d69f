"""Pricing a lowered schedule on the real hardware's links (docs/model.md).

The rules, step by step:

* A round of transfers: every hop costs its link's latency plus the bytes that link
  carries *in this round* over its bandwidth (hops sharing a directed link share its
  bandwidth; all finish when the link has carried them all). EFA is priced per NIC:
  the EFA hops leaving one chip share that chip's EFA bandwidth, and so do the ones
  entering it; an EFA hop takes the busier of its two NICs. A transfer's hops are
  sequential (store and forward): its time is the sum of its hops. A delivery with a
  reduction then reads both operands and writes the result (3 x bytes) at HBM speed,
  shared by every reduction landing on the same chip in the round. The round lasts
  as long as its slowest transfer (hops plus reduction).
* A Locals step (a rank's own copies, reductions, divisions): copy = 2 x bytes,
  reduce = 3 x bytes, divide = 2 x bytes, zero = 1 x bytes of HBM traffic, summed
  over the ranks of each chip; the step lasts as long as the busiest chip.
* Steps run one after the other; the total is their sum.
* Intra-chip hops (two ranks on one chip) do not share: each pair of cores is its
  own DMA stream at the catalog's per-pair figure.
* Sliced rounds (``Round.slices`` = k > 1: the ring and KangaRing send each chunk
  in two slices) overlap the reduction with the transfer: a transfer of time t
  whose delivery reduces for time u takes (t + u) / k + (k - 1) / k x max(t, u)
  instead of t + u (k = 2: (t + u + max(t, u)) / 2).
* Leading copies (a ``Locals`` step before the first round that only copies the
  input into place) are free: the hardware's first step reads the input where it
  lies.
* Folded transfers (``Xfer.fold``: KangaRing's secondary chunks, which the
  primary's one DMA reads in place as the third operand of its 3-read-1-write
  reduction) cross no link and take no time; each adds its bytes once (one more
  read) to the HBM work of the reductions landing on its destination's chip in
  the round (the reduction it joins). Their local reductions (``Local.fold``) are
  that same reduction: free.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..schedule import Locals
from .lowering import lowerer

#: HBM bytes read + written per element byte, for each kind of local work
LOCAL_TRAFFIC = {"copy": 2.0, "reduce": 3.0, "divide": 2.0, "zero": 1.0}
REDUCE_DELIVERY_TRAFFIC = 3.0
#: one more operand read in place by a reducing DMA: KangaRing's reduce-scatter step
#: reads three operands and writes one, 4 x bytes against the ring's 3 x
#: (intranode-collective-comm.rst, "KangaRing ReduceScatter")
FOLD_TRAFFIC = 1.0



@dataclass
class Cost:
    time_us: float
    rounds: int = 0
    hops: int = 0
    transfer_us: float = 0.0  # sum over rounds of the slowest transfer's hops
    reduce_us: float = 0.0  # sum over rounds of the reduction on that transfer
    local_us: float = 0.0  # sum over Locals steps
    floor_us: float = 0.0  # the runtime's fixed cost of the call (params.FLOORS)
    steps_us: float = 0.0  # the runtime's per-step cost, summed (params.STEP_US)
    bytes_by_kind: dict = field(default_factory=dict)  # link kind -> bytes (all hops)

    def as_dict(self) -> dict:
        return {"time_us": self.time_us, "rounds": self.rounds, "hops": self.hops,
                "transfer_us": self.transfer_us, "reduce_us": self.reduce_us,
                "local_us": self.local_us, "floor_us": self.floor_us,
                "steps_us": self.steps_us,
                "bytes_by_kind": dict(self.bytes_by_kind)}


def _locals_per_chip(step: Locals, member_chip: np.ndarray, itemsize: int, hbm: float,
                     n_chips: int) -> np.ndarray:
    """Microseconds of HBM work per chip for one Locals step."""
    ops = [lo for lo in step.ops if not lo.fold]
    if not ops:
        return np.zeros(n_chips)
    chips = np.fromiter((member_chip[lo.rank] for lo in ops), np.int64, len(ops))
    work = np.fromiter((LOCAL_TRAFFIC[lo.kind] * lo.count * itemsize for lo in ops),
                       np.float64, len(ops))
    return np.bincount(chips, weights=work, minlength=n_chips) / (hbm * 1e3)


def _folded(st):
    """Per transfer: Xfer.fold, or None when the round has none (the common case)."""
    f = st.fold
    return f if f is not None and f.any() else None


def _leading_copies(step, seen_round: bool) -> bool:
    return (not seen_round and isinstance(step, Locals)
            and all(lo.kind == "copy" and lo.src_buf == "in" for lo in step.ops))


def priced_steps(schedule, view, itemsize: int, sliced: bool | None = None,
                 step_us: float = 0.0):
    """Each step of ``schedule`` with its modeled times, in order:
    ``("locals", step, per_chip_us, time_us)`` or ``("round", hops, hop_t, chain,
    red_t, time_us)`` (``hops`` a lowering.RoundHops; ``hop_t`` per hop, ``chain`` and
    ``red_t`` per transfer, all in microseconds; ``time_us`` includes ``step_us`` for
    a round that moves anything). Leading copies come as a locals step of time 0.
    ``price`` sums them; the modeled timeline (model/timeline.py) lays them out."""
    lw = lowerer(view)
    steps = lw.lower(schedule, itemsize)
    l_src, l_dst, l_bw, l_lat, l_efa = lw.links.arrays()
    l_intra = l_src == l_dst
    hbm = view.topo.spec.hbm_GBps
    nc = lw.n_chips
    seen_round = False
    for st in steps:
        if _leading_copies(st, seen_round):
            yield ("locals", st, np.zeros(nc), 0.0)
            continue
        if isinstance(st, Locals):
            per_chip = _locals_per_chip(st, lw.chip, itemsize, hbm, nc)
            yield ("locals", st, per_chip, float(per_chip.max()) if len(per_chip) else 0.0)
            continue
        seen_round = True
        if st.n_xfers == 0:
            e = np.zeros(0)
            yield ("round", st, e, e, e, 0.0, e)
            continue
        fold = _folded(st)
        moved = st.nbytes if fold is None else np.where(fold[st.xfer], 0.0, st.nbytes)
        load = np.bincount(st.link, weights=moved, minlength=len(l_bw))
        hop_load = load[st.link]
        intra = l_intra[st.link]
        if intra.any():
            hop_load[intra] = moved[intra]
        efa = l_efa[st.link]
        if efa.any():
            src_c, dst_c = l_src[st.link[efa]], l_dst[st.link[efa]]
            out_nic = np.bincount(src_c, weights=moved[efa], minlength=nc)
            in_nic = np.bincount(dst_c, weights=moved[efa], minlength=nc)
            hop_load[efa] = np.maximum(out_nic[src_c], in_nic[dst_c])
        hop_t = l_lat[st.link] + hop_load / (l_bw[st.link] * 1e3)
        reduce = st.reduce
        if fold is not None:
            hop_t[fold[st.xfer]] = 0.0
            reduce = reduce & ~fold
        chain = np.bincount(st.xfer, weights=hop_t, minlength=st.n_xfers)
        red_t = np.zeros(st.n_xfers)
        if reduce.any():
            work = np.bincount(st.dst_chip[reduce],
                               weights=REDUCE_DELIVERY_TRAFFIC * st.xfer_bytes[reduce],
                               minlength=nc)
            if fold is not None:
                work += np.bincount(st.dst_chip[fold],
                                    weights=FOLD_TRAFFIC * st.xfer_bytes[fold], minlength=nc)
            red_t[reduce] = work[st.dst_chip[reduce]] / (hbm * 1e3)
        k = st.slices if sliced is None else (2 if sliced else 1)
        if k > 1:
            total = (chain + red_t) / k + (k - 1) / k * np.maximum(chain, red_t)
        else:
            total = chain + red_t
        yield ("round", st, hop_t, chain, red_t, float(total.max()) + step_us, total)


def price(schedule, view, itemsize: int, sliced: bool | None = None,
          floor_us: float = 0.0, step_us: float = 0.0) -> Cost:
    """The modeled time of ``schedule`` on ``view``'s topology, in microseconds,
    plus ``floor_us`` (the runtime's per-call cost) and ``step_us`` for every round
    that moves anything (the runtime's per-step handshake). ``sliced``: overlap reductions
    with transfers as if every round had 2 slices (True) or 1 (False); default: each
    round's own ``slices``."""
    items = list(priced_steps(schedule, view, itemsize, sliced, step_us))  # lowers first
    lw = lowerer(view)
    kinds = np.asarray(lw.links.kind, object)
    cost = Cost(floor_us, floor_us=floor_us)
    by_kind = np.zeros(len(kinds))
    for item in items:
        if item[0] == "locals":
            cost.local_us += item[3]
            cost.time_us += item[3]
            continue
        st = item[1]
        cost.rounds += 1
        if st.n_xfers == 0:
            continue
        _, st, hop_t, chain, red_t, _t, total = item
        cost.steps_us += step_us
        cost.time_us += step_us
        fold = _folded(st)
        if fold is None:
            cost.hops += len(st.link)
            by_kind += np.bincount(st.link, weights=st.nbytes, minlength=len(by_kind))
        else:  # folded transfers cross no link
            live = ~fold[st.xfer]
            cost.hops += int(live.sum())
            by_kind += np.bincount(st.link[live], weights=st.nbytes[live],
                                   minlength=len(by_kind))
        k = int(np.argmax(total))
        cost.transfer_us += float(chain[k])
        cost.reduce_us += float(red_t[k])
        cost.time_us += float(total[k])
    cost.bytes_by_kind = {}
    for kd, b in zip(kinds, by_kind):
        cost.bytes_by_kind[kd] = cost.bytes_by_kind.get(kd, 0) + int(b)
    return cost
