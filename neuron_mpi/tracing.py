"""Recording a timeline of the emulated run (docs/trace.md).

Turn it on with ``NEURON_MPI_TRACE=DIR`` (from ``init()`` to the end of the program)
or with ``with neuron_mpi.trace(DIR): ...`` (the calls made inside the block). Each
rank then writes ``DIR/trace-rank<R>.json``; ``neuron-mpi trace DIR -o run.json``
merges them into one Chrome trace-event file (``neuron_mpi.timeline``) for
ui.perfetto.dev or chrome://tracing.

What is recorded, per rank:

* a call: communicator id, sequence number, operation, algorithm, bytes, dtype, group
  size, its number of steps on this rank, begin and end;
* a step of the call's plan (a round of transfers, or local work): begin and end;
* a transfer this rank sends (its first piece is posted) and one it receives (its
  pieces delivered): the schedule's transfer id, the peer, the bytes.

Cost when off: the module attribute ``ACTIVE`` is None. The communicator reads it
once per call, and the execution keeps what it read, so the executor's hot paths
check one attribute and call nothing. While a recorder is active, plans run on the
Python path of the executor (not the compiled data plane, whose steps are not
visible from Python), which is slower: a traced run shows the structure and the
order of events, not the untraced speed.

Threads: calls are recorded on the caller's thread, steps and transfers on whichever
thread advances the execution (the caller, or the engine's agent, the "CC core").
Every record is one append or one dict store (atomic under the GIL), and the
executor records with the engine's lock held. Times are ``time.perf_counter_ns()``
(CLOCK_MONOTONIC on Linux: one clock for every process of a host). Each file also
holds its host name and a (perf_counter, wall clock) pair read at the start, which
the merger uses to line up ranks of different hosts.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time

SCHEMA = "neuron-mpi-trace/1"

#: the recorder in use, or None (tracing off)
ACTIVE: "Recorder | None" = None

#: this process's world rank and topology, set by ``neuron_mpi.init``
_META: dict = {}


class Recorder:
    def __init__(self, folder: str):
        self.folder = str(folder)
        best = None
        for _ in range(5):  # the pair read closest together
            a = time.perf_counter_ns()
            w = time.time_ns()
            b = time.perf_counter_ns()
            if best is None or b - a < best[0]:
                best = (b - a, (a + b) // 2, w)
        self.perf0, self.wall0 = best[1], best[2]
        self.calls: list[list] = []
        self.steps: dict[tuple, list] = {}  # (comm, seq, k) -> [kind, sends, recvs, t0, t1]
        self.sends: list[tuple] = []  # (comm, seq, xid, dst, bytes, t)
        self.recvs: dict[tuple, list] = {}  # (comm, seq, xid) -> [src, bytes, t_first, t_last]

    # --- the hooks ---------------------------------------------------------------
    def call_begin(self, comm, seq, op, algorithm, nbytes, dtype, size, nsteps) -> list:
        c = [comm, seq, op, algorithm, nbytes, dtype, size, nsteps,
             time.perf_counter_ns(), None, None]
        self.calls.append(c)
        return c

    @staticmethod
    def call_end(c: list, error: BaseException | None = None) -> None:
        if c[9] is None:
            c[9] = time.perf_counter_ns()
            if error is not None:
                c[10] = f"{type(error).__name__}: {error}"

    def step_begin(self, comm, seq, k, kind, nsends=0, nrecvs=0) -> None:
        self.steps[(comm, seq, k)] = [kind, nsends, nrecvs, time.perf_counter_ns(), None]

    def step_end(self, comm, seq, k) -> None:
        s = self.steps.get((comm, seq, k))
        if s is not None:
            s[4] = time.perf_counter_ns()

    def sent(self, comm, seq, xid, dst, total) -> None:
        self.sends.append((comm, seq, xid, dst, total, time.perf_counter_ns()))

    def received(self, comm, seq, xid, src, nbytes) -> None:
        t = time.perf_counter_ns()
        r = self.recvs.get((comm, seq, xid))
        if r is None:
            self.recvs[(comm, seq, xid)] = [src, nbytes, t, t]
        else:
            r[1] += nbytes
            r[3] = t

    # --- the file ------------------------------------------------------------------
    def as_dict(self) -> dict:
        return {
            "schema": SCHEMA, "rank": _META.get("rank", 0), "topology": _META.get("topology"),
            "host": socket.gethostname(), "clock": {"perf_ns": self.perf0,
                                                     "wall_ns": self.wall0},
            "calls": [{"comm": c[0], "seq": c[1], "op": c[2], "algorithm": c[3],
                       "bytes": c[4], "dtype": c[5], "size": c[6], "steps": c[7],
                       "t0": c[8], "t1": c[9], "error": c[10]} for c in list(self.calls)],
            "steps": [{"comm": k[0], "seq": k[1], "step": k[2], "kind": s[0], "sends": s[1],
                       "recvs": s[2], "t0": s[3], "t1": s[4]}
                      for k, s in list(self.steps.items())],
            "sends": [{"comm": s[0], "seq": s[1], "xid": s[2], "dst": s[3], "bytes": s[4],
                       "t": s[5]} for s in list(self.sends)],
            "recvs": [{"comm": k[0], "seq": k[1], "xid": k[2], "src": r[0], "bytes": r[1],
                       "t0": r[2], "t1": r[3]} for k, r in list(self.recvs.items())],
        }

    def write(self) -> str:
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"trace-rank{_META.get('rank', 0)}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.as_dict(), f, separators=(",", ":"))
        os.replace(tmp, path)
        return path


def attach(rank: int, topo) -> None:
    """Called by ``init``: the world rank and the topology the files describe."""
    _META["rank"] = int(rank)
    _META["topology"] = {"instance": topo.instance, "lnc": topo.lnc, "nodes": topo.nodes,
                         "ranks": topo.size}


def start_from_env() -> None:
    """``NEURON_MPI_TRACE=DIR``: record from now to exit (called by ``init``)."""
    global ACTIVE
    from . import env

    folder = env.trace_dir()
    if folder is None or ACTIVE is not None:
        return
    rec = Recorder(folder)
    ACTIVE = rec
    import atexit

    atexit.register(_write_at_exit, rec)


def _write_at_exit(rec: Recorder) -> None:
    global ACTIVE
    if ACTIVE is rec:
        ACTIVE = None
    rec.write()


@contextlib.contextmanager
def trace(folder):
    """Record the collectives called inside the block on this rank, and write
    ``folder/trace-rank<R>.json`` when it ends (every rank of the job should enter
    it). Merge the ranks' files with ``neuron-mpi trace FOLDER -o run.json``."""
    global ACTIVE
    if not isinstance(folder, (str, os.PathLike)) or not str(folder):
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"folder: expected a directory path, got {folder!r}")
    previous = ACTIVE
    rec = Recorder(os.fspath(folder))
    ACTIVE = rec
    try:
        yield rec
    finally:
        ACTIVE = previous
        rec.write()
