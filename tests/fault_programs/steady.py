"""Steady state: the same calls, repeated, keep nothing per call.

    mpiexec -n 4 python -m mpi4py tests/fault_programs/steady.py [ROUNDS]

One round is a fixed list of calls on the world and on the halves (every
collective, sync and async, with the argument agreement on; send/recv around a
ring; a rejected argument), so after a warm-up round every cache holds all the
plans and schedules it will ever hold. The program runs 24 warm-up rounds (the
flight recorder full), counts
(benchmarks/soak.py's ``census`` and ``probe``) the entries of every per-rank
structure that lives across calls and the objects the cycle collector tracks, runs
ROUNDS more rounds (default 40) and counts again (the objects also half-way, so
that a one-time offset, which lands in the first half, is told from growth per call). A structure that keeps an entry
per call (the engine's inbox, executions in flight, sequence-keyed dicts, the flight
recorder past its depth) or Python objects kept per call show as growth; every rank
prints one JSON line ``steady {...}`` with the counts before and after.
"""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

import neuron_mpi as nm
from neuron_mpi.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)


WARM_ROUNDS = 24  # > 256 calls per communicator: the flight recorder is full, and its
# entries hold call numbers past the small ints Python keeps as singletons


def one_round(w, half, r, fails):
    n = w.size
    x = (np.arange(8 * n) % 7 + r).astype(np.float32)
    for c in (w, half):
        g = c.size
        xs = x[:4 * g]
        got = c.all_reduce(xs, timeout=60)
        want0 = float(sum(c.ranks))  # element 0 of each member's x is its world rank
        if float(got[0]) != want0:
            fails.append(f"all_reduce on {g}: got {got[0]}, want {want0}")
        c.all_gather(xs[:3], timeout=60)
        c.reduce_scatter(xs, op="max", timeout=60)
        c.all_to_all(xs, timeout=60)
        counts = [q % 3 for q in range(g)]
        c.all_gather_v(xs[:counts[c.rank]], counts, timeout=60)
        c.reduce_scatter_v(xs[:sum(counts)], counts, timeout=60)
        sc = [1] * g
        c.all_to_all_v(xs[:g], sc, sc, timeout=60)
        c.permute(xs[:5], [(i, (i + 1) % g) for i in range(g)], timeout=60)
        c.broadcast(xs[:6], root=g - 1, timeout=60)
        c.barrier(timeout=60)
        hs = [c.all_reduce(xs, async_op=True, timeout=60),
              c.all_gather(xs[:2], async_op=True, timeout=60)]
        for h in hs:
            h.wait()
        try:
            c.all_reduce(xs, op="bogus", timeout=60)
            fails.append("op='bogus' was accepted")
        except InvalidArgumentError:
            pass
    # point to point around the ring of the world
    out = np.empty(4, np.float32)
    if r % 2 == 0:
        w.send(x[:4], (r + 1) % n, timeout=60)
        w.recv(out, (r - 1) % n, timeout=60)
    else:
        w.recv(out, (r - 1) % n, timeout=60)
        w.send(x[:4], (r + 1) % n, timeout=60)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    w = nm.init()
    n, r = w.size, w.rank
    h = n // 2
    half = w.split([list(range(h)), list(range(h, n))], timeout=60)
    comms = [w, half]
    fails: list[str] = []
    for _ in range(WARM_ROUNDS):
        one_round(w, half, r, fails)
    w.barrier(timeout=60)
    soak.gc.collect()
    before = dict(zip(soak.PROBE, soak.probe(True))), dict(zip(soak.CENSUS,
                                                           soak.census(w, comms)))
    seq0 = w._seq
    middle = None
    for k in range(rounds):
        if k == rounds // 2:
            w.barrier(timeout=60)
            soak.gc.collect()
            middle = dict(zip(soak.PROBE, soak.probe(True)))
        one_round(w, half, r, fails)
    w.barrier(timeout=60)
    soak.gc.collect()
    after = dict(zip(soak.PROBE, soak.probe(True))), dict(zip(soak.CENSUS,
                                                          soak.census(w, comms)))
    print("steady " + json.dumps({
        "rank": r, "rounds": rounds, "world_calls": w._seq - seq0, "fails": fails[:5],
        "probe_before": before[0], "probe_middle": middle, "probe_after": after[0],
        "census_before": before[1], "census_after": after[1],
        "recorder_depth": w._recorder.entries.maxlen}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
