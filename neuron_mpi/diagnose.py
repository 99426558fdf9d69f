"""Merge per-rank flight-recorder dumps and name where the ranks diverge.

    python -m neuron_mpi.diagnose DIR

DIR holds ``rank<N>.json`` files written on timeout or error (NEURON_MPI_TRACE_DIR).
For every communicator the calls are lined up by sequence number; the first
sequence number where the ranks' operations, counts or dtypes differ, or where some
rank never finished (or never started) the call, is reported with the ranks on each
side. Exit status: 0 when nothing diverges, 1 when something does, 2 on bad input.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from .agree import ranks_text

KEYS = ("op", "count", "dtype", "algorithm")


def load(folder: str) -> dict[int, dict]:
    dumps = {}
    for path in sorted(glob.glob(os.path.join(folder, "rank*.json"))):
        with open(path) as f:
            d = json.load(f)
        dumps[int(d["rank"])] = d
    return dumps


def divergences(dumps: dict[int, dict]) -> list[str]:
    """Human-readable findings, first divergence per communicator."""
    by_comm: dict[int, dict[int, dict[int, dict]]] = {}
    for rank, d in dumps.items():
        for call in d["calls"]:
            by_comm.setdefault(call["comm"], {}).setdefault(rank, {})[call["seq"]] = call
    members: dict[int, list[int]] = {}
    for d in dumps.values():
        for k, v in d.get("comms", {}).items():
            members[int(k)] = v
    out = []
    for comm, ranks in sorted(by_comm.items()):
        silent = [r for r in members.get(comm, []) if r not in dumps]
        seqs = sorted({s for calls in ranks.values() for s in calls})
        # only compare the window every rank still remembers
        lo = max(min(calls) for calls in ranks.values())
        for seq in (s for s in seqs if s >= lo):
            present = {r: calls.get(seq) for r, calls in ranks.items()}
            missing = [r for r, c in present.items() if c is None]
            calls = {r: c for r, c in present.items() if c is not None}
            if not missing and all(c["state"] == "refused" for c in calls.values()):
                continue  # refused alike on every member (one member's arguments): the
                # members' entries differ (the refusing rank's is not worked out)
            sigs: dict[tuple, list[int]] = {}
            for r, c in calls.items():
                sigs.setdefault(tuple(c.get(k) for k in KEYS), []).append(r)
            unfinished = [r for r, c in calls.items() if c["state"] != "done"]
            if len(sigs) > 1 or missing or unfinished:
                parts = []
                if len(sigs) > 1:
                    for sig, rs in sorted(sigs.items(), key=lambda kv: kv[1][0]):
                        desc = ", ".join(f"{k}={v}" for k, v in zip(KEYS, sig))
                        parts.append(f"rank {ranks_text(rs)} called {desc}")
                if missing:
                    parts.append(f"rank {ranks_text(missing)} never called it")
                if silent:
                    parts.append(f"rank {ranks_text(silent)} left no dump (exited, killed, "
                                 "or still waiting elsewhere)")
                for state in ("failed", "started"):
                    rs = [r for r in unfinished if calls[r]["state"] == state]
                    if rs:
                        errs = {calls[r].get("error") for r in rs} - {None}
                        why = f" ({sorted(errs)[0]})" if errs else ""
                        parts.append(f"rank {ranks_text(rs)} {state} but did not finish{why}")
                starts = {r: c["t_start"] for r, c in calls.items() if c.get("t_start")}
                if len(starts) > 1:
                    first = min(starts.values())
                    late = max(starts, key=starts.get)
                    others = sorted(v for r, v in starts.items() if r != late)
                    lag = starts[late] - others[-1]
                    if lag > 0.5:
                        parts.append(f"rank {late} called it last, {lag:.1f} s after the "
                                     f"others ({starts[late] - first:.1f} s after the first)")
                op = next(iter(calls.values()))["op"] if calls else "?"
                out.append(f"communicator {comm:x}: first divergence at call {seq} ({op}): "
                           + "; ".join(parts))
                break
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m neuron_mpi.diagnose",
                                 description="Merge flight-recorder dumps; name the first "
                                             "rank/sequence where ranks diverge.")
    ap.add_argument("dir", help="the NEURON_MPI_TRACE_DIR of a failed run")
    args = ap.parse_args(argv)
    dumps = load(args.dir)
    if not dumps:
        print(f"neuron_mpi.diagnose: error: no rank*.json dumps in {args.dir}", file=sys.stderr)
        return 2
    print(f"{len(dumps)} rank dumps: ranks {ranks_text(dumps)}")
    for r, d in sorted(dumps.items()):
        if d.get("reason"):
            print(f"  rank {r}: {d['reason']}")
    found = divergences(dumps)
    for line in found:
        print(line)
    if not found:
        print("no divergence among the recorded calls")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
