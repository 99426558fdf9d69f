"""The flight recorder: each rank keeps its last N calls, dumped on failure.

An entry: communicator id, sequence number, operation, algorithm, element count,
dtype, group size, state (started | done | failed | refused: a member refused its
arguments and every member raised before any data moved, the communicator going
on), start/end times and, for a failure or refusal, the error.
``NEURON_MPI_TRACE_DIR`` names the folder the dumps go to (``rank<world
rank>.json``); ``python -m neuron_mpi.diagnose DIR`` merges them.
"""
from __future__ import annotations

import collections
import json
import os
import time

from . import env

DEFAULT_DEPTH = env.DEFAULT_TRACE_DEPTH


class FlightRecorder:
    def __init__(self, rank: int, depth: int | None = None):
        self.rank = rank
        depth = depth or env.recorder_depth()
        self.entries: collections.deque = collections.deque(maxlen=depth)
        self.comms: dict[int, list[int]] = {}  # communicator id -> world ranks
        self.dumped_to: str | None = None

    def register(self, comm_id: int, ranks) -> None:
        self.comms[comm_id] = list(ranks)

    def start(self, comm_id, seq, op, algorithm, count, dtype, size) -> dict:
        e = {"comm": comm_id, "seq": seq, "op": op, "algorithm": algorithm,
             "count": count, "dtype": dtype, "size": size, "state": "started",
             "t_start": time.time(), "t_end": None, "error": None, "waiting_for": None}
        self.entries.append(e)
        return e

    @staticmethod
    def finish(e: dict) -> None:
        e["state"] = "done"
        e["t_end"] = time.time()

    @staticmethod
    def fail(e: dict, err: BaseException, waiting_for=None) -> None:
        e["state"] = "failed"
        e["t_end"] = time.time()
        e["error"] = f"{type(err).__name__}: {err}"
        e["waiting_for"] = waiting_for

    @staticmethod
    def refuse(e: dict, err: BaseException) -> None:
        """The call was refused on every member (a member's arguments) before any
        data moved: not a divergence (diagnose passes over it)."""
        FlightRecorder.fail(e, err)
        e["state"] = "refused"

    def dump(self, reason: str) -> str | None:
        folder = env.recorder_dir()
        if not folder:
            return None
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank{self.rank}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"rank": self.rank, "reason": reason, "time": time.time(),
                       "comms": {str(k): v for k, v in self.comms.items()},
                       "calls": list(self.entries)}, f, indent=1)
        os.replace(tmp, path)
        self.dumped_to = path
        return path
