"""The modeled run as a timeline (trace-event JSON, as neuron_mpi.timeline writes for
the emulated run), so the two can be opened side by side (docs/trace.md).

Times are the time model's (model/cost.py), in microseconds of the real hardware;
calls are laid back to back from 0. Tracks:

* a process per node with a thread per rank (named like the emulated run's): a slice
  per call, and inside it a slice per step the rank takes part in (the steps of its
  executor plan), from the step's start to the end of the rank's last transfer in
  it (or of its chip's local work);
* in the same process, a thread per chip: a slice per step the chip takes part in;
* a process "links" with a thread per directed link: per round, a slice from the
  first hop on it to the last one's end, labelled with the bytes it carried;
* a flow arrow per transfer between different ranks, from the sender's step to the
  receiver's, named with the links it crosses and its bytes. Folded transfers
  (``Xfer.fold``: data the hardware reads in place, by no DMA of its own) get no
  arrow and load no link; their ranks' slices last as long as their other work.
"""
from __future__ import annotations

import numpy as np

from ..timeline import human, link_name, metadata, rank_thread_name
from .cost import priced_steps
from .lowering import lowerer

CHIP_TID = 1_000_000


def _r(x: float) -> float:
    return round(float(x), 3)


def _dur(t: float, d: float) -> float:
    """The duration from the rounded start to the rounded end, so that back-to-back
    slices stay back to back after rounding."""
    return round(_r(t + d) - _r(t), 3)


def build(view, calls) -> dict:
    """``calls``: [(label, schedule, itemsize, args)] run one after the other on
    ``view`` (a GroupView); ``args`` may give the runtime's ``floor_us`` (a gap at the
    start of the call) and ``step_us`` (added to every round). Returns the trace-event
    document."""
    topo = view.topo
    lw = lowerer(view)
    ranks = list(view.ranks)
    member_chip = [topo.global_chip(r) for r in ranks]
    ev: list[dict] = []
    for node in range(topo.nodes):
        pid = node + 1
        ev.append(metadata(pid, None, "process_name",
                           f"node {node} · {topo.instance} LNC={topo.lnc} (modeled)"))
        ev.append(metadata(pid, None, "process_sort_index", node))
    for m, r in enumerate(ranks):
        pid = topo.placement(r).node + 1
        ev.append(metadata(pid, r + 1, "thread_name", rank_thread_name(topo, r)))
        ev.append(metadata(pid, r + 1, "thread_sort_index", r))
    chips = sorted(set(member_chip))
    for g in chips:
        node, c = divmod(g, topo.chips_per_node)
        ev.append(metadata(node + 1, CHIP_TID + g, "thread_name", f"chip {c}"))
        ev.append(metadata(node + 1, CHIP_TID + g, "thread_sort_index", 100_000 + g))
    link_pid = topo.nodes + 1
    ev.append(metadata(link_pid, None, "process_name", "links (modeled)"))
    ev.append(metadata(link_pid, None, "process_sort_index", topo.nodes))
    named_links: set = set()
    t = 0.0
    flows = nsteps = 0
    for label, sched, itemsize, args in calls:
        start = t
        own_steps = [0] * len(ranks)
        step_events: list[dict] = []
        t += args.get("floor_us", 0.0)  # the runtime's fixed cost of the call: a gap
        for item, step in zip(priced_steps(sched, view, itemsize, None,
                                           args.get("step_us", 0.0)), sched.steps):
            dur = item[3] if item[0] == "locals" else item[5]
            if item[0] == "locals":
                per_chip = item[2]
                members = sorted({lo.rank for lo in step.ops})
                for m in members:
                    r = ranks[m]
                    own_steps[m] += 1
                    step_events.append(_slice(topo, r + 1, r, "locals", t,
                                              per_chip[member_chip[m]], own_steps[m]))
                for g in sorted({member_chip[m] for m in members}):
                    step_events.append(_chip_slice(topo, g, "locals", t, per_chip[g]))
                t += dur
                continue
            _, st, hop_t, _, _, _, total = item
            xfers = step.xfers
            end_of = np.zeros(len(ranks))
            for i, x in enumerate(xfers):
                done = total[i] if st.n_xfers else 0.0
                end_of[x.src] = max(end_of[x.src], done)
                end_of[x.dst] = max(end_of[x.dst], done)
            members = sorted({x.src for x in xfers} | {x.dst for x in xfers})
            for m in members:
                r = ranks[m]
                own_steps[m] += 1
                step_events.append(_slice(topo, r + 1, r, "round", t, end_of[m], own_steps[m]))
            by_chip: dict = {}
            for m in members:
                by_chip[member_chip[m]] = max(by_chip.get(member_chip[m], 0.0), end_of[m])
            for g, d in sorted(by_chip.items()):
                step_events.append(_chip_slice(topo, g, "round", t, d))
            if st.n_xfers:
                # hops: sequential within a transfer (store and forward)
                begin = np.zeros(len(hop_t))
                offset = np.zeros(st.n_xfers)
                for h in range(len(hop_t)):  # per transfer, its hops in order
                    x = st.xfer[h]
                    begin[h] = offset[x]
                    offset[x] += hop_t[h]
                per_link: dict = {}
                folded = st.fold if st.fold is not None else np.zeros(st.n_xfers, bool)
                for h in range(len(hop_t)):
                    if folded[st.xfer[h]]:
                        continue
                    lk = int(st.link[h])
                    a, b = begin[h], begin[h] + hop_t[h]
                    cur = per_link.get(lk)
                    per_link[lk] = [min(cur[0], a), max(cur[1], b), cur[2] + st.nbytes[h],
                                    cur[3] + 1] if cur else [a, b, st.nbytes[h], 1]
                for lk, (a, b, nb, nh) in sorted(per_link.items()):
                    tid = lk + 1
                    if lk not in named_links:
                        named_links.add(lk)
                        ga, gb = lw.links.src_chip[lk], lw.links.dst_chip[lk]
                        ev.append(metadata(link_pid, tid, "thread_name",
                                           f"chip {ga} -> chip {gb} {lw.links.kind[lk]}"))
                        ev.append(metadata(link_pid, tid, "thread_sort_index", lk))
                    step_events.append({"ph": "X", "cat": "link", "name": human(int(nb)),
                                        "pid": link_pid, "tid": tid, "ts": _r(t + a),
                                        "dur": _dur(t + a, b - a), "args": {"bytes": int(nb),
                                                                   "hops": nh}})
            for i, x in enumerate(xfers):
                src, dst = ranks[x.src], ranks[x.dst]
                if src == dst or x.fold:
                    continue
                flows += 1
                nbytes = x.count * itemsize
                name = f"{link_name(topo, src, dst)} {human(nbytes)}"
                fargs = {"from": src, "to": dst, "bytes": nbytes}
                done = total[i]
                step_events.append({"ph": "s", "cat": "transfer", "name": name, "id": flows,
                                    "pid": topo.placement(src).node + 1, "tid": src + 1,
                                    "ts": _r(t), "args": fargs})
                step_events.append({"ph": "f", "bp": "e", "cat": "transfer", "name": name,
                                    "id": flows, "pid": topo.placement(dst).node + 1,
                                    "tid": dst + 1, "ts": _r(t + done), "args": fargs})
            t += dur
        for m, r in enumerate(ranks):
            ev.append({"ph": "X", "cat": "call", "name": label, "pid": topo.placement(r).node + 1,
                       "tid": r + 1, "ts": _r(start), "dur": _dur(start, t - start),
                       "args": dict(args, steps=own_steps[m])})
        nsteps += sum(own_steps)
        ev.extend(step_events)
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"kind": "modeled", "instance": topo.instance, "lnc": topo.lnc,
                          "nodes": topo.nodes, "ranks": view.size, "calls": len(calls),
                          "steps": nsteps, "flows": flows, "time_us": _r(t)}}


def _slice(topo, tid, rank, kind, t, dur, k) -> dict:
    return {"ph": "X", "cat": "step", "name": kind, "pid": topo.placement(rank).node + 1,
            "tid": tid, "ts": _r(t), "dur": _dur(t, dur), "args": {"step": k}}


def _chip_slice(topo, g, kind, t, dur) -> dict:
    return {"ph": "X", "cat": "chip", "name": kind, "pid": g // topo.chips_per_node + 1,
            "tid": CHIP_TID + g, "ts": _r(t), "dur": _dur(t, dur)}

