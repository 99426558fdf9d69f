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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..schedule import Locals
from .lowering import lowerer

#: HBM bytes read + written per element byte, for each kind of local work
LOCAL_TRAFFIC = {"copy": 2.0, "reduce": 3.0, "divide": 2.0, "zero": 1.0}
REDUCE_DELIVERY_TRAFFIC = 3.0



@dataclass
class Cost:
    time_us: float
    rounds: int = 0
    hops: int = 0
    transfer_us: float = 0.0  # sum over rounds of the slowest transfer's hops
    reduce_us: float = 0.0  # sum over rounds of the reduction on that transfer
    local_us: float = 0.0  # sum over Locals steps
    bytes_by_kind: dict = field(default_factory=dict)  # link kind -> bytes (all hops)

    def as_dict(self) -> dict:
        return {"time_us": self.time_us, "rounds": self.rounds, "hops": self.hops,
                "transfer_us": self.transfer_us, "reduce_us": self.reduce_us,
                "local_us": self.local_us, "bytes_by_kind": dict(self.bytes_by_kind)}


def _locals_per_chip(step: Locals, member_chip: np.ndarray, itemsize: int, hbm: float,
                     n_chips: int) -> np.ndarray:
    """Microseconds of HBM work per chip for one Locals step."""
    if not step.ops:
        return np.zeros(n_chips)
    chips = np.fromiter((member_chip[lo.rank] for lo in step.ops), np.int64, len(step.ops))
    work = np.fromiter((LOCAL_TRAFFIC[lo.kind] * lo.count * itemsize for lo in step.ops),
                       np.float64, len(step.ops))
    return np.bincount(chips, weights=work, minlength=n_chips) / (hbm * 1e3)


def priced_steps(schedule, view, itemsize: int):
    """Each step of ``schedule`` with its modeled times, in order:
    ``("locals", step, per_chip_us, time_us)`` or ``("round", hops, hop_t, chain,
    red_t, time_us)`` (``hops`` a lowering.RoundHops; ``hop_t`` per hop, ``chain`` and
    ``red_t`` per transfer, all in microseconds). ``price`` sums them; the modeled
    timeline (model/timeline.py) lays them out."""
    lw = lowerer(view)
    steps = lw.lower(schedule, itemsize)
    l_src, l_dst, l_bw, l_lat, l_efa = lw.links.arrays()
    hbm = view.topo.spec.hbm_GBps
    nc = lw.n_chips
    for st in steps:
        if isinstance(st, Locals):
            per_chip = _locals_per_chip(st, lw.chip, itemsize, hbm, nc)
            yield ("locals", st, per_chip, float(per_chip.max()) if len(per_chip) else 0.0)
            continue
        if st.n_xfers == 0:
            e = np.zeros(0)
            yield ("round", st, e, e, e, 0.0)
            continue
        load = np.bincount(st.link, weights=st.nbytes, minlength=len(l_bw))
        hop_load = load[st.link]
        efa = l_efa[st.link]
        if efa.any():
            src_c, dst_c = l_src[st.link[efa]], l_dst[st.link[efa]]
            out_nic = np.bincount(src_c, weights=st.nbytes[efa], minlength=nc)
            in_nic = np.bincount(dst_c, weights=st.nbytes[efa], minlength=nc)
            hop_load[efa] = np.maximum(out_nic[src_c], in_nic[dst_c])
        hop_t = l_lat[st.link] + hop_load / (l_bw[st.link] * 1e3)
        chain = np.bincount(st.xfer, weights=hop_t, minlength=st.n_xfers)
        red_t = np.zeros(st.n_xfers)
        if st.reduce.any():
            work = np.bincount(st.dst_chip[st.reduce],
                               weights=REDUCE_DELIVERY_TRAFFIC * st.xfer_bytes[st.reduce],
                               minlength=nc)
            red_t[st.reduce] = work[st.dst_chip[st.reduce]] / (hbm * 1e3)
        yield ("round", st, hop_t, chain, red_t, float((chain + red_t).max()))


def price(schedule, view, itemsize: int) -> Cost:
    """The modeled time of ``schedule`` on ``view``'s topology, in microseconds."""
    items = list(priced_steps(schedule, view, itemsize))  # lowers (meets the links) first
    lw = lowerer(view)
    kinds = np.asarray(lw.links.kind, object)
    cost = Cost(0.0)
    by_kind = np.zeros(len(kinds))
    for item in items:
        if item[0] == "locals":
            t = item[3]
            cost.local_us += t
            cost.time_us += t
            continue
        _, st, hop_t, chain, red_t, _t = item
        cost.rounds += 1
        if st.n_xfers == 0:
            continue
        cost.hops += len(st.link)
        by_kind += np.bincount(st.link, weights=st.nbytes, minlength=len(by_kind))
        total = chain + red_t
        k = int(np.argmax(total))
        cost.transfer_us += float(chain[k])
        cost.reduce_us += float(red_t[k])
        cost.time_us += float(total[k])
    cost.bytes_by_kind = {}
    for kd, b in zip(kinds, by_kind):
        cost.bytes_by_kind[kd] = cost.bytes_by_kind.get(kd, 0) + int(b)
    return cost
