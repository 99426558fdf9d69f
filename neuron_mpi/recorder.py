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

#: an entry's fields, in the order of the list that holds them while the call runs
#: (a list copied from its shape's template costs a small call less than a dict)
FIELDS = ("comm", "seq", "op", "algorithm", "count", "dtype", "size", "state", "t_start",
          "t_end", "error", "waiting_for")
SEQ, STATE, T_START, T_END, ERROR, WAITING_FOR = (FIELDS.index(f) for f in (
    "seq", "state", "t_start", "t_end", "error", "waiting_for"))


class FlightRecorder:
    def __init__(self, rank: int, depth: int | None = None):
        self.rank = rank
        depth = depth or env.recorder_depth()
        self.entries: collections.deque = collections.deque(maxlen=depth)
        self.comms: dict[int, list[int]] = {}  # communicator id -> world ranks
        self.dumped_to: str | None = None

    def register(self, comm_id: int, ranks) -> None:
        self.comms[comm_id] = list(ranks)

    def start(self, comm_id, seq, op, algorithm, count, dtype, size) -> list:
        return self.start_like(self.template(comm_id, op, algorithm, count, dtype, size),
                               seq)

    @staticmethod
    def template(comm_id, op, algorithm, count, dtype, size) -> list:
        """An entry of a call of this shape, but for its number and start time
        (``start_like``): a kept call makes it once."""
        return [comm_id, 0, op, algorithm, count, dtype, size, "started", None, None, None,
                None]

    def start_like(self, template: list, seq: int) -> list:
        e = template.copy()
        e[SEQ] = seq
        e[T_START] = time.time()
        self.entries.append(e)
        return e

    @staticmethod
    def finish(e: list) -> None:
        e[STATE] = "done"
        e[T_END] = time.time()

    @staticmethod
    def fail(e: list, err: BaseException, waiting_for=None) -> None:
        e[STATE] = "failed"
        e[T_END] = time.time()
        e[ERROR] = f"{type(err).__name__}: {err}"
        e[WAITING_FOR] = waiting_for

    @staticmethod
    def refuse(e: list, err: BaseException) -> None:
        """The call was refused on every member (a member's arguments) before any
        data moved: not a divergence (diagnose passes over it)."""
        FlightRecorder.fail(e, err)
        e[STATE] = "refused"

    def calls(self) -> list[dict]:
        """The entries kept, oldest first, as the dump writes them."""
        return [dict(zip(FIELDS, e)) for e in self.entries]

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
                       "calls": self.calls()}, f, indent=1)
        os.replace(tmp, path)
        self.dumped_to = path
        return path
