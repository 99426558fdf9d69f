"""Timelines in the Chrome trace-event format (the JSON ui.perfetto.dev and
chrome://tracing open; docs/trace.md).

``merge(folder)`` turns the per-rank files of a traced run (``neuron_mpi.tracing``)
into one document: a process per emulated node, a thread per rank named with its chip
and core, a slice per call and one per step inside it, and a flow arrow per transfer
from the sender's step to the receiver's, named with the links it crossed and its
bytes. ``neuron_mpi.model.timeline`` writes the modeled run in the same shape.
``check(doc)`` validates a document: the fields each event phase needs, slices that
nest on every thread, flows that pair up and sit inside slices.

Event phases used: ``M`` (names and sort order), ``X`` (complete slices, ``ts`` and
``dur`` in microseconds), ``s`` / ``f`` (flow start and end; ``f`` binds to the
enclosing slice with ``"bp": "e"``).
"""
from __future__ import annotations

import glob
import json
import os
import re

from .errors import InvalidArgumentError

LANE = 100_000  # tid = rank + 1 + lane * LANE: overlapping (async) calls get more lanes


def human(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            v = nbytes / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{nbytes} B"


def link_name(topo, src: int, dst: int) -> str:
    """The links a transfer from world rank src to dst crosses: ``neuronlink``,
    ``neuronlink x2``, ``efa+neuronlink``, ``self``."""
    path = topo.route(src, dst)
    kinds = [topo.link_between_ranks(a, b).kind for a, b in zip(path, path[1:])]
    if not kinds:
        return "self"
    parts: list[list] = []
    for k in kinds:
        if parts and parts[-1][0] == k:
            parts[-1][1] += 1
        else:
            parts.append([k, 1])
    return "+".join(k if n == 1 else f"{k} x{n}" for k, n in parts)


def rank_thread_name(topo, rank: int) -> str:
    p = topo.placement(rank)
    return f"rank {rank} · chip {p.chip} core {p.core}"


def metadata(pid: int, tid: int | None, kind: str, value) -> dict:
    e = {"ph": "M", "pid": pid, "name": kind, "args": {}}
    if tid is not None:
        e["tid"] = tid
    e["args"]["name" if kind.endswith("_name") else "sort_index"] = value
    return e


def _us(ns: int, base: int) -> float:
    return round((ns - base) / 1000.0, 3)


# --- merging the ranks' files -----------------------------------------------------------
def load(folder) -> list[dict]:
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise InvalidArgumentError(f"DIR: {folder!r} is not a directory")
    paths = glob.glob(os.path.join(folder, "trace-rank*.json"))
    if not paths:
        raise InvalidArgumentError(f"DIR: no trace-rank*.json in {folder!r} (record with "
                                   "NEURON_MPI_TRACE=DIR or neuron_mpi.trace(DIR))")
    files = []
    for p in sorted(paths, key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[-1])):
        with open(p) as f:
            d = json.load(f)
        if d.get("schema") != "neuron-mpi-trace/1":
            raise InvalidArgumentError(f"DIR: {p} is not a neuron_mpi rank trace")
        files.append(d)
    tops = {json.dumps(d["topology"], sort_keys=True) for d in files}
    if len(tops) != 1:
        raise InvalidArgumentError(f"DIR: the files of {folder!r} come from different "
                                   "topologies (runs); record each run in its own folder")
    return files


def merge(folder) -> dict:
    """One trace-event document from the ``trace-rank*.json`` files in ``folder``."""
    from .topology import Topology

    files = load(folder)
    if len({d["host"] for d in files}) > 1:
        # several hosts: each file's monotonic clock onto the wall clock
        for d in files:
            shift = d["clock"]["wall_ns"] - d["clock"]["perf_ns"]
            for c in d["calls"]:
                c["t0"] += shift
                c["t1"] = None if c["t1"] is None else c["t1"] + shift
            for s in d["steps"]:
                s["t0"] += shift
                s["t1"] = None if s["t1"] is None else s["t1"] + shift
            for s in d["sends"]:
                s["t"] += shift
            for r in d["recvs"]:
                r["t0"] += shift
                r["t1"] += shift
    t = files[0]["topology"]
    topo = Topology(t["instance"], t["lnc"], t["nodes"], t["ranks"])
    times = [c["t0"] for d in files for c in d["calls"]]
    base = min(times) if times else 0
    ev: list[dict] = []
    for node in range(topo.nodes):
        ev.append(metadata(node + 1, None, "process_name",
                           f"node {node} · {topo.instance} LNC={topo.lnc} (emulated)"))
        ev.append(metadata(node + 1, None, "process_sort_index", node))
    where: dict[tuple, tuple] = {}  # (comm, seq, rank) -> (pid, tid) of the call's lane
    flows = {"n": 0}
    sends: list[tuple] = []
    recvs: dict[tuple, tuple] = {}
    ncalls = nsteps = 0
    for d in files:
        rank = d["rank"]
        pid = topo.placement(rank).node + 1
        lanes: list[int] = []  # end time of each lane's last call
        steps: dict[tuple, list] = {}
        for s in d["steps"]:
            steps.setdefault((s["comm"], s["seq"]), []).append(s)
        for c in sorted(d["calls"], key=lambda c: c["t0"]):
            t1 = c["t1"]
            own = steps.get((c["comm"], c["seq"]), [])
            if t1 is None:  # never finished (the program failed): up to its last record
                t1 = max([c["t0"]] + [s["t1"] or s["t0"] for s in own])
            lane = next((i for i, end in enumerate(lanes) if end <= c["t0"]), len(lanes))
            if lane == len(lanes):
                lanes.append(t1)
                tid = rank + 1 + lane * LANE
                suffix = "" if lane == 0 else f" (overlapping calls {lane})"
                ev.append(metadata(pid, tid, "thread_name", rank_thread_name(topo, rank) + suffix))
                ev.append(metadata(pid, tid, "thread_sort_index", rank * 16 + lane))
            lanes[lane] = t1
            tid = rank + 1 + lane * LANE
            where[(c["comm"], c["seq"], rank)] = (pid, tid)
            args = {k: c[k] for k in ("algorithm", "bytes", "dtype", "size", "steps", "seq",
                                      "comm")}
            if c["error"]:
                args["error"] = c["error"]
            ev.append({"ph": "X", "cat": "call", "name": c["op"], "pid": pid, "tid": tid,
                       "ts": _us(c["t0"], base), "dur": _us(t1, c["t0"]), "args": args})
            ncalls += 1
            for s in sorted(own, key=lambda s: s["step"]):
                s1 = s["t1"] if s["t1"] is not None else t1
                ev.append({"ph": "X", "cat": "step", "name": s["kind"], "pid": pid,
                           "tid": tid, "ts": _us(s["t0"], base), "dur": _us(s1, s["t0"]),
                           "args": {"step": s["step"] + 1, "of": c["steps"],
                                    "transfers_out": s["sends"],
                                    "transfers_in": s["recvs"]}})
                nsteps += 1
        for s in d["sends"]:
            sends.append((s["comm"], s["seq"], s["xid"], rank, s["dst"], s["bytes"], s["t"]))
        for r in d["recvs"]:
            recvs[(r["comm"], r["seq"], r["xid"], r["src"], rank)] = (r["bytes"], r["t1"])
    for comm, seq, xid, src, dst, nbytes, t in sorted(sends, key=lambda s: s[-1]):
        got = recvs.get((comm, seq, xid, src, dst))
        a, b = where.get((comm, seq, src)), where.get((comm, seq, dst))
        if got is None or a is None or b is None:
            continue  # never delivered (a failed run)
        flows["n"] += 1
        fid = flows["n"]
        name = f"{link_name(topo, src, dst)} {human(nbytes)}"
        args = {"from": src, "to": dst, "bytes": nbytes, "transfer": xid}
        ev.append({"ph": "s", "cat": "transfer", "name": name, "id": fid, "pid": a[0],
                   "tid": a[1], "ts": _us(t, base), "args": args})
        ev.append({"ph": "f", "bp": "e", "cat": "transfer", "name": name, "id": fid,
                   "pid": b[0], "tid": b[1], "ts": _us(got[1], base), "args": args})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"kind": "emulated", "instance": topo.instance, "lnc": topo.lnc,
                          "nodes": topo.nodes, "ranks": topo.size, "calls": ncalls,
                          "steps": nsteps, "flows": flows["n"]}}


def write(doc: dict, path) -> None:
    path = os.fspath(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))


# --- checking a document ------------------------------------------------------------------
_NEEDS = {"X": ("name", "ts", "dur", "pid", "tid"), "M": ("name", "pid", "args"),
          "s": ("name", "cat", "id", "ts", "pid", "tid"),
          "f": ("name", "cat", "id", "ts", "pid", "tid")}
_META_NAMES = ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
EPS = 1.5e-3  # us: timestamps are written to the nanosecond, rounded


def check(doc) -> list[str]:
    """Problems with a trace-event document (empty: valid). Checks the JSON object
    form, every event's phase and fields, that the slices of each thread nest, that
    every flow id has one start and one end no earlier than it, and that each flow
    event lies inside a slice of its thread."""
    bad: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not a JSON object with a traceEvents list"]
    slices: dict[tuple, list] = {}
    flows: dict = {}
    for i, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph not in _NEEDS:
            bad.append(f"event {i}: unknown phase {ph!r}")
            continue
        missing = [k for k in _NEEDS[ph] if k not in e]
        if missing:
            bad.append(f"event {i} ({ph}): missing {', '.join(missing)}")
            continue
        if ph == "M":
            if e["name"] not in _META_NAMES:
                bad.append(f"event {i}: unknown metadata {e['name']!r}")
            continue
        if not isinstance(e["ts"], (int, float)) or e["ts"] < 0:
            bad.append(f"event {i}: bad ts {e['ts']!r}")
            continue
        if ph == "X":
            if not isinstance(e["dur"], (int, float)) or e["dur"] < 0:
                bad.append(f"event {i}: bad dur {e['dur']!r}")
                continue
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], i))
        else:
            flows.setdefault(e["id"], []).append(e)
    for key, ss in slices.items():
        ss.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple] = []
        for s in ss:
            while stack and stack[-1][1] <= s[0] + EPS:
                stack.pop()
            if stack and s[1] > stack[-1][1] + EPS:
                bad.append(f"thread {key}: slice {s[2]} [{s[0]}, {s[1]}] overlaps slice "
                           f"{stack[-1][2]} [{stack[-1][0]}, {stack[-1][1]}] without nesting")
            stack.append(s)
    for fid, es in flows.items():
        phases = sorted(e["ph"] for e in es)
        if phases != ["f", "s"]:
            bad.append(f"flow {fid}: phases {phases}, expected one s and one f")
            continue
        s = next(e for e in es if e["ph"] == "s")
        f = next(e for e in es if e["ph"] == "f")
        if f["ts"] + EPS < s["ts"]:
            bad.append(f"flow {fid}: ends at {f['ts']} before it starts at {s['ts']}")
        for e in (s, f):
            inside = any(a - EPS <= e["ts"] <= b + EPS
                         for a, b, _ in slices.get((e["pid"], e["tid"]), ()))
            if not inside:
                bad.append(f"flow {fid}: its {e['ph']} event at {e['ts']} is in no slice of "
                           f"thread {(e['pid'], e['tid'])}")
    return bad


def step_counts(doc, cat_call: str = "call") -> dict[tuple, list[int]]:
    """Per thread name: the number of step slices inside each call slice, in order
    (for comparing a timeline with its schedule)."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    per: dict = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            per.setdefault((e["pid"], e["tid"]), []).append(e)
    out: dict = {}
    for key, es in per.items():
        calls = sorted((e for e in es if e.get("cat") == cat_call), key=lambda e: e["ts"])
        steps = [e for e in es if e.get("cat") == "step"]
        counts = []
        for c in calls:
            a, b = c["ts"], c["ts"] + c["dur"]
            counts.append(sum(1 for s in steps if a - EPS <= s["ts"] and
                              s["ts"] + s["dur"] <= b + EPS))
        out[names.get(key, str(key))] = counts
    return out
